"""The host view of a simulated host, and the one Python step an SSH session may need.

    python -S -m simulator.host.shell hold <host_dir>  # started by `deploy sim up` (simulator.host.sshd), once a host
    python -S -m simulator.host.shell drop <host_dir>  # run by a session only while `ssh_drop_after` is set

`hold` builds the host view once: a private mount + UTS namespace with the host's fs/ bound over the real paths
(docs/simulator.md), its cwd at the view's /root, and then becomes the host's stand-in server
(simulator.host.standin_server), which keeps the namespace alive (its pid in sshd/view.pid). Every SSH session joins
that namespace with `nsenter` from the sh snippet that sshd's ForceCommand sources (simulator.host.sshd), so a session
starts no Python and mounts nothing: the view costs one setns(2), as on a real host where sshd runs in the host's own
root. Like on a real host, mounts made by one session stay for the next, and the view is as old as the `sim up` that
built it.

`drop` runs only while the fault file exists; it imports only `os`, `ctypes` and the constant-only layout module
until the fault is really set, and reads a flat `key=value` file instead of JSON.
"""

from __future__ import annotations

import os
import sys

from simulator import layout


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
    from simulator import nsutil  # ctypes: only the view holder needs it, not the `drop` check

    nsutil.unshare(nsutil.CLONE_NEWNS | nsutil.CLONE_NEWUTS)
    nsutil.make_private("/")
    nsutil.ensure_mountpoint(layout.VIEW_ALIAS, "dir")
    nsutil.tmpfs(layout.VIEW_ALIAS)
    aliases = [(layout.VIEW_PY, session.get("python_prefix")), (layout.VIEW_VENV, session.get("venv_prefix")),
               (layout.VIEW_REPO, session.get("repo")), (layout.VIEW_ROOT, session.get("real_root"))]
    for alias, src in aliases:
        if src:
            os.mkdir(alias)
            nsutil.bind(src, alias, recursive=alias == layout.VIEW_ROOT)  # the root's lxc/ may be a tmpfs
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


def hold(host_dir: str) -> None:
    """Build the host view, record our pid where sessions find it, and become the stand-in server that keeps it."""
    session = layout.read_session(host_dir)
    enter_host_view(session)
    os.chdir("/root")  # sessions inherit it (nsenter -w); it also identifies us: /proc/PID/cwd is the host's fs/root
    pidfile = f"{layout.VIEW_ROOT}/hosts/{session['name']}/sshd/{layout.VIEW_PID_FILE}"
    with open(f"{pidfile}.tmp", "w") as fh:
        fh.write(f"{os.getpid()}\n")
    os.rename(f"{pidfile}.tmp", pidfile)
    # Keep the view as the stand-in server (simulator.host.standin_server): same pid, namespaces and cwd, started
    # through the view's interpreter launcher so that its module paths are a direct stand-in run's. Its argv names the
    # host directory, so `pgrep -f <root>` finds a holder left behind like any other daemon.
    env = {**layout.session_env(session["name"]), "LANG": "C.UTF-8"}
    try:
        os.execve("/bin/sh", ["sh", layout.VIEW_PYTHON, "-S", "-m", "simulator.host.standin_server", host_dir], env)
    except OSError:
        os.execv("/bin/sleep", [f"deploy-sim-view {host_dir}", "infinity"])


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("hold", "drop"):
        print("usage: python -m simulator.host.shell hold|drop <host_dir>", file=sys.stderr)
        return 2
    if argv[1] == "drop":
        maybe_drop_connection(argv[2])
        return 0
    hold(argv[2])
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv))
