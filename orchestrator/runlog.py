"""Per-run measurements: step durations, SSH round trips and API calls, for logs and `--json`.

Performance goals (fewer round trips) are measured from these numbers, never asserted in timed tests.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

StepStatus = Literal["ok", "changed", "skipped", "failed", "would-change"]


@dataclass
class StepRecord:
    name: str
    status: StepStatus = "ok"
    summary: str = ""
    duration_s: float = 0.0
    ssh_round_trips: int = 0
    api_calls: int = 0
    changes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "duration_s": round(self.duration_s, 3),
            "ssh_round_trips": self.ssh_round_trips,
            "api_calls": self.api_calls,
            "changes": self.changes,
            "details": self.details,
        }


@dataclass
class Metrics:
    """Counts remote work; the current step receives the counts as they happen."""

    ssh_connects: int = 0
    ssh_round_trips: int = 0
    api_calls: int = 0
    current: StepRecord | None = None

    def round_trip(self) -> None:
        self.ssh_round_trips += 1
        if self.current is not None:
            self.current.ssh_round_trips += 1

    def api_call(self) -> None:
        self.api_calls += 1
        if self.current is not None:
            self.current.api_calls += 1

    @contextmanager
    def step(self, record: StepRecord) -> Iterator[StepRecord]:
        previous, self.current = self.current, record
        start = time.monotonic()
        try:
            yield record
        finally:
            record.duration_s += time.monotonic() - start
            self.current = previous
