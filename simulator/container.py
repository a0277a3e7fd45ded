"""Entering a simulated container (`pct exec`, `pct enter`) and copying files into it (`pct push`/`pull`).

With the lxc runtime (host.json `runtime: lxc`) these go to simulator/lxc/runtime.py (lxc-attach). The view
runtime is described below.

A container is its network namespace (created at start) plus a mount view built per `pct exec`: the container's
persistent directories (ct/<vmid>/fs/...) bound over /root, /etc/systemd/system, /etc/sglang, ..., its own /dev
with only the passed-in device nodes, the host kernel module's /proc/driver/nvidia/version, and its hostname in a
UTS namespace. Processes that daemonise stay in the netns, which is what `pct stop` kills.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import NoReturn

from simulator import nsutil
from simulator.config import (
    CT_ENV,
    CT_PERSISTENT_PATHS,
    HOST_ENV,
    ROOT_ENV,
    VIEW_PYTHON,
    VIEW_REPO,
    HostPaths,
    sim_root,
)
from simulator.lxc.runtime import RuntimeFailure
from simulator.pve.lxc import Node, PveError, netns_path

#: After a start, `pct exec` in the lxc runtime first waits for systemd (a reboot from inside is not tracked).
READY_WINDOW_S = 60.0
CT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def container_env(hp: HostPaths, vmid: int) -> dict[str, str]:
    env = {k: os.environ[k] for k in ("TERM", "LANG", "LC_ALL", "TZ") if k in os.environ}
    env.update(
        PATH=f"{sim_root()}/bin/ct:{CT_PATH}", HOME="/root", USER="root", LOGNAME="root", SHELL="/bin/bash",
        container="lxc", DEPLOY_SIM_PYTHON=str(VIEW_PYTHON), DEPLOY_SIM_REPO=str(VIEW_REPO),
        **{ROOT_ENV: str(sim_root()), HOST_ENV: hp.name, CT_ENV: str(vmid)},
    )
    env.setdefault("LANG", "C.UTF-8")
    return env


def require_running(node: Node, vmid: int) -> None:
    node.read(vmid)
    if not node.running(vmid):
        raise PveError(f"CT {vmid} not running")


def enter(hp: HostPaths, vmid: int) -> None:
    """Switch this process into the container's netns, mount view and hostname (must be single-threaded)."""
    node = Node(hp)
    require_running(node, vmid)
    conf, _ = node.read(vmid)
    st = node.state(vmid)
    ct = hp.ct(vmid)
    version_file = hp.fs / "proc" / "driver" / "nvidia" / "version"
    version = version_file.read_text() if version_file.exists() else None
    nsutil.setns(netns_path(hp, st.netns), nsutil.CLONE_NEWNET)
    nsutil.unshare(nsutil.CLONE_NEWNS | nsutil.CLONE_NEWUTS)
    nsutil.make_private("/")
    (ct.dev / "pts").mkdir(exist_ok=True)
    nsutil.bind("/dev/pts", str(ct.dev / "pts"))
    nsutil.bind(str(ct.dev), "/dev", recursive=True)
    for path in CT_PERSISTENT_PATHS:
        src = ct.fs / path.lstrip("/")
        src.mkdir(parents=True, exist_ok=True)
        nsutil.ensure_mountpoint(path, "dir")
        nsutil.bind(str(src), path)
    if os.path.isdir("/proc/driver"):
        nsutil.tmpfs("/proc/driver")
        if version is not None:
            os.mkdir("/proc/driver/nvidia")
            Path("/proc/driver/nvidia/version").write_text(version)
    if os.path.isdir("/etc/pve"):
        nsutil.tmpfs("/etc/pve")  # the host's cluster filesystem is not visible in a container
    nsutil.sethostname(conf.options.get("hostname", f"CT{vmid}"))


def exec_command(hp: HostPaths, vmid: int, argv: list[str]) -> NoReturn:
    """`pct exec VMID -- cmd...`: exec in place, so stdin/stdout/stderr and the exit code are the command's."""
    node = Node(hp)
    if node.lxc is not None:
        require_running(node, vmid)
        st = node.state(vmid)
        if st.started_at is None or time.time() - st.started_at < READY_WINDOW_S:
            node.lxc.wait_ready(vmid)  # systemctl answers only once systemd is up
        node.lxc.exec(vmid, argv)
    enter(hp, vmid)
    env = container_env(hp, vmid)
    os.chdir("/root")
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        print(f"lxc-attach: {vmid}: attach.c: lxc_attach_run_command: 1841 {exc.strerror} - "
              f"Failed to exec \"{argv[0]}\"", file=sys.stderr)
        os._exit(255)


def ct_path(hp: HostPaths, vmid: int, path: str) -> Path:
    """Where a container path lives on disk; only the simulator's persistent paths exist."""
    norm = os.path.normpath("/" + path.lstrip("/"))
    for base in sorted(CT_PERSISTENT_PATHS, key=len, reverse=True):
        if norm == base or norm.startswith(base + "/"):
            return hp.ct(vmid).fs / norm.lstrip("/")
    raise PveError(f"simulator: container path '{norm}' is not persisted (persistent paths: "
                   f"{', '.join(CT_PERSISTENT_PATHS)})")


def _mode(perms: str | None) -> int:
    return int(perms, 0) if perms and perms.startswith("0x") else int(perms or "0644", 8)


def push(hp: HostPaths, vmid: int, src: str, dst: str, perms: str | None, uid: int, gid: int) -> None:
    node = Node(hp)
    require_running(node, vmid)
    if not os.path.isfile(src):
        raise PveError(f"unable to open file '{src}' - No such file or directory")
    if node.lxc is not None:
        try:
            node.lxc.push(vmid, src, dst, _mode(perms), uid, gid)
        except RuntimeFailure as exc:
            raise PveError(str(exc)) from None
        return
    target = ct_path(hp, vmid, dst)
    if not target.parent.is_dir():
        raise PveError(f"failed to open '{dst}' for writing: No such file or directory")
    shutil.copyfile(src, target)
    os.chmod(target, _mode(perms))
    os.chown(target, uid, gid)


def pull(hp: HostPaths, vmid: int, src: str, dst: str) -> None:
    node = Node(hp)
    require_running(node, vmid)
    if node.lxc is not None:
        try:
            node.lxc.pull(vmid, src, dst)
        except RuntimeFailure as exc:
            raise PveError(str(exc)) from None
        return
    source = ct_path(hp, vmid, src)
    if not source.is_file():
        raise PveError(f"failed to open {src}: No such file or directory")
    shutil.copyfile(source, dst)
