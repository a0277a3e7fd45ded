"""Signals held while a cleanup that must not be cut short runs (a tune's restore of the original release).

Why: a second Ctrl-C during a restore used to interrupt the rollback half-way, and the tune then said the original
release was restored while the host ran its trial, with the host's lease left to expire. While `finishing()` is
active, SIGINT, SIGTERM and SIGHUP are recorded and announced instead of raised, and the host lease does not trap
SIGTERM/SIGHUP itself (remote/lock.py asks `holding()`), so the cleanup ends and frees its lease. SIGKILL cannot be
held: then the lease expires by itself and the next run of the command undoes what is left.

Main thread only (Python delivers signals there); elsewhere it holds nothing.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_depth = 0


def holding() -> bool:
    """True while a `finishing()` block runs in this process."""
    return _depth > 0


@contextmanager
def finishing(what: str, say: Callable[[str], None]) -> Iterator[list[str]]:
    """Run the block to its end whatever signal arrives; yields the names of the signals received meanwhile."""
    global _depth
    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def on_signal(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        received.append(name)
        try:
            say(f"{name}: {what} is still running and finishes first (SIGKILL would leave it half done)")
        except OSError:  # the terminal or pipe is gone: the signal is still recorded
            pass

    old = {sig: signal.signal(sig, on_signal) for sig in HELD}
    _depth += 1
    try:
        yield received
    finally:
        _depth -= 1
        for sig, handler in old.items():
            signal.signal(sig, handler)
