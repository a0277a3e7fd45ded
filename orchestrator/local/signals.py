"""Signals held while a cleanup that must not be cut short runs (a tune's restore of the original release).

Why: a second Ctrl-C during a restore used to interrupt the rollback half-way, and the tune then said the original
release was restored while the host ran its trial, with the host's lease left to expire. Two blocks hold them:
- `finishing()`: while it runs, SIGINT, SIGTERM and SIGHUP are recorded and announced instead of raised, and the
  host lease does not trap SIGTERM/SIGHUP itself (locks/lease.py asks `holding()`), so the cleanup ends and frees
  its lease;
- `one_stop()`: around a whole command that cleans up when stopped (a tune). Its first signal stops it as before;
  every later one is held until the block ends. A quick second Ctrl-C used to land while the first one was still
  unwinding the run it stopped, before the cleanup began: in the `finally` that frees that run's lease (left on
  the host, so the restore was refused `lock-held`).
SIGKILL cannot be held: then the lease expires by itself and the next run of the command undoes what is left.

Main thread only (Python delivers signals there); elsewhere they hold nothing.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_depth = 0


@dataclass
class _Stop:
    """The `one_stop()` block of this process: what it says of a held signal, and the signal that stopped it."""

    what: str
    say: Callable[[str], None]
    stopped_by: str | None = None
    received: list[str] = field(default_factory=list)


_stop: _Stop | None = None


def holding() -> bool:
    """True while a `finishing()` block runs in this process, or a `one_stop()` block was stopped."""
    return _depth > 0 or (_stop is not None and _stop.stopped_by is not None)


def _announce(signum: int, what: str, say: Callable[[str], None], received: list[str]) -> None:
    name = signal.Signals(signum).name
    received.append(name)
    try:
        say(f"{name}: {what} is still running and finishes first (SIGKILL would leave it half done)")
    except (OSError, ValueError):  # the terminal or pipe is gone: the signal is still recorded
        pass


def stop_or_hold(signum: int, stop: Callable[[], BaseException]) -> None:
    """For a signal handler that ends the run (`stop()` is what it raises): inside a stopped `one_stop()` block
    the signal is held and announced instead; otherwise it stops the run, and a `one_stop()` block around it holds
    every signal after this one."""
    if holding():
        if _stop is not None:
            _announce(signum, _stop.what, _stop.say, _stop.received)
        return
    if _stop is not None:
        _stop.stopped_by = signal.Signals(signum).name
    raise stop()


def _default_stop(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else SystemExit(128 + signum)


@contextmanager
def one_stop(what: str, say: Callable[[str], None]) -> Iterator[list[str]]:
    """The first SIGINT/SIGTERM/SIGHUP in the block stops it as the handler in place would; each later one, until
    the block ends, is held and announced (`what` is still running). Yields the names of the held signals."""
    global _stop
    if threading.current_thread() is not threading.main_thread() or _stop is not None:
        yield [] if _stop is None else _stop.received
        return
    old: dict[int, Any] = {sig: signal.getsignal(sig) for sig in HELD}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        prev = old[signum]
        if prev is signal.SIG_IGN:
            return

        def stop() -> BaseException:
            if callable(prev):
                try:
                    prev(signum, frame)  # the handler in place raises the stop (KeyboardInterrupt, _SigTerm …)
                except BaseException as exc:  # the stop itself: our caller raises it
                    return exc
            return _default_stop(signum)

        stop_or_hold(signum, stop)

    _stop = _Stop(what, say)
    for signum in old:
        signal.signal(signum, on_signal)
    try:
        yield _stop.received
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
        _stop = None


@contextmanager
def finishing(what: str, say: Callable[[str], None]) -> Iterator[list[str]]:
    """Run the block to its end whatever signal arrives; yields the names of the signals received meanwhile."""
    global _depth
    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def on_signal(signum: int, _frame: object) -> None:
        _announce(signum, what, say, received)

    old = {sig: signal.signal(sig, on_signal) for sig in HELD}
    _depth += 1
    try:
        yield received
    finally:
        _depth -= 1
        for sig, handler in old.items():
            signal.signal(sig, handler)
