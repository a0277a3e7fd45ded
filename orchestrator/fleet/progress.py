"""One host's step progress inside a fleet run: the runner's progress calls become engine events for the live view."""

from __future__ import annotations

from rich.console import Console

from orchestrator.engine.progress import StepPrinter
from orchestrator.fleet.engine import HostEvents
from orchestrator.runlog import StepRecord


class EventPrinter(StepPrinter):
    """Step progress of one host's run → engine events; completed step records kept for the report."""

    def __init__(self, events: HostEvents, records: list[StepRecord]) -> None:
        super().__init__(Console(), enabled=False)
        self.events = events
        self.records = records

    def say(self, message: str) -> None:
        self.events.say(message)

    def __call__(self, name: str, record: StepRecord | None) -> None:
        if record is None:
            self.events.step(name)
        else:
            self.records.append(record)
            self.events.ended(name, record.status, record.duration_s)
