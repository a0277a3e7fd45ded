"""The devN plan: exactly the host's NVIDIA nodes, stable numbering, other devices untouched."""

import pytest

from orchestrator.parsers.devices import nvidia_char_devices, parse_dev_listing
from orchestrator.steps.container import device_plan
from tests.shared import NVIDIA_SMI

FIXTURES = NVIDIA_SMI


@pytest.fixture
def h200_nodes():
    listing = FIXTURES / "h200x2-nvlink" / "ls-dev-nvidia.txt"
    return nvidia_char_devices(parse_dev_listing(listing.read_text()))


def test_fresh_container_gets_every_node(h200_nodes):
    to_set, to_delete = device_plan({}, h200_nodes)
    paths = [v.split(",")[0] for v in to_set.values()]
    assert paths[:2] == ["/dev/nvidia0", "/dev/nvidia1"]
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} <= set(paths)
    assert all(v.endswith("mode=0666") for v in to_set.values())
    assert to_delete == []


def test_converged_config_needs_nothing(h200_nodes):
    to_set, _ = device_plan({}, h200_nodes)
    again, delete = device_plan(dict(to_set), h200_nodes)
    assert again == {} and delete == []


def test_stale_gpu_node_is_deleted_and_foreign_device_kept(h200_nodes):
    to_set, _ = device_plan({}, h200_nodes)
    conf = dict(to_set)
    conf["dev40"] = "/dev/nvidia7,mode=0666"  # a GPU that no longer exists on the host
    conf["dev41"] = "/dev/dri/renderD128,gid=44"  # not ours
    new_set, delete = device_plan(conf, h200_nodes)
    assert delete == ["dev40"]
    assert "dev41" not in new_set and "dev41" not in delete


def test_foreign_device_index_is_skipped(h200_nodes):
    to_set, _ = device_plan({"dev0": "/dev/dri/card0"}, h200_nodes)
    assert "dev0" not in to_set
    assert to_set["dev1"].startswith("/dev/nvidia0")


def test_pve_defaults_in_property_strings_are_not_drift():
    from orchestrator.steps.container import same_value

    assert same_value("net0", "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:98:22:BB,ip=dhcp,type=veth",
                      "name=eth0,bridge=vmbr0,ip=dhcp")
    assert not same_value("net0", "name=eth0,bridge=vmbr1,ip=dhcp", "name=eth0,bridge=vmbr0,ip=dhcp")
    assert same_value("features", "nesting=1", "nesting=1")
    assert not same_value("cores", "16", "32")
    assert not same_value("onboot", None, "1")
