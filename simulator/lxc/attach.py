"""`pct exec` and `pct enter` on a simulated host: lxc-attach into a running container, as pve-container does.

The most frequent command on a host by far (every container command of the tool, of its tests and of a bench goes
through it), so it runs on the standard library's `os` and `sys` and the constant-only layout module: no host
config, no API, no conf parser. What it needs of the host it reads from the session file the manager writes
(sshd/session.conf: node name, real root). The host's `pct` wrapper runs these two subcommands through
simulator/pve/pct.py, which calls `exec_command` here; so does the full `pct` (simulator.pve.cli), so there is one
implementation.

As pve-container's `pct exec`: `lxc-attach --keep-env` (keep-env defaults to 1) and no wait for the container's
boot, so a command sent right after `pct start` may meet a systemd that is still starting.
"""

from __future__ import annotations

import os
import sys

from simulator.layout import read_session

EXIT_ERR = 255
#: What `pct enter` runs: a login shell.
ENTER_COMMAND = ["/bin/bash", "-l"]
#: What the simulator itself adds to a host session's environment (its launcher, its own variables, the
#: ForceCommand's SSH_ORIGINAL_COMMAND): not on a real host, so not passed into a container. pct's
#: clean_environment drops SSL_CERT_FILE and SSL_CERT_DIR.
_NOT_PASSED = ("PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONNOUSERSITE", "SSL_CERT_FILE", "SSL_CERT_DIR",
               "SSH_ORIGINAL_COMMAND")


class NotRunnable(Exception):
    """The container cannot be entered: PVE's message (printed as is, exit 255)."""


def caller_env(env: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """The environment `pct exec` hands to `lxc-attach --keep-env`: the caller's, less the simulator's own parts."""
    out = {k: v for k, v in env.items() if k not in _NOT_PASSED and not k.startswith("DEPLOY_SIM_")}
    if "PATH" in out:
        out["PATH"] = ":".join(p for p in out["PATH"].split(":") if p and not p.startswith("/run/deploy-sim/"))
    return out


def outer_pid(host_dir: str) -> int:
    """A process in the simulator's real mount namespace (sshd, else the API server, else init).

    SSH sessions run in private mount namespaces that see the sim root under another path, so lxc-* commands
    go through this process's view.
    """
    for pidfile in (os.path.join(host_dir, "sshd", "sshd.pid"), os.path.join(host_dir, "api", "api.pid")):
        try:
            with open(pidfile) as fh:
                pid = int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if os.path.exists(f"/proc/{pid}/ns/mnt"):
            return pid
    return 1


def mount_prefix(host_dir: str) -> list[str]:
    """`nsenter` into the real mount namespace when this process is in another one (an SSH session's view)."""
    pid = outer_pid(host_dir)
    try:
        if os.stat("/proc/self/ns/mnt").st_ino == os.stat(f"/proc/{pid}/ns/mnt").st_ino:
            return []
    except OSError:  # no daemon left (after `sim down`) and init not ours to inspect: this view it is
        return []
    return ["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--"]


def _stdout_of(argv: list[str]) -> tuple[int, str]:
    """(exit status, stdout) of a short command, stderr discarded (posix_spawn: no subprocess module to import)."""
    read_fd, write_fd = os.pipe()
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=[
            (os.POSIX_SPAWN_DUP2, write_fd, 1), (os.POSIX_SPAWN_DUP2, devnull, 2), (os.POSIX_SPAWN_CLOSE, read_fd)])
    finally:
        os.close(write_fd)
        os.close(devnull)
    chunks = []
    with os.fdopen(read_fd, "rb") as fh:
        while chunk := fh.read(4096):
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")


def attach_argv(host_dir: str, vmid: int, argv: list[str]) -> list[str]:
    """The lxc-attach command line that runs `argv` in running CT `vmid`, after pct's own checks."""
    session = read_session(host_dir)
    if not os.path.isfile(os.path.join(host_dir, "fs", "etc", "pve", "lxc", f"{vmid}.conf")):
        raise NotRunnable(f"Configuration file 'nodes/{session['node']}/lxc/{vmid}.conf' does not exist")
    lxcpath = os.path.join(session["real_root"], "lxc", os.path.basename(host_dir))
    prefix = mount_prefix(host_dir)
    rc, state = _stdout_of([*prefix, "lxc-info", "-P", lxcpath, "-n", str(vmid), "-s", "-H"])
    if rc != 0 or state.strip() != "RUNNING":
        raise NotRunnable(f"CT {vmid} not running")
    return [*prefix, "lxc-attach", "-P", lxcpath, "-n", str(vmid), "--keep-env", "--", *argv]


def exec_command(host_dir: str, vmid: int, argv: list[str]) -> int:
    """`pct exec VMID -- cmd...`: replace this process by the command in the container (its stdin, stdout, stderr
    and exit code are the command's, the caller's environment kept); returns 255 with PVE's message otherwise."""
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        sys.stderr.write("missing command\n")
        return EXIT_ERR
    try:
        full = attach_argv(host_dir, vmid, argv)
    except NotRunnable as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_ERR
    sys.stdout.flush()
    os.execvpe(full[0], full, caller_env(os.environ))
