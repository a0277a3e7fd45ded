"""A host lock that cannot go stale: `flock` held by a remote process tied to our SSH channel.

If deploy dies (even SIGKILL), the TCP connection closes, the remote `cat` sees EOF, and the kernel releases the
flock. A concurrent run fails fast and is told who holds the lock (user, machine, pid, command, since when).
"""

from __future__ import annotations

import getpass
import os
import shlex
import socket
import time
from datetime import UTC, datetime

from orchestrator.errors import LockHeld, RemoteError
from orchestrator.remote.ssh import SshHost

LOCK_DIR = "/var/lib/deploy"
LOCK_FILE = f"{LOCK_DIR}/deploy.lock"
HOLDER_FILE = f"{LOCK_DIR}/deploy.lock.holder"
BUSY_EXIT = 75


def holder_text(command: str) -> str:
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()} running '{command}' since {since}"


class HostLock:
    def __init__(self, ssh: SshHost, command: str) -> None:
        self.ssh = ssh
        self.command = command
        self._channel: object | None = None

    def acquire(self, timeout_s: float = 20.0) -> None:
        conn = self.ssh.connect()
        transport = conn.client.get_transport()
        if transport is None:
            raise RemoteError("SSH transport closed before taking the lock", host=self.ssh.host.name, step="lock")
        self.ssh.metrics.round_trip()
        chan = transport.open_session()
        holder = holder_text(self.command)
        inner = (f"printf '%s\\n' {shlex.quote(holder)} > {HOLDER_FILE}.tmp && mv {HOLDER_FILE}.tmp {HOLDER_FILE}"
                 f" && echo LOCKED && exec cat >/dev/null")
        chan.exec_command(f"mkdir -p {LOCK_DIR} && exec flock -n -E {BUSY_EXIT} {LOCK_FILE} sh -c "
                          f"{shlex.quote(inner)}")
        buf = b""
        deadline = time.monotonic() + timeout_s
        while b"LOCKED" not in buf:
            if chan.exit_status_ready():
                rc = chan.recv_exit_status()
                if rc == BUSY_EXIT:
                    other = self.ssh.run(f"cat {HOLDER_FILE} 2>/dev/null || true", check=False, what="read lock")
                    raise LockHeld(f"another deploy run holds the lock on this host: {other.stdout.strip() or '?'}",
                                   fix="wait for it to finish (the lock frees itself when that run ends)",
                                   host=self.ssh.host.name, step="lock")
                raise RemoteError(f"could not take the host lock (exit {rc})", host=self.ssh.host.name, step="lock",
                                  fix="check that flock (util-linux) exists on the host")
            if chan.recv_ready():
                buf += chan.recv(4096)
            elif time.monotonic() > deadline:
                chan.close()
                raise RemoteError("timed out taking the host lock", host=self.ssh.host.name, step="lock")
            else:
                time.sleep(0.02)
        self._channel = chan

    def release(self) -> None:
        chan = self._channel
        if chan is None:
            return
        self._channel = None
        try:
            chan.shutdown_write()  # type: ignore[attr-defined]
            chan.recv_exit_status()  # type: ignore[attr-defined]
        finally:
            chan.close()  # type: ignore[attr-defined]

    def __enter__(self) -> HostLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
