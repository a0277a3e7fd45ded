"""The host's GPU hardware as PVE and the host tools see it. Delegates to part 2's `simulator.gpu.devfs`
(which replays the real captures) and falls back to a minimal built-in description if that is not importable,
so the PVE side keeps working on its own.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from simulator.config import PROFILE_GPU_COUNT, HostConfig

_RTX_BUSES = ("06", "07", "75", "76", "84", "85", "f4", "f5")
_H200_BUSES = ("00:06", "00:07")


def _fallback_pci(profile: str) -> list[dict[str, Any]]:
    rtx = profile.startswith("rtx")
    ids = [f"0000:{b}:00.0" for b in _RTX_BUSES] if rtx else [f"0000:{b}.0" for b in _H200_BUSES]
    name = "GB202GL [RTX PRO 6000 Blackwell Server Edition]" if rtx else "GH100 [H200 SXM 141GB]"
    return [{"id": i, "class": "0x030200", "vendor": "0x10de", "vendor_name": "NVIDIA Corporation",
             "device": "0x2bb5" if rtx else "0x2335", "device_name": name, "iommugroup": -1, "mdev": False,
             "subsystem_vendor": "0x10de", "subsystem_device": "0x204e" if rtx else "0x18bf"} for i in ids]


def pci_devices(cfg: HostConfig) -> list[dict[str, Any]]:
    try:
        from simulator.gpu.devfs import pci_devices as part2
    except ImportError:
        return _fallback_pci(cfg.gpu_profile)
    return part2(cfg.gpu_profile)


def lspci_text(cfg: HostConfig) -> str:
    """`lspci -vvv`-style text (one block per device, blank-line separated)."""
    try:
        from simulator.gpu.devfs import lspci_text as part2
    except ImportError:
        return "\n".join(f"{d['id'][5:]} 3D controller: NVIDIA Corporation {d['device_name']} (rev a1)\n"
                         for d in _fallback_pci(cfg.gpu_profile))
    return part2(cfg.gpu_profile)


def _mknod(path: Path, major: int, minor: int, mode: int = 0o666) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    os.mknod(path, mode | stat.S_IFCHR, os.makedev(major, minor))
    os.chmod(path, mode)


def provision(host_dir: Path, cfg: HostConfig) -> None:
    """NVIDIA nodes, /proc/devices, driver version and module parameters in the host's fs/."""
    try:
        from simulator.gpu.devfs import provision_gpu_host
    except ImportError:
        fs = host_dir / "fs"
        for i in range(PROFILE_GPU_COUNT[cfg.gpu_profile]):
            _mknod(fs / "dev" / f"nvidia{i}", 195, i)
        _mknod(fs / "dev" / "nvidiactl", 195, 255)
        set_uvm(host_dir, cfg, present=not cfg.faults.missing_uvm)
        ver = fs / "proc" / "driver" / "nvidia" / "version"
        ver.parent.mkdir(parents=True, exist_ok=True)
        ver.write_text(f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {cfg.driver_version}  "
                       "Release Build  (dvs-builder@U22-I3-AE18-23-3)  \nGCC version:  gcc version 12.2.0\n")
        return
    provision_gpu_host(host_dir, cfg.gpu_profile, cfg.driver_version, cfg.faults.missing_uvm)
    if cfg.faults.driver_reload and not cfg.faults.missing_uvm:
        _set_uvm_major(host_dir / "fs", uvm_major(cfg))


FALLBACK_UVM_MAJOR = 511


def uvm_major(cfg: HostConfig) -> int:
    """nvidia-uvm's dynamic major now: the capture's, or one below it after the `driver_reload` fault."""
    try:
        from simulator.gpu.profiles import get_profile
    except ImportError:
        base = FALLBACK_UVM_MAJOR
    else:
        base = get_profile(cfg.gpu_profile).uvm_major
    return base - 1 if cfg.faults.driver_reload else base


def _set_uvm_major(fs: Path, major: int) -> None:
    """Give the loaded nvidia-uvm this major: its /proc/devices line and both nodes."""
    for name, minor in (("nvidia-uvm", 0), ("nvidia-uvm-tools", 1)):
        node = fs / "dev" / name
        if node.exists() and os.major(node.stat().st_rdev) != major:
            _mknod(node, major, minor)
    devices = fs / "proc" / "devices"
    if devices.exists():
        devices.write_text("".join(f"{major:>3} nvidia-uvm\n" if line.rstrip().endswith(" nvidia-uvm") else line
                                   for line in devices.read_text().splitlines(keepends=True)))


def set_uvm(host_dir: Path, cfg: HostConfig, present: bool) -> None:
    """Load (`nvidia-modprobe -u -c=0`) or "unload" nvidia-uvm: its nodes and its /proc/devices line."""
    fs = host_dir / "fs"
    if present:
        try:
            from simulator.gpu.devfs import create_uvm_nodes
        except ImportError:
            _mknod(fs / "dev" / "nvidia-uvm", FALLBACK_UVM_MAJOR, 0)
            _mknod(fs / "dev" / "nvidia-uvm-tools", FALLBACK_UVM_MAJOR, 1)
        else:
            create_uvm_nodes(host_dir)
        _set_uvm_major(fs, uvm_major(cfg))
        return
    for name in ("nvidia-uvm", "nvidia-uvm-tools"):
        (fs / "dev" / name).unlink(missing_ok=True)
    devices = fs / "proc" / "devices"
    if devices.exists():
        devices.write_text("".join(line for line in devices.read_text().splitlines(keepends=True)
                                   if not line.rstrip().endswith(" nvidia-uvm")))


def load_uvm_module(host_dir: Path, cfg: HostConfig) -> None:
    """nvidia-uvm loaded but no node made (`nvidia-modprobe -u` without `-c`): its /proc/devices line only."""
    from simulator.gpu.devfs import proc_devices_text
    from simulator.gpu.profiles import get_profile

    fs = host_dir / "fs"
    (fs / "proc/devices").write_text(proc_devices_text(get_profile(cfg.gpu_profile), with_uvm=True))
    _set_uvm_major(fs, uvm_major(cfg))


def boot_nodes(host_dir: Path, cfg: HostConfig) -> None:
    """A fresh boot: the NVIDIA module is loaded but has made no node, and nvidia-uvm is not loaded. Every
    /dev/nvidia* node (nvidiaN, nvidiactl, uvm, modeset, caps) is gone until something creates it: nvidia-modprobe
    (`-c N`, `-c 255` for nvidiactl, `-u -c0`, `-m`, `-f`), or NVML (nvidia-smi, nvidia-persistenced) calling it."""
    import shutil

    set_uvm(host_dir, cfg, present=False)
    dev = host_dir / "fs" / "dev"
    for path in dev.glob("nvidia*") if dev.is_dir() else []:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
