"""Reading one SSH channel to its end: stdin fed by a thread while stdout/stderr are drained, until the exit status
and EOF. The mechanics only; what a result means (the guard, a failed exit code, a dropped connection's text) is
SshHost.run's policy (remote/ssh.py).

Plain paramiko channel I/O: neither side can block the other on a full window (invoke's stdin pump sends one byte
per 10 ms).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.remote.paramiko_import import paramiko

#: After the exit status, how long to read on for the command's last output before EOF (something the command
#: left running may hold its stdout open).
EOF_GRACE_S = 5.0


class ChannelTimeout(Exception):
    """The command ran past its deadline; the channel was closed."""


@dataclass
class LatestLine:
    """Long downloads/installs: hand the latest output line to `progress` now and then (tqdm redraws with \\r);
    `each_line`, when given, sees every complete line (a build's counts must miss none: pip_progress.py)."""

    progress: Callable[[str], None] | None
    every_s: float = 2.0
    last: float = 0.0
    each_line: Callable[[str], None] | None = None
    partial: str = ""

    def __call__(self, chunk: bytes) -> None:
        if self.each_line is not None:
            *whole, self.partial = (self.partial + chunk.decode(errors="replace")).replace("\r", "\n").split("\n")
            for line in whole:
                if line.strip():
                    self.each_line(line)
        if self.progress is None or time.monotonic() - self.last < self.every_s:
            return
        lines = [ln.strip() for ln in chunk.decode(errors="replace").replace("\r", "\n").split("\n")]
        lines = [ln for ln in lines if ln]
        if lines:
            self.last = time.monotonic()
            self.progress(lines[-1])


@dataclass(frozen=True)
class ChannelOutput:
    rc: int  # -1: the channel ended without an exit status (the connection dropped)
    stdout: bytes
    stderr: bytes


def read_channel(chan: paramiko.Channel, transport: paramiko.Transport, *, stdin: bytes | None,
                 deadline: float | None, on_output: Callable[[bytes], None]) -> ChannelOutput:
    """Feed `stdin` (None: none), read both streams until the command exited and its output ended, close the
    channel. Raises ChannelTimeout past `deadline` (a time.monotonic() value), and paramiko.SSHException, OSError
    or EOFError when the connection drops."""
    writer: threading.Thread | None = None
    if stdin is not None:
        payload = stdin

        def feed() -> None:
            try:
                chan.sendall(payload)
                chan.shutdown_write()
            except (OSError, EOFError, paramiko.SSHException):
                pass  # the reader notices the dropped channel

        writer = threading.Thread(target=feed, name="deploy-ssh-stdin", daemon=True)
        writer.start()
    else:
        chan.shutdown_write()
    out, err = bytearray(), bytearray()
    idle_s = 0.002
    exited_at = 0.0
    try:
        while True:
            busy = False
            if chan.recv_ready():
                data = chan.recv(1 << 16)
                out += data
                on_output(data)
                busy = True
            if chan.recv_stderr_ready():
                data = chan.recv_stderr(1 << 16)
                err += data
                on_output(data)
                busy = True
            if busy:
                idle_s = 0.002
                continue
            if chan.exit_status_ready() or chan.closed:
                # sshd sends the exit status as soon as the command exits, while it may still be draining
                # the command's pipes: read on until EOF, or the end of a bounded grace (something the
                # command left running may hold its stdout open), so the last output is never cut off.
                exited_at = exited_at or time.monotonic()
                if not (chan.eof_received or chan.closed) and time.monotonic() - exited_at < EOF_GRACE_S:
                    time.sleep(0.002)
                    continue
                while chan.recv_ready():
                    out += chan.recv(1 << 16)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(1 << 16)
                break
            if not transport.is_active():
                raise paramiko.SSHException("connection lost")
            if deadline is not None and time.monotonic() > deadline:
                chan.close()
                raise ChannelTimeout()
            # Wake at once when the command ends (exit status), else poll with a backoff to 100 ms: every
            # wake-up costs CPU, times the length of the wait, times the hosts of a fleet run (64 hosts
            # waiting 90 s on their fact batch at 20 ms: 0.1 s of tool CPU per host). Output that arrives
            # meanwhile waits at most that long; a busy stream is read without waiting (idle_s resets).
            chan.status_event.wait(idle_s)
            idle_s = min(idle_s * 2, 0.1)
        rc = chan.recv_exit_status()
    finally:
        if writer is not None:
            writer.join(timeout=1)
        chan.close()
    return ChannelOutput(rc, bytes(out), bytes(err))
