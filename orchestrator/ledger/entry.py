"""A measured run (engine/state.py MeasuredRun) as the ledger holds it, and the verdict its gates gave it (pure).

The command files the entries after its run (commands/filing.py); a step reads them (steps/checks.py share_move)
to see its own run's earlier runs, which are not in the ledger yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator.ledger.sqlite import RunRecord

if TYPE_CHECKING:
    from orchestrator.engine.state import MeasuredRun
    from orchestrator.ledger.sqlite import RunVerdict
    from orchestrator.runlog import StepRecord


def verdict_of(measured: MeasuredRun, steps: Sequence[StepRecord]) -> RunVerdict | None:
    """What the gates that judge `measured` said of it, from the run's step records (None: no gate judges it)."""
    if not measured.judged_by:
        return None
    gates = [s for s in steps if s.name in measured.judged_by]
    if any(s.status == "failed" for s in gates):
        return "rejected"
    if {s.name for s in gates} >= set(measured.judged_by):
        return "passed"
    return "interrupted"


def as_record(host: str, measured: MeasuredRun, verdict: RunVerdict | None = None) -> RunRecord:
    """The ledger's record of a measured run (as `Ledger.record_run` stores it, before redaction)."""
    run = measured.run
    return RunRecord(id=run.run_id, host=host, release_id=measured.release, preset=measured.preset,
                     started_at=run.started_at, flags=dict(measured.flags), bench=run.result,
                     telemetry=run.telemetry, diagnosis=tuple(run.diagnosis), source=measured.source,
                     label=measured.label, jsonl_path=f"{host}:{run.remote_jsonl}", verdict=verdict)
