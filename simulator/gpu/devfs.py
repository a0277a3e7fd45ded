"""The host's NVIDIA-related files under <host_dir>/fs: device nodes, /proc/devices, driver version, cmdline.

Part 1's SSH shell binds fs/dev over /dev and fs/proc/... over /proc/..., so what is written here is what
`ls -l /dev/nvidia*`, `cat /proc/devices` and `cat /proc/driver/nvidia/version` show on the simulated host.
Majors/minors follow the profile (real H200 capture; PVE-like dynamic majors for the RTX box), which is
what devN passthrough and the container's visibility of each GPU (by minor) depend on.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from .profiles import CAPTURES_DIR, GpuProfile, get_profile
from .simctx import DEFAULT_PROFILE, read_json

CAPTURES = Path(CAPTURES_DIR)
NVIDIA_MAJOR = 195
CTL_MINOR = 255
PROC_DEVICES_TEMPLATE = CAPTURES / "h200-x2" / "proc-devices.txt"
DRIVER_VERSION_TEMPLATE = CAPTURES / "h200-x2" / "proc-driver-version.txt"
CMDLINE_CAPTURE = CAPTURES / "rtx-pro-6000-x8" / "proc-cmdline.txt"
LSPCI_CAPTURE = CAPTURES / "rtx-pro-6000-x8" / "lspci-vvv.txt"
DYNAMIC_NAMES = ("nvidia-uvm", "nvidia-caps", "nvidia-caps-imex-channels")


def _mknod(path: Path, major: int, minor: int, mode: int) -> None:
    """Create a char device node; without CAP_MKNOD fall back to a plain file so non-root dev still works."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    try:
        os.mknod(path, mode | stat.S_IFCHR, os.makedev(major, minor))
    except PermissionError:
        path.write_text("")
    os.chmod(path, mode)


def proc_devices_text(profile: GpuProfile, with_uvm: bool) -> str:
    """The real /proc/devices capture with this profile's dynamic NVIDIA majors (and uvm only when loaded)."""
    text = PROC_DEVICES_TEMPLATE.read_text()
    char, _, block = text.partition("\nBlock devices:")
    lines = char.split("\n")
    head, entries = lines[0], [ln for ln in lines[1:] if ln.strip()]
    kept = [ln for ln in entries if ln.split(None, 1)[1] not in DYNAMIC_NAMES]
    extra = [(profile.caps_major, "nvidia-caps"), (profile.caps_imex_major, "nvidia-caps-imex-channels")]
    if with_uvm:
        extra.append((profile.uvm_major, "nvidia-uvm"))
    kept += [f"{major:>3} {name}" for major, name in extra]
    kept.sort(key=lambda ln: int(ln.split()[0]))  # stable: keeps the capture's order within a major
    return "\n".join([head, *kept, ""]) + "\nBlock devices:" + block


def driver_version_text(version: str) -> str:
    """/proc/driver/nvidia/version: the real capture's layout with this host's module version."""
    return re.sub(r"\d+\.\d+\.\d+", version, DRIVER_VERSION_TEMPLATE.read_text(), count=1)


def _uvm(fs: Path, profile: GpuProfile, present: bool) -> None:
    dev = fs / "dev"
    for name, minor in (("nvidia-uvm", 0), ("nvidia-uvm-tools", 1)):
        if present:
            _mknod(dev / name, profile.uvm_major, minor, 0o666)
        elif (dev / name).exists():
            (dev / name).unlink()
    params = fs / "sys/module/nvidia_uvm/parameters"
    if present:
        params.mkdir(parents=True, exist_ok=True)
        (params / "uvm_disable_hmm").write_text("Y\n")


def provision_gpu_host(host_dir: Path, profile_name: str, driver_version: str | None, missing_uvm: bool) -> None:
    """Write everything GPU-related of the host's fs/ (idempotent)."""
    profile = get_profile(profile_name)
    fs = host_dir / "fs"
    dev = fs / "dev"
    for gpu in profile.gpus:
        _mknod(dev / f"nvidia{gpu.minor}", NVIDIA_MAJOR, gpu.minor, 0o666)
    _mknod(dev / "nvidiactl", NVIDIA_MAJOR, CTL_MINOR, 0o666)
    _mknod(dev / "nvidia-caps" / "nvidia-cap1", profile.caps_major, 1, 0o400)
    _mknod(dev / "nvidia-caps" / "nvidia-cap2", profile.caps_major, 2, 0o444)
    _uvm(fs, profile, not missing_uvm)
    (fs / "proc/driver/nvidia").mkdir(parents=True, exist_ok=True)
    (fs / "proc/driver/nvidia/version").write_text(driver_version_text(driver_version or profile.driver_version))
    mig = fs / "proc/driver/nvidia/capabilities/mig"  # what `nvidia-modprobe -f` reads to make the caps nodes
    mig.mkdir(parents=True, exist_ok=True)
    for name, minor, mode in (("config", 1, 0o400), ("monitor", 2, 0o444)):
        (mig / name).write_text(f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n")
    (fs / "proc/devices").write_text(proc_devices_text(profile, with_uvm=not missing_uvm))
    (fs / "proc/cmdline").write_bytes(CMDLINE_CAPTURE.read_bytes())
    (fs / "etc/modprobe.d").mkdir(parents=True, exist_ok=True)
    (fs / "etc/modprobe.d/nvidia-uvm.conf").write_text("options nvidia_uvm uvm_disable_hmm=1\n")
    (host_dir / "gpu").mkdir(parents=True, exist_ok=True)


def create_uvm_nodes(host_dir: Path) -> None:
    """What `nvidia-modprobe -u -c=0` does: load nvidia-uvm (the /proc/devices line) and mknod its nodes."""
    profile = get_profile(str(read_json(host_dir / "host.json").get("gpu_profile") or DEFAULT_PROFILE))
    fs = host_dir / "fs"
    _uvm(fs, profile, True)
    (fs / "proc").mkdir(parents=True, exist_ok=True)
    (fs / "proc/devices").write_text(proc_devices_text(profile, with_uvm=True))


def lspci_text(profile: str) -> str:
    """`lspci -vvv` of the box: the real ASUS capture for the RTX profiles, a minimal one for the H200 pair."""
    prof = get_profile(profile)
    if prof.ident_dir == "rtx-pro-6000-x8":
        return LSPCI_CAPTURE.read_text()
    out = []
    for gpu in prof.gpus:
        out.append(f"{gpu.bus_id[9:].lower()} 3D controller: NVIDIA Corporation GH100 [H200 SXM 141GB] (rev a1)\n"
                   "\tSubsystem: NVIDIA Corporation Device 18bf\n\tKernel driver in use: nvidia\n"
                   "\tKernel modules: nvidia\n")
    return "\n".join(out)


def pci_devices(profile: str) -> list[dict[str, Any]]:
    """The GPUs as PVE's GET /nodes/{node}/hardware/pci lists them (iommugroup -1: IOMMU is off on the box)."""
    prof = get_profile(profile)
    rtx = prof.ident_dir == "rtx-pro-6000-x8"
    device, subsys = ("0x2bb5", "0x204e") if rtx else ("0x2335", "0x18bf")
    name = "GB202GL [RTX PRO 6000 Blackwell Server Edition]" if rtx else "GH100 [H200 SXM 141GB]"
    return [
        {
            "id": "0000:" + gpu.bus_id[9:].lower(),
            "class": "0x030200",
            "vendor": "0x10de",
            "vendor_name": "NVIDIA Corporation",
            "device": device,
            "device_name": name,
            "subsystem_vendor": "0x10de",
            "subsystem_vendor_name": "NVIDIA Corporation",
            "subsystem_device": subsys,
            "subsystem_device_name": "",
            "iommugroup": -1,
            "mdev": False,
        }
        for gpu in prof.gpus
    ]
