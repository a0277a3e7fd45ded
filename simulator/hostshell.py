"""The SSH session shell of a simulated host: sshd's ForceCommand.

    python -S -m simulator.hostshell <host_dir>

It enters a private mount + UTS namespace, binds the host's fs/ over the real paths (docs/simulator.md), puts
<root>/bin/host first on PATH and execs `bash -c "$SSH_ORIGINAL_COMMAND"` (or `bash -s`, reading the script from
stdin, when the client sent no command). Because it execs, stdin/stdout/stderr and the exit code are the client's.

This runs on every simulated SSH command, so it imports only `os`, `ctypes` and the constant-only layout module,
reads a flat `key=value` file instead of JSON, and does the mounts with raw syscalls (no `mount` binaries).
"""

from __future__ import annotations

import os
import sys

from simulator import layout, nsutil

HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_KEEP_ENV = ("SSH_CLIENT", "SSH_CONNECTION", "SSH_ORIGINAL_COMMAND", "SSH_TTY", "TERM", "LANG", "LC_ALL", "TZ")


def read_session(host_dir: str) -> dict[str, str]:
    """sshd/session.conf written by the manager: name, node, real_root, python_prefix, venv_prefix, repo."""
    with open(os.path.join(host_dir, "sshd", layout.SESSION_FILE)) as fh:
        return dict(line.rstrip("\n").split("=", 1) for line in fh if "=" in line)


def _sshd_ancestor() -> int | None:
    """The per-connection sshd process above us (bash may or may not sit in between)."""
    pid = os.getppid()
    for _ in range(4):
        if pid <= 1:
            return None
        try:
            with open(f"/proc/{pid}/comm") as fh:
                comm = fh.read().strip()
            with open(f"/proc/{pid}/stat") as fh:
                stat = fh.read()
        except OSError:
            return None
        if comm.startswith("sshd"):
            return pid
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return None


def maybe_drop_connection(host_dir: str) -> None:
    """Fault `ssh_drop_after`: count this command; past the limit, kill our sshd so the client sees a drop.

    The knob and counter reset before the kill, so exactly one connection dies and reconnecting works.
    Only when the fault is set (sshd/drop-after exists) is host.json touched at all.
    """
    if not os.path.exists(os.path.join(host_dir, "sshd", layout.DROP_FILE)):
        return
    import signal
    from pathlib import Path

    from simulator.config import HostConfig, HostPaths, locked, write_text_atomic

    hp = HostPaths(Path(host_dir))
    limit = hp.load().faults.ssh_drop_after
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
    (hp.sshd / layout.DROP_FILE).unlink(missing_ok=True)
    victim = _sshd_ancestor()
    if victim is not None:
        os.kill(victim, signal.SIGKILL)
    os._exit(255)


def enter_host_view(session: dict[str, str]) -> None:
    """Private mount+UTS namespace with the host's fs/ bound over the real paths; aliases under /run/deploy-sim."""
    nsutil.unshare(nsutil.CLONE_NEWNS | nsutil.CLONE_NEWUTS)
    nsutil.make_private("/")
    nsutil.ensure_mountpoint(layout.VIEW_ALIAS, "dir")
    nsutil.tmpfs(layout.VIEW_ALIAS)
    aliases = [(layout.VIEW_PY, session.get("python_prefix")), (layout.VIEW_VENV, session.get("venv_prefix")),
               (layout.VIEW_REPO, session.get("repo")), (layout.VIEW_ROOT, session.get("real_root"))]
    for alias, src in aliases:
        if src:
            os.mkdir(alias)
            nsutil.bind(src, alias)
    fs = f"{layout.VIEW_ROOT}/hosts/{session['name']}/fs"
    if os.path.isdir(f"{fs}/dev/pts"):
        nsutil.bind("/dev/pts", f"{fs}/dev/pts")
    for src, target, kind in layout.HOST_OVERLAYS:
        source = f"{fs}/{src}"
        if not os.path.exists(source):
            continue
        nsutil.ensure_mountpoint(target, kind)
        nsutil.bind(source, target, recursive=(src == "dev"))
    nsutil.sethostname(session["node"])


def session_env(host: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    env.update({
        "HOME": "/root", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash",
        "PATH": f"{layout.VIEW_ROOT}/bin/host:{HOST_PATH}",
        "DEPLOY_SIM_PYTHON": layout.VIEW_PYTHON, "DEPLOY_SIM_REPO": layout.VIEW_REPO,
        layout.ROOT_ENV: layout.VIEW_ROOT, layout.HOST_ENV: host,
    })
    env.setdefault("LANG", "C.UTF-8")
    return env


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m simulator.hostshell <host_dir>", file=sys.stderr)
        return 2
    host_dir = argv[1]
    session = read_session(host_dir)
    maybe_drop_connection(host_dir)
    enter_host_view(session)
    env = session_env(session["name"])
    os.chdir("/root")
    command = os.environ.get("SSH_ORIGINAL_COMMAND")
    args = ["bash", "-c", command] if command else ["bash", "-s"]
    os.execve("/bin/bash", args, env)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
