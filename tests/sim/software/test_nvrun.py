"""The NVIDIA .run stand-in in a real container: refusal without --no-kernel-module, userspace files at its
version, the replaying nvidia-smi reading only the ctside mounts, rerun/uninstall replacing the files.

The "container" is a directory laid out like one ($DEPLOY_SIM_CT_ROOT); the .run runs with /usr/bin/python3
and nothing of the repo on its path, as in a bare Debian container.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from simulator.software.installer import write_installer
from simulator.software.nvrun import LOG

from .standins import HOST_DRIVER, CtRoot, make_ct_root

FLAGS = ("--silent", "--no-kernel-module", "--ui=none", "--no-questions", "--accept-license")
LIB = "usr/lib/x86_64-linux-gnu"


@pytest.fixture
def ct(tmp_path: Path) -> CtRoot:
    return make_ct_root(tmp_path / "ct")


def run_file(tmp_path: Path, version: str) -> Path:
    """The host's .run at `version`, copied where the tool pushes it (the container's /root)."""
    host = write_installer(tmp_path / f"host-{version}", version)
    return host


def run(argv: list[str], ct: CtRoot, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=ct.env(PATH="/usr/bin:/bin"), cwd=ct.root, capture_output=True, text=True,
                          timeout=timeout)


def smi(ct: CtRoot, *args: str) -> subprocess.CompletedProcess[str]:
    return run([str(ct.root / "usr/bin/nvidia-smi"), *args], ct)


def test_refuses_kernel_modules_in_a_container(tmp_path: Path, ct: CtRoot) -> None:
    res = run([str(run_file(tmp_path, HOST_DRIVER)), "--silent", "--ui=none", "--accept-license"], ct)
    assert res.returncode == 1
    assert "An NVIDIA kernel module 'nvidia' appears to already be loaded in your kernel" in res.stderr
    assert "ERROR: Installation has failed." in res.stderr
    assert "appears to already be loaded" in (ct.root / LOG).read_text()
    assert not (ct.root / "usr/bin/nvidia-smi").exists() and not (ct.root / LIB).exists()


def test_unknown_option_is_refused(tmp_path: Path, ct: CtRoot) -> None:
    res = run([str(run_file(tmp_path, HOST_DRIVER)), "--no-kernel-module", "--frobnicate"], ct)
    assert res.returncode == 1 and 'Unrecognized option: "--frobnicate"' in res.stderr
    assert not (ct.root / LIB).exists()


@pytest.mark.parametrize("flag", ["--no-kernel-module", "--no-kernel-modules"])
def test_installs_userspace_at_its_version_and_nvidia_smi_replays(tmp_path: Path, ct: CtRoot, flag: str) -> None:
    flags = [flag if f == "--no-kernel-module" else f for f in FLAGS]
    res = run([str(run_file(tmp_path, HOST_DRIVER)), *flags], ct)
    assert res.returncode == 0, res.stderr
    lib = ct.root / LIB
    for name in ("libnvidia-ml.so", "libcuda.so"):
        assert (lib / f"{name}.{HOST_DRIVER}").is_file()
        assert (lib / f"{name}.1").readlink() == Path(f"{name}.{HOST_DRIVER}")
    assert (lib / "libcuda.so").readlink() == Path("libcuda.so.1")
    log = (ct.root / LOG).read_text()
    assert f"(version: {HOST_DRIVER}) is now complete" in log and flag in log
    listing = smi(ct, "-L")
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.count("NVIDIA RTX PRO 6000 Blackwell Server Edition") == 8
    q = smi(ct, "--query-gpu=index,driver_version", "--format=csv,noheader")
    assert q.stdout.splitlines() == [f"{i}, {HOST_DRIVER}" for i in range(8)]


def test_the_tool_s_installer_flags_are_accepted(tmp_path: Path, ct: CtRoot) -> None:
    from orchestrator.steps.gpu import INSTALLER_FLAGS

    pushed = ct.root / "tmp" / "deploy-nvidia-userspace.run"  # as the tool pushes and runs it: sh FILE FLAGS
    pushed.parent.mkdir()
    pushed.write_bytes(run_file(tmp_path, HOST_DRIVER).read_bytes())
    res = run(["sh", str(pushed), *INSTALLER_FLAGS], ct)
    assert res.returncode == 0, res.stderr
    assert (ct.root / LIB / "libnvidia-ml.so.1").is_symlink()


def test_nvidia_smi_follows_the_container_s_devices_and_load(tmp_path: Path) -> None:
    ct = make_ct_root(tmp_path / "ct", minors=[3])
    assert run([str(run_file(tmp_path, HOST_DRIVER)), *FLAGS], ct).returncode == 0
    assert smi(ct, "-L").stdout.count("GPU ") == 1
    (ct.sim / "gpu" / "load-120.json").write_text(json.dumps(
        {"vmid": 120, "pid": 1, "updated": 4e9, "minors": [3], "power_fraction": 0.5, "util": 0.9,
         "mem_fraction": 0.85, "pcie_rx_mb_s": 100, "pcie_tx_mb_s": 100}))
    util = smi(ct, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits")
    assert util.returncode == 0 and int(util.stdout.strip()) > 50, util.stdout
    (ct.root / "dev" / "nvidiactl").unlink()
    gone = smi(ct, "-L")
    assert gone.returncode == 9 and "couldn't communicate with the NVIDIA driver" in gone.stdout


def test_rerun_at_another_version_replaces_and_uninstall_removes(tmp_path: Path, ct: CtRoot) -> None:
    assert run([str(run_file(tmp_path, HOST_DRIVER)), *FLAGS], ct).returncode == 0
    other = "575.57.08"
    res = run([str(run_file(tmp_path, other)), "--no-kernel-module", "--ui=none", "--accept-license"], ct)
    assert res.returncode == 0 and f"There appears to already be a driver installed on your system (version: " \
        f"{HOST_DRIVER})" in res.stdout
    lib = ct.root / LIB
    assert not (lib / f"libnvidia-ml.so.{HOST_DRIVER}").exists()
    assert (lib / "libnvidia-ml.so.1").readlink() == Path(f"libnvidia-ml.so.{other}")
    mismatch = smi(ct)
    assert mismatch.returncode == 18
    assert mismatch.stdout == ("Failed to initialize NVML: Driver/library version mismatch\n"
                               "NVML library version: 575.57\n")
    un = run([str(ct.root / "usr/bin/nvidia-installer"), "--uninstall", "--silent"], ct)
    assert un.returncode == 0, un.stderr
    assert not (ct.root / "usr/bin/nvidia-smi").exists() and not list(lib.glob("libnvidia-ml.so*"))
    assert f"Uninstalling NVIDIA driver version {other}." in (ct.root / LOG).read_text()
    again = run([str(run_file(tmp_path, other)), "--uninstall"], ct)
    assert again.returncode == 1 and "No NVIDIA driver is currently installed" in again.stderr

