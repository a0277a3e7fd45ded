"""The `bench` step (issue 38 item 10): every point runs, and the failed benches among them are named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.bench.run import BenchRun
from orchestrator.engine.state import RunInputs
from orchestrator.errors import CheckFailed
from orchestrator.steps import checks
from tests.unit.bench.test_bench_failures import bench_run


def test_the_bench_step_runs_every_point_and_names_the_failed_ones(make_run, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    failures = iter(["", "493 of 600 requests failed (82.2 %), more than …"])

    def fake_bench(ctx: Any, preset: str, release: str | None, overrides: Any = None, *, judged: bool = False
                   ) -> BenchRun:
        return bench_run(f"r{len(said)}", next(failures))

    said: list[str] = []
    monkeypatch.setattr(checks, "bench_for_release", fake_bench)
    run = make_run({}, {"health": "200", "current_release": "/var/lib/deploy/releases/rel-1"})
    run.ctx.say = said.append
    run.ctx.inputs = RunInputs(bench_points=({"max-concurrency": "16"}, {"max-concurrency": "64"}))
    record = run.step("bench")
    assert len(run.ctx.state.bench_runs) == 2  # a failed point does not stop the sweep
    assert record.summary.endswith("; 1 of them a failed bench (too many failed requests)")
    assert any(line.startswith("  [fail] a failed bench: 493 of 600") for line in said)


def test_the_throughput_step_measures_into_the_state_and_never_writes_the_ledger(
        make_run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Issue 47: the step's run joins RunState.measured, judged by the playbook's gates from it on; the ledger
    is the command's to write after the run (commands/filing.py), so the step opens none, even when it fails."""
    from orchestrator.bench import run as bench_module
    from orchestrator.ledger.sqlite import Ledger
    from orchestrator.store import store

    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("DEPLOY_STATE_URL", raising=False)
    store.reset()
    writes: list[dict[str, Any]] = []
    monkeypatch.setattr(Ledger, "record_run", lambda _self, **kw: writes.append(kw))
    monkeypatch.setattr(bench_module, "run_bench", lambda *_a, **_kw: bench_run("r-20261201-000000-aaaa"))
    run = make_run({}, {})
    run.ctx.playbook_steps = ["health", "smoke", "throughput", "gate", "unlock"]
    run.ctx.profile = run.ctx.profile.model_copy(update={"min_output_throughput": 1e9})  # the gate fails it
    with pytest.raises(CheckFailed, match="below the minimum"):
        run.step("throughput")
    assert writes == [] and not (tmp_path / "state" / "ledger.sqlite").exists()
    [m] = run.ctx.state.measured
    assert (m.run.run_id, m.step, m.judged_by, m.source, m.label) == (
        "r-20261201-000000-aaaa", "throughput", ("throughput", "gate"), "bench", None)
    store.reset()


def test_the_bench_steps_points_are_measured_unjudged(make_run, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.bench import run as bench_module

    monkeypatch.setattr(bench_module, "run_bench", lambda *_a, **kw: bench_run(f"r{len(kw['overrides'])}"))
    run = make_run({}, {"health": "200", "current_release": "/var/lib/deploy/releases/rel-1"})
    run.ctx.playbook_steps = ["connect", "lock", "bench", "unlock"]
    run.ctx.inputs = RunInputs(bench_points=({"max-concurrency": "16"},))
    run.step("bench")
    [m] = run.ctx.state.measured
    assert (m.source, m.label, m.judged_by, m.step) == ("sweep", "max-concurrency=16", (), "bench")
