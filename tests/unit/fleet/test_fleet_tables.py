"""Fleet summary tables in a pipe: plain columns, nothing boxed, wrapped or split (issue 25, item 12)."""

from __future__ import annotations

import io

from rich.console import Console

from orchestrator.fleet.engine import EngineStats, FleetRun, HostOutcome
from orchestrator.fleet.view import summary_table
from orchestrator.ui.output import Output

RELEASE = "20261130T030547-f040fd49"


def run_of(*outcomes: HostOutcome) -> FleetRun:
    return FleetRun(list(outcomes), EngineStats(parallel=8), 12.0)


def piped(width: int = 80) -> tuple[Output, io.StringIO]:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None, highlight=False,
                      soft_wrap=True)
    return Output(False, console), buf


def test_fleet_summary_in_a_pipe_is_plain_columns_and_keeps_release_ids_whole() -> None:
    run = run_of(
        HostOutcome("pve-gpu-1.example.internal", "ok", duration_s=3.2, ssh_round_trips=4,
                    detail=f"release {RELEASE} current, healthy, 2 GPUs at 310 W, flags sha 9f3c1a2b4d5e"),
        HostOutcome("pve-gpu-2.example.internal", "failed", exit_code=3, duration_s=1.0, ssh_round_trips=1,
                    detail=f"release {RELEASE}: /health 503"))
    out, buf = piped()
    out.table(summary_table(run, "deploy status group prod: 2 host(s)"))
    text = buf.getvalue()
    lines = text.splitlines()
    assert not any(ch in text for ch in "┏┃━│─┡╇└┘┌┐")  # no box
    assert lines[0] == "deploy status group prod: 2 host(s)"
    assert lines[1].split() == ["host", "result", "changed", "steps", "/", "detail", "duration", "round", "trips"]
    assert len(lines) == 4  # title, header, one line per host: nothing wrapped at 80 columns
    assert all(RELEASE in line for line in lines[2:])
    assert lines[3].startswith("pve-gpu-2.example.internal  failed (exit 3)")
    assert lines[2].endswith("3.2 s            4")


def test_fleet_summary_on_a_wide_terminal_is_still_a_table() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=200, force_terminal=True, color_system=None, highlight=False)
    Output(False, console).table(summary_table(run_of(HostOutcome("gpu-1", "ok", duration_s=1.0)), "t"))
    assert "┃" in buf.getvalue() or "│" in buf.getvalue()
