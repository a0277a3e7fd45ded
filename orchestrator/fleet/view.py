"""What a fleet run shows: one live line per host with its current step (rich Live on a TTY; otherwise plain
`host: step status (seconds; elapsed)` lines as steps end), then a summary table. Pure rendering from engine
events and outcomes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from orchestrator.fleet.engine import Event, FleetRun, HostOutcome
from orchestrator.ui.tables import Cell, Column, TableSpec, spec

RESULT_STYLE = {"ok": "green", "changed": "yellow", "would change": "cyan", "failed": "bold red", "skipped": "dim"}


@dataclass
class _HostLine:
    state: str = "queued"
    step: str = ""
    note: str = ""
    started: float | None = None
    outcome: HostOutcome | None = None
    skipped_steps: int = 0
    last_ended: str = ""


@dataclass
class FleetView:
    """Consumes engine events on the calling thread; `enabled=False` (--json) shows nothing."""

    console: Console
    hosts: list[str]
    enabled: bool = True
    tty: bool = False
    max_rows: int = 40
    lines: dict[str, _HostLine] = field(default_factory=dict)
    _live: Live | None = None

    def __post_init__(self) -> None:
        self.lines = {h: _HostLine() for h in self.hosts}

    def __enter__(self) -> FleetView:
        if self.enabled and self.tty:
            self._live = Live(self._render(), console=self.console, auto_refresh=False, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def __call__(self, event: Event) -> None:
        line = self.lines[event.host]
        if event.kind == "start":
            line.state, line.started = "running", time.monotonic()
        elif event.kind == "step":
            line.step, line.note = event.text, ""
        elif event.kind == "ended":
            line.last_ended = event.text
            line.skipped_steps += event.status == "skipped"
        elif event.kind == "say":
            line.note = event.text
        elif event.kind == "done" and event.outcome is not None:
            line.state, line.outcome = event.outcome.result, event.outcome
        if not self.enabled:
            return
        if self._live is not None:
            self._live.update(self._render(), refresh=True)
        else:
            self._plain(event, line)

    def tick(self) -> None:
        """Redraw the live view so elapsed times move while no host reports anything."""
        if self._live is not None:
            self._live.update(self._render(), refresh=True)

    def _plain(self, event: Event, line: _HostLine) -> None:
        """One line per host event: a start, each step that ended (status, its seconds, the host's elapsed
        seconds) and the result. Skipped steps are counted on the result line, not listed; a step's start and
        its chatter are not printed (the step's line comes when it ends, its chatter is in its report)."""
        if event.kind == "start":
            text = "started"
        elif event.kind == "ended":
            if event.status == "skipped":
                return
            text = f"{event.text} {event.status} ({event.duration_s:.1f} s; {self._elapsed(line):.1f} s elapsed)"
        elif event.kind == "done":
            o = event.outcome
            assert o is not None
            if o.exit_code != 0 and line.step and line.step != line.last_ended:  # the step that raised never ended
                self.console.print(f"{event.host}: {line.step} failed ({self._elapsed(line):.1f} s elapsed)",
                                   markup=False, highlight=False, soft_wrap=True)
            changed = f", {len(o.changed_steps)} changed" if o.changed_steps else ""
            skipped = f", {line.skipped_steps} step(s) skipped" if line.skipped_steps else ""
            text = f"{o.result}{changed}{skipped} ({o.duration_s:.1f} s){' — ' + o.detail if o.detail else ''}"
        else:
            return
        self.console.print(f"{event.host}: {text}", markup=False, highlight=False, soft_wrap=True)

    @staticmethod
    def _elapsed(line: _HostLine) -> float:
        return time.monotonic() - line.started if line.started is not None else 0.0

    def _render(self) -> RenderableType:
        counts: dict[str, int] = {}
        for line in self.lines.values():
            counts[line.state] = counts.get(line.state, 0) + 1
        head = Text(" · ".join(f"{n} {state}" for state, n in sorted(counts.items())), style="bold")
        table = Table(show_header=False, box=None, pad_edge=False)
        for col in ("host", "state", "step", "time"):
            table.add_column(col, overflow="ellipsis", no_wrap=True)
        shown = [(h, ln) for h, ln in self.lines.items() if ln.state in ("running", "failed")]
        now = time.monotonic()
        for host, line in shown[: self.max_rows]:
            elapsed = f"{now - line.started:.0f} s" if line.started is not None and line.outcome is None else ""
            step = line.step + (f" — {line.note}" if line.note else "")
            style = RESULT_STYLE.get(line.state, "")
            table.add_row(host, Text(line.state, style=style), step, elapsed)
        if len(shown) > self.max_rows:
            table.add_row(f"… {len(shown) - self.max_rows} more", "", "", "")
        return Group(head, table)


def summary_table(run: FleetRun, title: str) -> TableSpec:
    """The per-host summary; printed through `Output.table`: boxed on a wide terminal, plain columns in a pipe."""
    rows: list[tuple[Cell, ...]] = []
    for o in run.outcomes:
        detail = ", ".join(o.changed_steps) if o.changed_steps else ""
        if o.detail:
            detail = f"{detail}; {o.detail}" if detail else o.detail
        result = o.result if o.exit_code == 0 else f"{o.result} (exit {o.exit_code})"
        rows.append((o.host, Text(result, style=RESULT_STYLE.get(o.result, "")), detail or "-",
                     f"{o.duration_s:.1f} s" if o.result != "skipped" else "-",
                     str(o.ssh_round_trips) if o.ssh_round_trips is not None else "-"))
    return spec(title, ["host", "result", "changed steps / detail", Column("duration", "right"),
                        Column("round trips", "right")], rows)


def fleet_summary(run: FleetRun, exit_code: int | None = None) -> dict[str, Any]:
    """`exit_code`: the command's own when more than the hosts decide it (e.g. the router's report after `up`)."""
    counts = {r: 0 for r in RESULT_STYLE}
    for o in run.outcomes:
        counts[o.result] += 1
    return {"hosts": len(run.outcomes), **{k.replace(" ", "_"): v for k, v in counts.items()},
            "exit_code": run.exit_code if exit_code is None else exit_code, "duration_s": round(run.duration_s, 3),
            "ssh_round_trips": sum(o.ssh_round_trips or 0 for o in run.outcomes), "engine": run.stats.to_dict()}


def totals_text(run: FleetRun, exit_code: int | None = None) -> str:
    """The totals line; its "exit N" is the process's exit code (pass it when more than the hosts decide it)."""
    s = fleet_summary(run, exit_code)
    e = run.stats
    parts = [f"{s[k]} {k.replace('_', ' ')}" for k in ("ok", "changed", "would_change", "failed", "skipped") if s[k]]
    return (f"fleet: {s['hosts']} host(s): {', '.join(parts)} in {run.duration_s:.1f} s, {s['ssh_round_trips']} SSH "
            f"round trips; exit {s['exit_code']} (parallel {e.parallel}: peak {e.peak_running} running, "
            f"{e.peak_threads} threads, {e.peak_open_sockets} open sockets)")
