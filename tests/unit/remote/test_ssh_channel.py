"""The SSH channel reader (remote/channel.py, split out of SshHost.run: issue 34) on an in-memory channel: what it
reads, when it stops, what it feeds; the policy around it (guard, exit codes, error text) is SshHost.run's and is
covered end to end."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import paramiko
import pytest

from orchestrator.remote.channel import ChannelTimeout, LatestLine, read_channel


class FakeChannel:
    """A channel that yields `events` in order: ("out", b"..."), ("err", b"..."), ("exit", rc), ("eof", None)."""

    def __init__(self, *events: tuple[str, Any]) -> None:
        self.events = deque(events)
        self.out: deque[bytes] = deque()
        self.err: deque[bytes] = deque()
        self.rc: int | None = None
        self.eof_received = False
        self.closed = False
        self.sent = b""
        self.write_shut = False
        self.status_event = threading.Event()

    def _step(self) -> None:
        if self.events and not self.out and not self.err:
            kind, value = self.events.popleft()
            if kind == "out":
                self.out.append(value)
            elif kind == "err":
                self.err.append(value)
            elif kind == "exit":
                self.rc = value
                self.status_event.set()
            elif kind == "eof":
                self.eof_received = True

    def recv_ready(self) -> bool:
        self._step()
        return bool(self.out)

    def recv(self, _n: int) -> bytes:
        return self.out.popleft()

    def recv_stderr_ready(self) -> bool:
        return bool(self.err)

    def recv_stderr(self, _n: int) -> bytes:
        return self.err.popleft()

    def exit_status_ready(self) -> bool:
        return self.rc is not None

    def recv_exit_status(self) -> int:
        return -1 if self.rc is None else self.rc

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def shutdown_write(self) -> None:
        self.write_shut = True

    def close(self) -> None:
        self.closed = True


class FakeTransport:
    def __init__(self, active: bool = True) -> None:
        self.active = active

    def is_active(self) -> bool:
        return self.active


def read(chan: FakeChannel, *, stdin: bytes | None = None, deadline: float | None = None,
         transport: FakeTransport | None = None, seen: list[bytes] | None = None) -> Any:
    return read_channel(chan, transport or FakeTransport(), stdin=stdin, deadline=deadline,  # type: ignore[arg-type]
                        on_output=(seen if seen is not None else []).append)


def test_output_that_comes_after_the_exit_status_is_read_to_eof() -> None:
    chan = FakeChannel(("out", b"a\n"), ("exit", 0), ("err", b"warn\n"), ("out", b"last line\n"), ("eof", None))
    seen: list[bytes] = []
    got = read(chan, seen=seen)
    assert (got.rc, got.stdout, got.stderr) == (0, b"a\nlast line\n", b"warn\n")
    assert seen == [b"a\n", b"warn\n", b"last line\n"] and chan.closed and chan.write_shut


def test_stdin_is_fed_then_closed_for_writing() -> None:
    chan = FakeChannel(("exit", 3), ("eof", None))
    got = read(chan, stdin=b"echo hi\n")
    assert got.rc == 3 and chan.sent == b"echo hi\n" and chan.write_shut


def test_a_command_past_its_deadline_is_cut_off_and_its_channel_closed() -> None:
    chan = FakeChannel(("out", b"working\n"))
    with pytest.raises(ChannelTimeout):
        read(chan, deadline=time.monotonic() + 0.05)
    assert chan.closed


def test_a_lost_connection_raises_what_ssh_run_turns_into_dropped() -> None:
    chan = FakeChannel(("out", b"x"))
    with pytest.raises(paramiko.SSHException, match="connection lost"):
        read(chan, transport=FakeTransport(active=False))
    assert chan.closed


def test_progress_gets_the_latest_line_at_most_every_so_often() -> None:
    said: list[str] = []
    tap = LatestLine(said.append, every_s=60.0)
    tap(b"Downloading 10%\rDownloading 55%\r\n")
    tap(b"Downloading 90%\n")  # within every_s of the last: not shown
    assert said == ["Downloading 55%"]
    LatestLine(None)(b"nothing to tell\n")  # no progress callback: nothing happens
