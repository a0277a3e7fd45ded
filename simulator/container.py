"""Entering a simulated container (`pct exec`, `pct enter`) and copying files into it (`pct push`/`pull`).

A container is a real LXC container (simulator/lxc/runtime.py): these go through lxc-attach, as pct does.
"""

from __future__ import annotations

import os
from typing import NoReturn

from simulator.config import HostPaths
from simulator.lxc.runtime import RuntimeFailure
from simulator.pve.lxc import Node, PveError


def require_running(node: Node, vmid: int) -> None:
    node.read(vmid)
    if not node.running(vmid):
        raise PveError(f"CT {vmid} not running")


def exec_command(hp: HostPaths, vmid: int, argv: list[str]) -> NoReturn:
    """`pct exec VMID -- cmd...`: exec in place, so stdin/stdout/stderr and the exit code are the command's.

    As pve-container's `pct exec`: `lxc-attach --keep-env` (keep-env defaults to 1) and no wait for the container's
    boot, so a command sent right after `pct start` may meet a systemd that is still starting."""
    node = Node(hp)
    require_running(node, vmid)
    node.lxc.exec(vmid, argv)  # no wait for the CT's systemd, the caller's environment kept: pct's defaults


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
