"""Step progress: a rich live line per step on a TTY, plain lines otherwise (CI logs, pipes)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rich.console import Console

from orchestrator.engine.runner import RunReport
from orchestrator.runlog import StepRecord

if TYPE_CHECKING:  # made by Console.status, on a terminal only: `--json` and piped runs never load rich.status
    from rich.status import Status

STATUS_STYLE = {"ok": "green", "changed": "yellow", "would-change": "cyan", "skipped": "dim", "failed": "bold red"}


class StepPrinter:
    def __init__(self, console: Console, enabled: bool = True) -> None:
        self.console = console
        self.enabled = enabled
        self.tty = sys.stdout.isatty()
        self._status: Status | None = None

    def say(self, message: str) -> None:
        if self.enabled:
            self.console.print(message, markup=False, highlight=False)

    def __call__(self, name: str, record: StepRecord | None) -> None:
        if not self.enabled:
            return
        if record is None:
            if self.tty:
                status = self.console.status(f"{name} …")
                status.__enter__()
                self._status = status
            return
        if self._status is not None:
            self._status.__exit__(None, None, None)
            self._status = None
        style = STATUS_STYLE.get(record.status, "")
        self.console.print(
            f"[{style}]{record.status:>12}[/]  {name:<16} {record.summary}  "
            f"[dim]({record.duration_s:.2f} s, {record.ssh_round_trips} ssh)[/]", highlight=False)

    def close(self) -> None:
        if self._status is not None:
            self._status.__exit__(None, None, None)
            self._status = None


def counted(n: int, word: str) -> str:
    """`1 SSH round trip`, `2 SSH round trips`, `0 API calls`."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def totals_line(report: RunReport) -> str:
    d = report.to_dict()
    t = d["totals"]
    return (f"{d['summary']} on {report.host}: {t['duration_s']:.1f} s, "
            f"{counted(t['ssh_round_trips'], 'SSH round trip')} ({t['ssh_round_trips_before_smoke']} before smoke), "
            f"{counted(t['ssh_connects'], 'connection')}, {counted(t['api_calls'], 'API call')}")
