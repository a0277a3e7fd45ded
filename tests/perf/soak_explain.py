"""Why a client request failed during a chaos-soak step: the event of the step it failed in or right after (pure).

A fault that is meant to lose no request (a roll, a tune, a router change through the staging path, a watch's
cordon) opens no window, so a request it fails is unexplained and the soak exits 1. A fault that takes a serving
part away without a drain (an operator's `systemctl restart` of the router, a container rebooted under the router
or under a worker, an Xid that breaks a worker's process before the watch cordons it) opens a window while it acts;
a request that fails in it, or within SETTLE_S after it (a router's health check marks a dead worker down within
its interval), is explained by it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

#: After a window closes, how long its effect may still fail a request: the router marks a dead worker down
#: within threshold x interval (15 s with the health flags deploy sets, orchestrator/router/release.py), a
#: health check may take its 25 s timeout first, and a restarted router needs its workers' first checks.
SETTLE_S = 45.0
UNEXPLAINED = "unexplained"


@dataclass
class Window:
    cause: str
    start: float
    end: float | None = None

    def close(self) -> None:
        self.end = time.monotonic()


def explain(fault: str, text: str, at: float, windows: list[Window]) -> str:
    """The cause of the window the failure (at `at`, time.monotonic()) fell in; UNEXPLAINED when none."""
    for w in windows:
        end = (w.end if w.end is not None else float("inf")) + SETTLE_S
        if w.start <= at <= end:
            return w.cause
    return UNEXPLAINED
