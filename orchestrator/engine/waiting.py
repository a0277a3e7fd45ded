"""Say what a long wait waits for: a silent terminal for two minutes reads as a hung tool.

A blocking remote call (a restart that waits for sglang to stop, a health wait, a bench) gets a companion thread
that prints what it waits for and its limit after a few seconds, then every ~10 s how long it has waited. Waits
that end quickly print nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

EVERY_S = 10.0
FIRST_AFTER_S = 5.0


@contextmanager
def waiting_for(say: Callable[[str], None], what: str, limit_s: float, *, first_after_s: float = FIRST_AFTER_S,
                every_s: float = EVERY_S) -> Iterator[None]:
    """Within the block, say "waiting for WHAT (up to LIMIT s)" after `first_after_s`, then every `every_s`."""
    done = threading.Event()
    start = time.monotonic()

    def tick() -> None:
        if done.wait(first_after_s):
            return
        say(f"waiting for {what} (up to {limit_s:.0f} s)")
        while not done.wait(every_s):
            say(f"  still waiting for {what}: {time.monotonic() - start:.0f} s of up to {limit_s:.0f} s")

    thread = threading.Thread(target=tick, name="deploy-waiting", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=1.0)
