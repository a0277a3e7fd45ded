"""nvidia-smi stand-in: replayed captures, query formats, container visibility, /dev and /proc contents."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from simulator.gpu.devfs import create_uvm_nodes, lspci_text, pci_devices
from simulator.gpu.profiles import CAPTURES_DIR

from .conftest import SimHost
from .standins import REPO, ct_smi, make_ct_root, with_userspace

CAPTURES = Path(CAPTURES_DIR)
QUERY = ("index,uuid,name,pci.bus_id,driver_version,power.draw,power.limit,enforced.power.limit,power.max_limit,"
         "utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,clocks.current.sm,"
         "clocks.max.sm,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max")


@pytest.mark.parametrize("profile,folder", [("h200-x2", "h200-x2"), ("rtx-pro-6000-x8", "rtx-pro-6000-x8"),
                                            ("rtx-pro-6000-x8-vm", "rtx-pro-6000-x8-vm")])
def test_topo_replays_captures_byte_exact(make_host: Callable[..., SimHost], profile: str, folder: str) -> None:
    h = make_host(profile)
    assert h.run("nvidia-smi", "topo", "-m").stdout == (CAPTURES / folder / "topo-m.txt").read_text()
    for kind in "rw":
        out = h.run("nvidia-smi", "topo", "-p2p", kind).stdout
        assert out == (CAPTURES / folder / f"topo-p2p-{kind}.txt").read_text()


def test_vm_profile_denies_p2p(make_host: Callable[..., SimHost]) -> None:
    out = make_host("rtx-pro-6000-x8-vm").run("nvidia-smi", "topo", "-p2p", "r").stdout
    assert " GPU0\tX\tCNS\tCNS" in out and "\tOK\t" not in out


def test_query_gpu_matches_capture_shapes(make_host: Callable[..., SimHost]) -> None:
    h = make_host("h200-x2")
    cap = (CAPTURES / "h200-x2" / "query-gpu.csv").read_text().splitlines()
    out = h.run("nvidia-smi", f"--query-gpu={QUERY}", "--format=csv").stdout.splitlines()
    assert out[0] == cap[0]
    def shape(line: str) -> str:
        return re.sub(r"\d+", "N", line)

    assert [shape(x) for x in out[1:]] == [shape(x) for x in cap[1:]]
    bare = h.run("nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits").stdout.splitlines()
    assert re.fullmatch(r"0, GPU-9054e7a3-[0-9a-f-]+, NVIDIA H200, 00000000:00:06\.0, 580\.159\.04, \d+\.\d\d, "
                        r"700\.00, 700\.00, 700\.00, 0, 0, 0, 143771, \d+, \d+, 1980, 5, 5, 16, 16", bare[0])


def test_rtx_identity_from_real_capture(host: SimHost) -> None:
    out = host.run("nvidia-smi", "--query-gpu=index,name,pci.bus_id,power.limit,driver_version",
                   "--format=csv,noheader").stdout.splitlines()
    assert len(out) == 8
    assert out[0] == ("0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 00000000:06:00.0, 600.00 W, 595.58.03")
    assert host.run("nvidia-smi", "-L").stdout.splitlines()[2].startswith("GPU 2: NVIDIA RTX PRO 6000")


def test_unknown_field_is_rejected(host: SimHost) -> None:
    r = host.run("nvidia-smi", "--query-gpu=index,bogus.field", "--format=csv")
    assert r.returncode == 2
    assert r.stdout.startswith('Field "bogus.field" is not a valid field to query.')


def test_dmon_layout_matches_capture(make_host: Callable[..., SimHost]) -> None:
    h = make_host("h200-x2")
    out = h.run("nvidia-smi", "dmon", "-s", "pucvmet", "-c", "1").stdout.splitlines()
    cap = (CAPTURES / "h200-x2" / "dmon-under-load.txt").read_text().splitlines()
    assert out[:2] == cap[:2]
    assert len(out) == 4 and len(out[2]) == len(cap[2])


def test_loop_prints_until_killed(host: SimHost) -> None:
    import subprocess

    from .conftest import SIM

    proc = subprocess.Popen([str(SIM / "bin/host/nvidia-smi"), "--query-gpu=timestamp,index,power.draw",
                             "--format=csv,noheader,nounits", "-lms", "100"], env=host.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.8)
    proc.terminate()
    out, err = proc.communicate(timeout=5)
    lines = out.splitlines()
    assert len(lines) >= 16 and err == ""
    assert re.fullmatch(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}, 0, \d+\.\d\d", lines[0])


def test_container_without_devices_fails_like_real(tmp_path: Path) -> None:
    ct = with_userspace(make_ct_root(tmp_path / "ct", minors=[]))
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        (ct.root / "dev" / name).unlink()
    r = ct_smi(ct)
    assert r.returncode == 9
    assert r.stdout == ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
                        "that the latest NVIDIA driver is installed and running.\n")


def test_container_sees_only_passed_gpus_by_minor(tmp_path: Path) -> None:
    # minors 0/1 are the GPUs at 75:00.0 and 76:00.0 (indices 2/3 on the host)
    ct = with_userspace(make_ct_root(tmp_path / "ct", minors=[0, 1]))
    out = ct_smi(ct, "--query-gpu=index,pci.bus_id", "--format=csv,noheader").stdout
    assert out == "0, 00000000:75:00.0\n1, 00000000:76:00.0\n"
    topo = ct_smi(ct, "topo", "-m").stdout
    assert topo.splitlines()[1].startswith("GPU0\t X \tPIX\t")


#: What the container's nvidia-smi must not import: each costs more than the run's own work (simulator/gpu/smi.py).
HEAVY = ("pathlib", "dataclasses", "typing", "re", "inspect", "urllib", "ipaddress", "json", "enum", "signal",
         "functools", "collections", "datetime")


@pytest.mark.parametrize("args", [["-L"], ["topo", "-m"], ["topo", "-p2p", "r"],
                                  ["--query-gpu=index,uuid,name,pci.bus_id,driver_version", "--format=csv"]])
def test_container_run_imports_only_what_it_needs(tmp_path: Path, args: list[str]) -> None:
    """The four runs of a facts read, as the stub the .run installs runs them: no heavy stdlib module loaded."""
    ct = with_userspace(make_ct_root(tmp_path / "ct"))
    code = ("import io, sys; from simulator.gpu.smi import main; sys.stdout = io.StringIO(); "
            f"rc = main(sys.argv[1:], ct_root={str(ct.root)!r}); out = sys.stdout.getvalue(); "
            f"sys.stdout = sys.__stdout__; print(rc, len(out), sorted(set({HEAVY!r}) & set(sys.modules)))")
    r = subprocess.run([sys.executable, "-S", "-c", code, *args], env=ct.env(PYTHONPATH=str(REPO)),
                       capture_output=True, text=True, timeout=20)
    rc, size, heavy = r.stdout.split(" ", 2)
    assert (rc, heavy) == ("0", "[]\n") and int(size) > 100, r.stdout + r.stderr


def test_driver_mismatch(tmp_path: Path) -> None:
    """Userspace of another version than the host's kernel module (HOST_DRIVER): NVML refuses, as on a real box."""
    ct = with_userspace(make_ct_root(tmp_path / "ct"), "575.57.08")
    r = ct_smi(ct)
    assert r.returncode == 18
    assert r.stdout == "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 575.57\n"


def test_missing_uvm_fault_and_nvidia_modprobe(make_host: Callable[..., SimHost]) -> None:
    h = make_host(missing_uvm=True)
    fs = h.dir / "fs"
    assert not (fs / "dev/nvidia-uvm").exists() and "nvidia-uvm" not in (fs / "proc/devices").read_text()
    assert (fs / "dev/nvidia2").is_char_device() and (fs / "dev/nvidiactl").is_char_device()
    create_uvm_nodes(h.dir)
    assert (fs / "dev/nvidia-uvm").is_char_device() and (fs / "dev/nvidia-uvm-tools").exists()
    assert "509 nvidia-uvm" in (fs / "proc/devices").read_text()
    assert (fs / "etc/modprobe.d/nvidia-uvm.conf").read_text() == "options nvidia_uvm uvm_disable_hmm=1\n"
    assert "595.58.03" in (fs / "proc/driver/nvidia/version").read_text()
    assert "amd_iommu=off iommu=off" in (fs / "proc/cmdline").read_text()


def test_lspci_and_pci_devices() -> None:
    assert "06:00.0 3D controller: NVIDIA Corporation Device 2bb5" in lspci_text("rtx-pro-6000-x8")
    devs = pci_devices("rtx-pro-6000-x8")
    assert len(devs) == 8 and devs[0]["id"] == "0000:06:00.0" and devs[0]["vendor"] == "0x10de"


def test_power_follows_load_file(host: SimHost) -> None:
    idle = [float(x) for x in host.run("nvidia-smi", "--query-gpu=power.draw", "--format=csv,noheader,nounits")
            .stdout.split()]
    load = {"vmid": 120, "updated": time.time() + 60, "minors": list(range(8)), "power_fraction": 0.35,
            "util": 0.95, "mem_fraction": 0.9}
    (host.dir / "gpu" / "load-120.json").write_text(json.dumps(load))
    busy = host.run("nvidia-smi", "--query-gpu=power.draw,utilization.gpu,memory.used,pcie.link.gen.current",
                    "--format=csv,noheader,nounits").stdout.splitlines()
    watts = [float(r.split(", ")[0]) for r in busy]
    assert all(b > 200 for b in watts) and max(idle) < 45
    assert busy[0].split(", ")[1:] == ["95", str(int(97887 * 0.9)), "5"]
