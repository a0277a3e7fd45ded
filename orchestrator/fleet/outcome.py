"""Judging one host's typed single-host result for the fleet summary: result word, changed steps, round trips,
detail.

Pure: it reads the typed result a single-host function returns (orchestrator/commands/, orchestrator/roll.py),
never the document it prints; the fleet report carries that document (`payload()`) as is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.envelope import envelope
from orchestrator.errors import DeployError
from orchestrator.fleet.engine import HostOutcome
from orchestrator.runlog import StepRecord


class HostResult(Protocol):
    """What a single-host command's typed function returns, as the fleet judges it."""

    @property
    def exit_code(self) -> int: ...

    @property
    def error(self) -> DeployError | None:
        """The error that stopped the run (its document then carries it); None when it ran to the end."""

    @property
    def steps(self) -> list[StepRecord]:
        """The steps its document lists (a view such as status lists none: the fleet adds the host's records)."""

    @property
    def ssh_round_trips(self) -> int | None:
        """The round trips its document's totals give; None: it has no totals (the fleet sums the records)."""

    @property
    def changed(self) -> bool: ...

    @property
    def dry_run(self) -> bool: ...

    def detail(self) -> str:
        """The host's one-line summary in the fleet table."""

    def payload(self) -> dict[str, Any]:
        """The single-host `--json` document, carried in the fleet report as is."""


@dataclass(frozen=True)
class Refused:
    """A host whose command raised before it had a result (a bad host entry, a failed read, a refused option)."""

    failure: DeployError
    steps: list[StepRecord] = field(default_factory=list)
    ssh_round_trips: int | None = None
    changed: bool = False
    dry_run: bool = False

    @property
    def exit_code(self) -> int:
        return self.failure.exit_code

    @property
    def error(self) -> DeployError | None:
        return self.failure

    def detail(self) -> str:
        return ""

    def payload(self) -> dict[str, Any]:
        return {"ok": False, **self.failure.to_dict()}


def host_outcome(name: str, result: HostResult, records: list[StepRecord]) -> HostOutcome:
    """Judge one host's result: result word, changed steps, round trips, a one-line detail; its report is the
    result's document in the envelope of docs/json.md (a failed run's keeps the steps it completed, the failed
    one last)."""
    code, error = result.exit_code, result.error
    report = envelope(result.payload(), exit_code=code)
    steps = [s.to_dict() for s in result.steps]
    if not steps and records:  # its document lists none: the steps this host's run completed
        steps = [r.to_dict() for r in records]
        if error is not None and error.step:
            steps.append({"name": error.step, "status": "failed", "summary": error.what})
        report["steps"] = steps
    changed = [s["name"] for s in steps if s.get("status") in ("changed", "would-change")]
    trips = result.ssh_round_trips
    if trips is None and records:
        trips = sum(r.ssh_round_trips for r in records)
    if code != 0:
        word = "failed"
        text = f"{error.step or '?'}: {error.what}" if error is not None else result.detail()
    else:
        word = ("would change" if result.dry_run else "changed") if result.changed else "ok"
        text = result.detail()
    return HostOutcome(name, word, exit_code=code, report=report,  # type: ignore[arg-type]
                       ssh_round_trips=trips, changed_steps=changed, detail=text)

