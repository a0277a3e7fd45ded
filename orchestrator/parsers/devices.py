"""Device nodes and majors: `/proc/devices`, `ls -l /dev/nvidia*`, `nvidia-smi -L`.

Why: the container needs every NVIDIA character device, and two majors are dynamic (`nvidia-uvm`,
`nvidia-caps`): they change with kernel/driver updates, so they are read from the host, never hard-coded.
GPU node numbers are driver minor numbers, not nvidia-smi indices, so the passthrough set is "every node",
never a mapping from index to node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from orchestrator.parsers import ParseError, strip_ansi

__all__ = [
    "DeviceNode",
    "GpuListEntry",
    "nvidia_char_devices",
    "parse_dev_listing",
    "parse_gpu_list",
    "parse_proc_devices",
]

_PROC_DEV_RE = re.compile(r"^\s*(\d+)\s+(\S+)\s*$")
# `crw-rw-rw- 1 root root 195,   0 Nov 30 02:03 /dev/nvidia0` (any date style; the name is the last field)
_LS_RE = re.compile(
    r"^(?P<type>[cb])(?P<perm>[-rwxsStT]{9})[.+@]?\s+\d+\s+(?P<owner>\S+)\s+(?P<group>\S+)\s+"
    r"(?P<major>\d+),\s*(?P<minor>\d+)\s+.*?(?P<name>\S+)$"
)
_GPU_NODE_RE = re.compile(r"^/dev/nvidia(\d+)$")
_CAP_NODE_RE = re.compile(r"^/dev/nvidia-caps/nvidia-cap(\d+)$")
_CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
_GPU_LINE_RE = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9a-fA-F-]+)\)\s*$")


def parse_proc_devices(text: str) -> dict[str, int]:
    """Character devices of `/proc/devices` as name → major.

    Several names may share a major (`nvidia`, `nvidiactl` → 195). A name listed twice (e.g.
    `infiniband_verbs`) keeps its first major; NVIDIA names are unique. A bare `NNN name` list without the
    `Character devices:` title (a grep'd excerpt) is accepted too.
    """
    lines = text.replace("\r", "").splitlines()
    titled = any(ln.strip() == "Character devices:" for ln in lines)
    in_char = not titled
    majors: dict[str, int] = {}
    for line in lines:
        stripped = line.strip()
        if stripped == "Character devices:":
            in_char = True
            continue
        if stripped.endswith("devices:"):  # "Block devices:" ends the character section
            in_char = False
            continue
        if not in_char or not stripped:
            continue
        m = _PROC_DEV_RE.match(line)
        if not m:
            raise ParseError("not /proc/devices output", text)
        majors.setdefault(m.group(2), int(m.group(1)))
    if not majors:
        raise ParseError("no character devices in /proc/devices output", text)
    return majors


@dataclass(frozen=True)
class DeviceNode:
    """One `ls -l` line of a device node. `mode` is the permission string without the type letter."""

    path: str
    kind: Literal["c", "b"]
    major: int
    minor: int
    mode: str
    owner: str = "root"
    group: str = "root"

    @property
    def octal_mode(self) -> str:
        """`rw-rw-rw-` → `0666` (the form `devN: ...,mode=` wants)."""
        value = 0
        for i, ch in enumerate(self.mode):
            if ch not in "-ST":
                value |= 1 << (8 - i)
        return f"0{value:03o}"


def parse_dev_listing(text: str) -> list[DeviceNode]:
    """Parse `ls -l /dev/nvidia* /dev/nvidia-caps/*` (and the `/dev/nvidia-caps:` sub-listing form).

    Only character/block device lines are returned; `total N`, `ls: cannot access ...` errors, directories
    and symlinks are skipped. Inside a `DIR:` section the bare names are joined to DIR.
    """
    nodes: list[DeviceNode] = []
    directory = ""
    for raw in strip_ansi(text).replace("\r", "").splitlines():
        line = raw.strip()
        if not line:
            directory = ""
            continue
        if line.endswith(":") and line.startswith("/"):
            directory = line[:-1].rstrip("/")
            continue
        m = _LS_RE.match(line)
        if not m:
            continue
        name = m.group("name")
        path = name if name.startswith("/") or not directory else f"{directory}/{name}"
        kind: Literal["c", "b"] = "c" if m.group("type") == "c" else "b"
        nodes.append(
            DeviceNode(
                path=path,
                kind=kind,
                major=int(m.group("major")),
                minor=int(m.group("minor")),
                mode=m.group("perm"),
                owner=m.group("owner"),
                group=m.group("group"),
            )
        )
    return nodes


def _passthrough_key(node: DeviceNode) -> tuple[int, int, str]:
    if m := _GPU_NODE_RE.match(node.path):
        return (0, int(m.group(1)), "")
    if node.path in _CONTROL_NODES:
        return (1, _CONTROL_NODES.index(node.path), "")
    m = _CAP_NODE_RE.match(node.path)
    return (2, int(m.group(1)) if m else 1 << 30, node.path)


def nvidia_char_devices(nodes: list[DeviceNode]) -> list[DeviceNode]:
    """The character devices a GPU container needs, in a stable order.

    `/dev/nvidiaN` numerically first, then nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset, then
    `/dev/nvidia-caps/*`. Duplicates (the same path listed twice) are dropped.
    """
    chosen: dict[str, DeviceNode] = {}
    for node in nodes:
        if node.kind != "c":
            continue
        p = node.path
        if _GPU_NODE_RE.match(p) or p in _CONTROL_NODES or p.startswith("/dev/nvidia-caps/"):
            chosen.setdefault(p, node)
    return sorted(chosen.values(), key=_passthrough_key)


@dataclass(frozen=True)
class GpuListEntry:
    """One `nvidia-smi -L` line."""

    index: int
    name: str
    uuid: str


def parse_gpu_list(text: str) -> list[GpuListEntry]:
    """Parse `nvidia-smi -L`. MIG sub-lines are ignored; "No devices were found" gives [].

    Any other text without GPU lines (e.g. an NVML failure) raises ParseError.
    """
    gpus: list[GpuListEntry] = []
    for line in strip_ansi(text).replace("\r", "").splitlines():
        m = _GPU_LINE_RE.match(line.strip())
        if m:
            gpus.append(GpuListEntry(index=int(m.group(1)), name=m.group(2), uuid=m.group(3)))
    if not gpus and "No devices were found" not in text:
        raise ParseError("not nvidia-smi -L output", text)
    return gpus
