"""A bench run a step measured (`MeasuredRun`, kept in `RunState.measured`), the ledger's record of it, and the
verdict its gates gave it (pure).

Steps add the entries (steps/checks.py bench_for_release) and read them (share_move: their own run's earlier runs,
not in the ledger yet); the command files them after its run (commands/filing.py). Light on purpose: every run
loads it with the steps, and the ledger's module (ledger/sqlite.py) only when a run is recorded or read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # types only
    from orchestrator.bench.run import BenchRun
    from orchestrator.ledger.sqlite import RunRecord, RunSource, RunVerdict
    from orchestrator.runlog import StepRecord


@dataclass(frozen=True)
class MeasuredRun:
    """A bench run a step measured, as this machine's ledger will hold it. Steps only measure: the command files
    every measured run once its run has ended (commands/filing.py), with the verdict of the gates named in
    `judged_by`, so a run a gate rejected is filed as rejected, never before a gate has judged it."""

    run: BenchRun
    step: str  # the step that measured it
    source: RunSource
    release: str | None
    preset: str
    flags: dict[str, Any]  # the server's public flags (the ledger never holds a secret flag's value)
    label: str | None = None  # a sweep point's overrides, `k=v, …`
    #: The playbook's gate steps from the measuring step on, which judge this run (the throughput gate's run of
    #: `up` and `roll`: throughput, gate); empty for a run no gate judges (a plain bench, a roll's baseline).
    judged_by: tuple[str, ...] = ()


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
    from orchestrator.ledger.sqlite import RunRecord

    run = measured.run
    return RunRecord(id=run.run_id, host=host, release_id=measured.release, preset=measured.preset,
                     started_at=run.started_at, flags=dict(measured.flags), bench=run.result,
                     telemetry=run.telemetry, diagnosis=tuple(run.diagnosis), source=measured.source,
                     label=measured.label, jsonl_path=f"{host}:{run.remote_jsonl}", verdict=verdict)
