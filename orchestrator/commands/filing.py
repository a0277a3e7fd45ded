"""This machine's ledger (or the team store's) written by the command, once its run has ended (issue 47).

Why here and not in a step: a step that filed its bench run wrote the ledger before any gate had judged the run, so
a release the throughput gate rejected (or a roll's gate rolled back) read in `deploy history --bench` like any
other. Steps now only measure (RunState.measured); the command that ran the playbook files every measured run from
the run's typed state after the run, with the verdict of the gates that judge it (ledger/sqlite.py RunVerdict):

- a run whose gates all passed: `passed`; one a gate failed: `rejected`; one whose run ended (a step failing, a
  fleet's cancel) before its gates had judged it: `interrupted`; a run no gate judges (a plain bench, a sweep point,
  a roll's baseline, a tune's run): no verdict. Every other field is what the step used to write.
- a run stopped by a signal (Ctrl-C, SIGTERM) files what it had measured before the signal (`filed_if_stopped`):
  a run whose gates had all judged it keeps their verdict, one whose gate was still running (or not reached) is
  `interrupted`; further signals wait until the few rows are written (local/signals.py `finishing`).

The ledger is a convenience: a write that fails is said and never fails the command.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.engine.runner import RunReport
    from orchestrator.ledger.sqlite import RunRecord


def file_runs(report: RunReport, say: Callable[[str], None] | None = None, *,
              stopped: bool = False) -> list[RunRecord]:
    """Write every run the report's run measured into the command's ledger, once, with its gates' verdict; returns
    the records as stored. Nothing measured (most playbooks): nothing is opened. `stopped`: a signal ended the run
    in its last step, which therefore judged nothing (its record says "ok" only because it never ended)."""
    if not report.state.measured:
        return []
    steps = report.steps[:-1] if stopped else report.steps
    # Here, not at the top: a run that measured nothing (a converged `up --skip-bench`) never loads the ledger's
    # module (tests/perf/client_cost.py).
    from orchestrator.bench.measured import as_record, verdict_of
    from orchestrator.store.store import ledger

    tell = say or (lambda _msg: None)
    filed: list[RunRecord] = []
    for measured in report.state.measured:
        rec = as_record(report.host, measured, verdict_of(measured, steps))
        try:
            filed.append(ledger().record_run(
                host=rec.host, bench=rec.bench, source=rec.source, release_id=rec.release_id, preset=rec.preset,
                started_at=rec.started_at, flags=rec.flags, telemetry=rec.telemetry, diagnosis=rec.diagnosis,
                jsonl_path=rec.jsonl_path, run_id=rec.id, label=rec.label, verdict=rec.verdict))
        except Exception as exc:  # the ledger is a local convenience; never fail a rollout on it
            tell(f"  warning: could not write the local ledger: {exc}")
    return filed


@contextmanager
def filed_if_stopped(say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Around a command's run: when a signal stops it, file what the run measured before re-raising the stop
    (engine/runner.py hangs the run's report on it), so a finished bench is not lost to a late Ctrl-C."""
    try:
        yield
    except KeyboardInterrupt as stop:
        report = getattr(stop, "report", None)
        if report is not None and report.state.measured:
            from orchestrator.local.signals import finishing

            with finishing("filing the stopped run's measurements", say or (lambda _msg: None)):
                file_runs(report, say, stopped=True)
        raise
