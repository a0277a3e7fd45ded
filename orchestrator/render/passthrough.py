"""GPU passthrough lines for `/etc/pve/lxc/<vmid>.conf`: native `devN` (PVE ≥ 8.1) or raw `lxc.*` (older PVE).

Input is what the host shows: its NVIDIA device nodes (`parse_dev_listing`), its `/proc/devices` majors and the
container config that exists already. Every NVIDIA character device is passed (GPU nodes use driver minor numbers,
so index→node mapping is never attempted).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from orchestrator.errors import ConfigError
from orchestrator.parsers.devices import DeviceNode, nvidia_char_devices
from orchestrator.render.files import RenderedFile, render_template, sha256_text

Method = Literal["devN", "raw-lxc"]
_DEV_KEY = re.compile(r"^dev(\d+)$")
_MAX_DEVICES = 256  # pve-container $MAX_DEVICES


@dataclass(frozen=True)
class DevEntry:
    key: str  # dev0
    path: str
    options: str  # mode=0666[,uid=..][,gid=..]

    @property
    def value(self) -> str:
        return f"{self.path},{self.options}"


def resolve_method(requested: str, pve_version: str | None) -> tuple[Method, str]:
    """auto → devN on PVE ≥ 8.1 (or when the version is unknown: the preferred method), raw-lxc below 8.1."""
    ver = _version_tuple(pve_version) if pve_version else None
    if requested == "auto":
        if ver is None:
            return "devN", "PVE version unknown: assuming ≥ 8.1 (devN); pass --pve-version to decide"
        if ver >= (8, 1):
            return "devN", f"PVE {pve_version} ≥ 8.1: native devN passthrough"
        return "raw-lxc", f"PVE {pve_version} < 8.1: raw lxc.cgroup2/lxc.mount.entry lines"
    if requested == "devN":
        if ver is not None and ver < (8, 1):
            raise ConfigError(f"devN passthrough needs PVE ≥ 8.1 (pve-container 5.0.7); this host runs {pve_version}",
                              fix="use --method raw-lxc (or passthrough: raw-lxc in the inventory), or upgrade PVE")
        return "devN", "devN requested"
    if requested == "raw-lxc":
        return "raw-lxc", "raw-lxc requested"
    raise ConfigError(f"unknown passthrough method {requested!r}", fix="use auto, devN or raw-lxc")


def _version_tuple(text: str) -> tuple[int, ...]:
    m = re.match(r"^\s*(\d+)(?:\.(\d+))?", text)
    if not m:
        raise ConfigError(f"PVE version {text!r} is not like 8.1 or 9.0.3", fix="pass --pve-version X.Y")
    return (int(m.group(1)), int(m.group(2) or 0))


def select_nodes(nodes: Sequence[DeviceNode]) -> list[DeviceNode]:
    """NVIDIA char devices in passthrough order; refuses a set CUDA cannot work with."""
    chosen = nvidia_char_devices(list(nodes))
    paths = {n.path for n in chosen}
    if not any(re.fullmatch(r"/dev/nvidia\d+", p) for p in paths):
        raise ConfigError("no /dev/nvidiaN GPU node on the host", fix="load the NVIDIA driver on the host "
                          "(nvidia-smi must list the GPUs) and capture `ls -l /dev/nvidia* /dev/nvidia-caps/*` again")
    for required, fix in (("/dev/nvidiactl", "load the nvidia kernel module on the host"),
                          ("/dev/nvidia-uvm", "create it on the host before the container starts: "
                                              "`nvidia-modprobe -u -c0` (`deploy up` installs a unit that does it at "
                                              "boot)")):
        if required not in paths:
            raise ConfigError(f"{required} does not exist on the host; CUDA needs it in the container", fix=fix)
    return chosen


def dev_entries(nodes: Sequence[DeviceNode], existing_conf: Mapping[str, str], *, start_index: int = 0,
                mode: str = "0666", uid: int | None = None, gid: int | None = None) -> list[DevEntry]:
    """devN entries numbered from start_index, skipping indices held by non-NVIDIA devN entries.

    Existing devN entries that point at /dev/nvidia* are replaced (their indices are free), so re-rendering for a
    converged container gives the same lines.
    """
    if not re.fullmatch(r"0[0-7]{3}", mode):
        raise ConfigError(f"devN mode {mode!r} must be octal like 0666", fix="e.g. mode=0666")
    taken: set[int] = set()
    for key, value in existing_conf.items():
        m = _DEV_KEY.match(key)
        if m and not _is_nvidia_dev(value):
            taken.add(int(m.group(1)))
    options = f"mode={mode}" + (f",uid={uid}" if uid is not None else "") + (f",gid={gid}" if gid is not None else "")
    out: list[DevEntry] = []
    idx = start_index
    for node in select_nodes(nodes):
        while idx in taken:
            idx += 1
        if idx >= _MAX_DEVICES:
            raise ConfigError(f"no free devN index below {_MAX_DEVICES} for {node.path}",
                              fix="remove unused devN entries from the container config")
        out.append(DevEntry(f"dev{idx}", node.path, options))
        idx += 1
    return out


def _is_nvidia_dev(value: str) -> bool:
    path = value.split(",", 1)[0]
    if path.startswith("path="):
        path = path[5:]
    return path.startswith("/dev/nvidia")


def raw_lines(nodes: Sequence[DeviceNode], proc_devices: Mapping[str, int]) -> list[tuple[str, str]]:
    """(key, value) lines of the raw method: cgroup2 allow rules per major, then one bind mount per node."""
    chosen = select_nodes(nodes)
    if "nvidia-uvm" not in proc_devices:
        raise ConfigError("/proc/devices on the host has no nvidia-uvm major",
                          fix="load nvidia_uvm on the host (`nvidia-modprobe -u -c0`) and capture /proc/devices again")
    nvidia_major = proc_devices.get("nvidia", 195)
    majors = [nvidia_major, proc_devices["nvidia-uvm"]]
    caps = [n for n in chosen if n.path.startswith("/dev/nvidia-caps/")]
    if caps and "nvidia-caps" in proc_devices:
        majors.append(proc_devices["nvidia-caps"])
    lines: list[tuple[str, str]] = []
    for major in dict.fromkeys(majors):
        lines.append(("lxc.cgroup2.devices.allow", f"c {major}:* rwm"))
    for node in chosen:
        if node.path.startswith("/dev/nvidia-caps/"):
            continue
        rel = node.path.lstrip("/")
        lines.append(("lxc.mount.entry", f"{node.path} {rel} none bind,optional,create=file"))
    if caps:
        lines.append(("lxc.mount.entry", "/dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir"))
    return lines


def render_passthrough(nodes: Sequence[DeviceNode], existing_conf_keys: Mapping[str, str],
                       proc_devices: Mapping[str, int], method: Method, *, vmid: int | None = None,
                       start_index: int = 0, mode: str = "0666", uid: int | None = None,
                       gid: int | None = None) -> RenderedFile:
    """The passthrough fragment of `/etc/pve/lxc/<vmid>.conf` (lines to merge, not a whole file).

    `existing_conf_keys` is the container's current config as key → value (devN values decide which indices are
    held by non-NVIDIA devices). No comment lines: leading `#` lines of a PVE config are the CT's description.
    """
    remote = f"/etc/pve/lxc/{vmid}.conf" if vmid is not None else "/etc/pve/lxc/<vmid>.conf"
    if method == "devN":
        entries = dev_entries(nodes, existing_conf_keys, start_index=start_index, mode=mode, uid=uid, gid=gid)
        content = render_template("lxc-devices.conf.j2", entries=entries)
        name = "passthrough-devN"
    elif method == "raw-lxc":
        content = render_template("lxc-raw.conf.j2", lines=raw_lines(nodes, proc_devices))
        name = "passthrough-raw-lxc"
    else:
        raise ConfigError(f"unknown passthrough method {method!r}", fix="use devN or raw-lxc")
    return RenderedFile(name=name, remote_path=remote, mode=0o640, content=content, sha256=sha256_text(content))
