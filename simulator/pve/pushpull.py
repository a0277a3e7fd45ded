"""Copying files into and out of a simulated container (`pct push`/`pull`); entering one is simulator/lxc/attach.py.

A container is a real LXC container (simulator/lxc/runtime.py): these go through lxc-attach, as pct does.
"""

from __future__ import annotations

import os

from simulator.config import HostPaths
from simulator.lxc.runtime import RuntimeFailure
from simulator.pve.lxc import Node, PveError


def require_running(node: Node, vmid: int) -> None:
    node.read(vmid)
    if not node.running(vmid):
        raise PveError(f"CT {vmid} not running")


def _mode(perms: str | None) -> int:
    return int(perms, 0) if perms and perms.startswith("0x") else int(perms or "0644", 8)


def push(hp: HostPaths, vmid: int, src: str, dst: str, perms: str | None, uid: int, gid: int) -> None:
    node = Node(hp)
    require_running(node, vmid)
    if not os.path.isfile(src):
        raise PveError(f"unable to open file '{src}' - No such file or directory")
    try:
        node.lxc.push(vmid, src, dst, _mode(perms), uid, gid)
    except RuntimeFailure as exc:
        raise PveError(str(exc)) from None


def pull(hp: HostPaths, vmid: int, src: str, dst: str) -> None:
    node = Node(hp)
    require_running(node, vmid)
    try:
        node.lxc.pull(vmid, src, dst)
    except RuntimeFailure as exc:
        raise PveError(str(exc)) from None
