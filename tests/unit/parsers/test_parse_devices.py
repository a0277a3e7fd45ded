"""/proc/devices, ls -l /dev/nvidia*, the passthrough set, nvidia-smi -L, driver version strings."""

from __future__ import annotations

import pytest

from orchestrator.parsers import ParseError
from orchestrator.parsers.devices import (
    DeviceNode,
    nvidia_char_devices,
    parse_dev_listing,
    parse_gpu_list,
    parse_proc_devices,
)
from orchestrator.parsers.driver import (
    detect_driver_mismatch,
    nvidia_smi_status,
    parse_driver_version,
    versions_match,
)
from tests.shared import fixture


def test_proc_devices_capture() -> None:
    majors = parse_proc_devices(fixture("nvidia-smi/h200x2-nvlink/proc-devices.txt"))
    assert majors["nvidia"] == 195 and majors["nvidiactl"] == 195
    assert majors["nvidia-uvm"] == 238
    assert majors["nvidia-caps"] == 241
    assert majors["infiniband_verbs"] == 231  # listed twice: first wins
    assert "virtblk" not in majors  # block device
    assert "loop" not in majors


def test_proc_devices_bare_excerpt_and_garbage() -> None:
    assert parse_proc_devices("511 nvidia-uvm\n195 nvidia\n") == {"nvidia-uvm": 511, "nvidia": 195}
    with pytest.raises(ParseError):
        parse_proc_devices("cat: /proc/devices: No such file or directory\n")


def test_dev_listing_capture_with_caps_sublisting() -> None:
    nodes = parse_dev_listing(fixture("nvidia-smi/h200x2-nvlink/ls-dev-nvidia.txt"))
    by_path = {n.path: n for n in nodes}
    assert set(by_path) == {
        "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
        "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2",
    }
    assert (by_path["/dev/nvidiactl"].major, by_path["/dev/nvidiactl"].minor) == (195, 255)
    assert (by_path["/dev/nvidia-uvm-tools"].major, by_path["/dev/nvidia-uvm-tools"].minor) == (238, 1)
    cap1 = by_path["/dev/nvidia-caps/nvidia-cap1"]
    assert (cap1.major, cap1.minor, cap1.mode, cap1.octal_mode) == (241, 1, "r--------", "0400")
    assert by_path["/dev/nvidia0"].octal_mode == "0666"


def test_passthrough_set_order() -> None:
    text = (
        "crw-rw-rw- 1 root root 195, 254 Jan  1  2026 /dev/nvidia-modeset\n"
        "crw-rw-rw- 1 root root 195,  10 2026-01-01 10:00 /dev/nvidia10\n"
        "crw-rw-rw- 1 root root 195,   2 Jan  1 10:00 /dev/nvidia2\n"
        "crw-rw-rw- 1 root root 511,   1 Jan  1 10:00 /dev/nvidia-uvm-tools\n"
        "crw-rw-rw- 1 root root 511,   0 Jan  1 10:00 /dev/nvidia-uvm\n"
        "crw-rw-rw- 1 root root 195, 255 Jan  1 10:00 /dev/nvidiactl\n"
        "ls: cannot access '/dev/nvidia-nvswitchctl': No such file or directory\n"
        "crw-rw-rw- 1 root root 195,   0 Jan  1 10:00 /dev/nvidia0\n"
        "crw-rw-rw- 1 root root 240,   0 Jan  1 10:00 /dev/nvidia-nvlink\n"
        "lrwxrwxrwx 1 root root 12 Jan  1 10:00 /dev/nvidia-link -> nvidia0\n"
        "\n/dev/nvidia-caps:\ntotal 0\n"
        "cr-------- 1 root root 509, 2 Jan  1 10:00 nvidia-cap2\n"
        "cr-------- 1 root root 509, 1 Jan  1 10:00 nvidia-cap1\n"
    )
    chosen = [n.path for n in nvidia_char_devices(parse_dev_listing(text))]
    assert chosen == [
        "/dev/nvidia0", "/dev/nvidia2", "/dev/nvidia10", "/dev/nvidiactl", "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/nvidia-caps/nvidia-cap1",
        "/dev/nvidia-caps/nvidia-cap2",
    ]


def test_passthrough_set_skips_block_and_duplicates() -> None:
    nodes = [
        DeviceNode("/dev/nvidia0", "c", 195, 0, "rw-rw-rw-"),
        DeviceNode("/dev/nvidia0", "c", 195, 0, "rw-rw-rw-"),
        DeviceNode("/dev/nvidia1", "b", 195, 1, "rw-rw-rw-"),
    ]
    assert [n.path for n in nvidia_char_devices(nodes)] == ["/dev/nvidia0"]


def test_gpu_list_capture() -> None:
    gpus = parse_gpu_list(fixture("nvidia-smi/h200x2-nvlink/list.txt"))
    assert [(g.index, g.name) for g in gpus] == [(0, "NVIDIA H200"), (1, "NVIDIA H200")]
    assert gpus[1].uuid == "GPU-39209553-d5c5-3079-561c-1ea134f16b3c"


def test_gpu_list_mig_no_devices_and_failure() -> None:
    text = ("GPU 0: NVIDIA RTX PRO 6000 Blackwell Server Edition (UUID: GPU-0a1b)\n"
            "  MIG 1g.24gb     Device  0: (UUID: MIG-1234)\n")
    assert [g.name for g in parse_gpu_list(text)] == ["NVIDIA RTX PRO 6000 Blackwell Server Edition"]
    assert parse_gpu_list("No devices were found\n") == []
    with pytest.raises(ParseError):
        parse_gpu_list("Failed to initialize NVML: Driver/library version mismatch\n")


def test_driver_version_proc_open_and_proprietary() -> None:
    v = parse_driver_version(fixture("nvidia-smi/h200x2-nvlink/proc-driver-version.txt"))
    assert (v.version, v.flavor, v.source, v.major) == ("580.159.04", "open", "proc", 580)
    prop = parse_driver_version(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    assert (prop.version, prop.flavor) == ("550.54.14", "proprietary")


def test_driver_version_from_nvidia_smi() -> None:
    assert parse_driver_version(fixture("nvidia-smi/h200x2-nvlink/version.txt")).version == "580.159.04"
    assert parse_driver_version("driver_version\n595.58.03\n595.58.03\n").version == "595.58.03"
    v = parse_driver_version("595.58.03\n" * 8)
    assert (v.version, v.source, v.flavor) == ("595.58.03", "nvidia-smi", None)
    with pytest.raises(ParseError, match="different"):
        parse_driver_version("595.58.03\n590.48.01\n")
    with pytest.raises(ParseError):
        parse_driver_version("cat: /proc/driver/nvidia/version: No such file or directory\n")


def test_nvidia_smi_failure_states() -> None:
    mm = nvidia_smi_status("Failed to initialize NVML: Driver/library version mismatch\n"
                           "NVML library version: 580.95\n", rc=18)
    assert (mm.state, mm.library_version) == ("version_mismatch", "580.95")
    nd = nvidia_smi_status("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                           "Make sure that the latest NVIDIA driver is installed and running.\n", rc=9)
    assert nd.state == "driver_not_loaded" and not nd.ok
    assert nvidia_smi_status("No devices were found\n", rc=6).state == "no_devices"
    assert nvidia_smi_status("Segmentation fault\n", rc=139).state == "error"
    assert nvidia_smi_status(fixture("nvidia-smi/h200x2-nvlink/list.txt")).ok


def test_driver_mismatch_detection() -> None:
    found = detect_driver_mismatch(
        "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n", "580.159.04"
    )
    assert found is not None
    assert (found.kernel_version, found.library_version) == ("580.159.04", "580.95")
    assert "580.95" in found.describe()
    assert detect_driver_mismatch(fixture("nvidia-smi/h200x2-nvlink/version.txt"), "580.159.04") is None
    other = detect_driver_mismatch(fixture("nvidia-smi/h200x2-nvlink/version.txt"), "590.48.01")
    assert other is not None and other.library_version == "580.159"


def test_versions_match() -> None:
    assert versions_match("580.159.04", "580.159.04")
    assert versions_match("580.159.04", "580.159")
    assert not versions_match("580.159.04", "580.95")
    assert not versions_match("580.159.04", "580")
