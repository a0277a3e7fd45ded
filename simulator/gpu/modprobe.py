"""`nvidia-modprobe` on the simulated host, as NVIDIA's nvidia-modprobe.c (main) and nvgetopt parse and act.

Options (option-table.h): `-c/--create-nvidia-device-file=MINOR` (repeatable; `-c 0`, `-c=0` and `-c0` all work,
as nvgetopt accepts an integer glued to its short option), `-u/--unified-memory`, `-m/--modeset`, `-s/--nvswitch`,
`-l/--nvlink`, `-f/--nvidia-capability-device-file=PROC_PATH` (repeatable), `-a/--auto-online-movable`,
`-v`, `-h`. Short options without an argument may be combined (`-um`). What each does here:

- `-u`: loads nvidia-uvm (its /proc/devices line and module parameters). Nodes only for the `-c` minors:
  `-u -c0` makes /dev/nvidia-uvm (minor 0) and /dev/nvidia-uvm-tools (minor 1); `-u` alone makes none.
- no `-u`/`-s`/`-l`: loads nvidia and makes /dev/nvidiaN for each `-c N` (`assign_device_file_name`: minor 255
  is /dev/nvidiactl). A host's boot leaves none of them (simulator/host/reboot.py): the kernel module makes no node.
- `-m`: loads nvidia-modeset and makes /dev/nvidia-modeset (195, 254).
- `-f PATH`: reads `DeviceFileMinor`/`DeviceFileMode` from that /proc/driver/nvidia/capabilities file and makes
  /dev/nvidia-caps/nvidia-cap<minor> with the nvidia-caps major; a missing file fails (exit 1).
An unknown option prints nvgetopt's `unrecognized option` line and exits 1, like the real tool.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .devfs import CTL_MINOR, NVIDIA_MAJOR

MODESET_MINOR = 254

_FLAGS = {"u": "unified-memory", "m": "modeset", "s": "nvswitch", "l": "nvlink", "a": "auto-online-movable",
          "v": "version", "h": "help"}
_ARGS = {"c": "create-nvidia-device-file", "f": "nvidia-capability-device-file"}
_LONG = {v: k for k, v in {**_FLAGS, **_ARGS}.items()}


class Usage(ValueError):
    """nvgetopt rejected the command line (its message, then main's `Invalid commandline` line)."""


@dataclass
class Request:
    minors: list[int] = field(default_factory=list)
    cap_files: list[str] = field(default_factory=list)
    flags: set[str] = field(default_factory=set)


def _int(text: str, arg: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise Usage(f'nvidia-modprobe: invalid integer argument: "{arg}"') from None


def parse(argv: list[str]) -> Request:
    """nvgetopt: `--long[=v]`, `-x[=v]`, combined argument-less shorts, `-c0` (integer glued to a short)."""
    req = Request()
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("-") or arg in ("-", "--"):
            raise Usage(f'nvidia-modprobe: invalid option: "{arg}"')
        name, eq, value = arg.lstrip("-").partition("=")
        if arg.startswith("--"):
            short = _LONG.get(name)
        elif len(name) == 1:
            short = name if name in _FLAGS or name in _ARGS else None
        elif not eq and all(ch in _FLAGS for ch in name):
            req.flags.update(name)
            continue
        elif not eq and name[0] == "c" and name[1:].lstrip("-").isdigit():
            short, eq, value = "c", "=", name[1:]
        else:
            short = None
        if short is None:
            raise Usage(f'nvidia-modprobe: unrecognized option: "{arg}"')
        if short in _FLAGS:
            req.flags.add(short)
            continue
        if not eq:
            if i >= len(argv):
                raise Usage(f'nvidia-modprobe: option "{arg}" requires an argument.')
            value = argv[i]
            i += 1
        if short == "c":
            req.minors.append(_int(value, arg))
        else:
            req.cap_files.append(value)
    return req


def _mknod(path: Path, major: int, minor: int, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        st = path.lstat()
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(major, minor):
            return
        path.unlink()
    os.mknod(path, mode | stat.S_IFCHR, os.makedev(major, minor))
    os.chmod(path, mode)


def _proc_devices_major(fs: Path, name: str) -> int | None:
    devices = fs / "proc/devices"
    for line in devices.read_text().splitlines() if devices.exists() else []:
        parts = line.split()
        if len(parts) == 2 and parts[1] == name and parts[0].isdigit():
            return int(parts[0])
    return None


def _cap_file(fs: Path, proc_path: str) -> tuple[int, int] | None:
    """(minor, mode) from a capability file: `DeviceFileMinor: 1`, `DeviceFileMode: 256` (decimal)."""
    path = fs / proc_path.lstrip("/") if proc_path.startswith("/proc/driver/") else Path(proc_path)
    try:
        text = path.read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        return int(fields["DeviceFileMinor"].strip()), int(fields.get("DeviceFileMode", "438").strip())
    except (KeyError, ValueError):
        return None


def gpu_node_name(minor: int) -> str:
    """nvidia-modprobe-utils.c `assign_device_file_name`: the control device's minor is nvidiactl."""
    return "nvidiactl" if minor == CTL_MINOR else f"nvidia{minor}"


def run(req: Request, load_uvm: object, fs: Path, caps_major: int) -> int:
    """Act as main() does; `load_uvm(create_nodes)` loads nvidia-uvm (and makes its nodes). Returns the exit code."""
    if "u" in req.flags and not ({"s", "l"} & req.flags):
        assert callable(load_uvm)
        load_uvm(0 in req.minors)
    elif not ({"s", "l", "a"} & req.flags):
        for minor in req.minors:
            _mknod(fs / "dev" / gpu_node_name(minor), NVIDIA_MAJOR, minor, 0o666)
    if "m" in req.flags:
        _mknod(fs / "dev/nvidia-modeset", NVIDIA_MAJOR, MODESET_MINOR, 0o666)
    for proc_path in req.cap_files:
        cap = _cap_file(fs, proc_path)
        major = _proc_devices_major(fs, "nvidia-caps") or caps_major
        if cap is None:
            return 1
        (fs / "dev/nvidia-caps").mkdir(mode=0o755, exist_ok=True)
        _mknod(fs / "dev/nvidia-caps" / f"nvidia-cap{cap[0]}", major, cap[0], cap[1] & 0o777)
    return 0


def nvml_makes_nodes(fs: Path, minors: list[int], caps_major: int) -> None:
    """What NVML does as root when /dev/nvidiactl or a GPU's node is missing (`nvidia-smi`, nvidia-persistenced at
    its start): runs nvidia-modprobe -c for each missing minor. It never makes the uvm, modeset or caps nodes."""
    missing = [m for m in [*minors, CTL_MINOR] if not (fs / "dev" / gpu_node_name(m)).exists()]
    if missing:
        run(Request(minors=missing), None, fs, caps_major)


def main_usage(exc: Usage) -> int:
    print(str(exc), file=sys.stderr)
    print("nvidia-modprobe: Invalid commandline, please run `nvidia-modprobe --help` for usage information.",
          file=sys.stderr)
    return 1
