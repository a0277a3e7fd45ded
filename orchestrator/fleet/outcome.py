"""Judging one host's single-host report for the fleet summary: result word, changed steps, round trips, detail.

Pure: it reads the payload the single-host command prints with --json (which the fleet report carries as is).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.envelope import envelope
from orchestrator.fleet.engine import HostOutcome
from orchestrator.runlog import StepRecord

Payload = dict[str, Any]
#: A one-line summary of a host's report for the summary table (see details.py).
DetailFn = Callable[[Payload], str]


def host_outcome(name: str, code: int, report: Payload, records: list[StepRecord],
                 detail: DetailFn | None = None) -> HostOutcome:
    """Judge one host's report (given the envelope of docs/json.md): result word, changed steps, round trips,
    a one-line detail."""
    report = envelope(report, exit_code=code)
    error = report if "what" in report else None  # the body raised or emitted a DeployError's document
    steps = report.get("steps")
    if not steps and records:  # a failed run: keep the steps it completed, plus the failed one
        steps = [r.to_dict() for r in records]
        if error and error.get("step"):
            steps.append({"name": error["step"], "status": "failed", "summary": error.get("what", "")})
        report["steps"] = steps
    changed = [s["name"] for s in steps or [] if s.get("status") in ("changed", "would-change")]
    totals = report.get("totals") if isinstance(report.get("totals"), dict) else {}
    trips = totals.get("ssh_round_trips") if totals else None
    if trips is None and records:
        trips = sum(r.ssh_round_trips for r in records)
    if code != 0:
        result = "failed"
        text = (f"{error.get('step') or '?'}: {error.get('what', '')}" if error
                else (detail(report) if detail else ""))
    else:
        result = ("would change" if report.get("dry_run") else "changed") if report.get("changed") else "ok"
        text = detail(report) if detail else ""
    return HostOutcome(name, result, exit_code=code, report=report,  # type: ignore[arg-type]
                       ssh_round_trips=trips, changed_steps=changed, detail=text)
