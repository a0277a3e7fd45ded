"""The SSH session shell of a simulated host: sshd's ForceCommand.

    python -S -m orchestrator.sim.hostshell <host_dir>

It enters a private mount + UTS namespace, binds the host's fs/ over the real paths (docs/simulator.md), puts
<root>/bin/host first on PATH and execs `bash -c "$SSH_ORIGINAL_COMMAND"` (or `bash -s`, reading the script from
stdin, when the client sent no command). Because it execs, stdin/stdout/stderr and the exit code are the client's.
Everything is done in this one process with raw syscalls to keep the per-command overhead low.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from orchestrator.sim import nsutil
from orchestrator.sim.config import (
    HOST_ENV,
    HOST_OVERLAYS,
    ROOT_ENV,
    VIEW_ALIAS,
    VIEW_PY,
    VIEW_REPO,
    VIEW_ROOT,
    VIEW_VENV,
    HostConfig,
    HostPaths,
    RootConfig,
    locked,
    write_text_atomic,
)

HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_KEEP_ENV = ("SSH_CLIENT", "SSH_CONNECTION", "SSH_ORIGINAL_COMMAND", "SSH_TTY", "TERM", "LANG", "LC_ALL", "TZ")


def _sshd_ancestor() -> int | None:
    """The per-connection sshd process above us (bash may or may not sit in between)."""
    pid = os.getppid()
    for _ in range(4):
        if pid <= 1:
            return None
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        if comm.startswith("sshd"):
            return pid
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return None


def maybe_drop_connection(hp: HostPaths, cfg: HostConfig) -> None:
    """Fault `ssh_drop_after`: count this command; past the limit, kill our sshd so the client sees a drop.

    The knob and counter reset before the kill, so exactly one connection dies and reconnecting works.
    """
    limit = cfg.faults.ssh_drop_after
    if limit is None:
        return
    with locked(hp.ssh_counter):
        try:
            count = int(hp.ssh_counter.read_text() or "0") + 1
        except (OSError, ValueError):
            count = 1
        drop = count > limit
        write_text_atomic(hp.ssh_counter, "0\n" if drop else f"{count}\n")
    if not drop:
        return

    def _clear(c: HostConfig) -> None:
        c.faults.ssh_drop_after = None

    hp.update(_clear)
    victim = _sshd_ancestor()
    if victim is not None:
        os.kill(victim, signal.SIGKILL)
    os._exit(255)


def enter_host_view(rc: RootConfig, host: str, node: str) -> None:
    """Private mount+UTS namespace with the host's fs/ bound over the real paths; aliases under /run/deploy-sim."""
    nsutil.unshare(nsutil.CLONE_NEWNS | nsutil.CLONE_NEWUTS)
    nsutil.make_private("/")
    nsutil.ensure_mountpoint(str(VIEW_ALIAS), "dir")
    nsutil.tmpfs(str(VIEW_ALIAS))
    aliases = [(VIEW_PY, rc.python_prefix), (VIEW_VENV, rc.venv_prefix), (VIEW_REPO, rc.repo),
               (VIEW_ROOT, rc.real_root)]
    for alias, src in aliases:
        if src:
            os.mkdir(alias)
            nsutil.bind(src, str(alias))
    fs = VIEW_ROOT / "hosts" / host / "fs"
    pts = fs / "dev" / "pts"
    if pts.is_dir():
        nsutil.bind("/dev/pts", str(pts))
    for src, target, kind in HOST_OVERLAYS:
        source = fs / src
        if not source.exists():
            continue
        nsutil.ensure_mountpoint(target, kind)
        nsutil.bind(str(source), target, recursive=(src == "dev"))
    nsutil.sethostname(node)


def session_env(host: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    env.update(
        HOME="/root", USER="root", LOGNAME="root", SHELL="/bin/bash",
        PATH=f"{VIEW_ROOT}/bin/host:{HOST_PATH}",
        **{ROOT_ENV: str(VIEW_ROOT), HOST_ENV: host},
    )
    env.setdefault("LANG", "C.UTF-8")
    return env


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m orchestrator.sim.hostshell <host_dir>", file=sys.stderr)
        return 2
    hp = HostPaths(Path(argv[1]))
    cfg = hp.load()
    root = hp.dir.parent.parent
    rc = RootConfig.from_dict(json.loads((root / "sim.json").read_text()))
    maybe_drop_connection(hp, cfg)
    enter_host_view(rc, cfg.name, cfg.node)
    env = session_env(cfg.name)
    os.chdir("/root")
    command = os.environ.get("SSH_ORIGINAL_COMMAND")
    args = ["bash", "-c", command] if command else ["bash", "-s"]
    os.execve("/bin/bash", args, env)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
