"""The `bench` step (issue 38 item 10): every point runs, and the failed benches among them are named."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.bench.run import BenchRun
from orchestrator.engine.state import RunInputs
from orchestrator.steps import checks
from tests.unit.bench.test_bench_failures import bench_run


def test_the_bench_step_runs_every_point_and_names_the_failed_ones(make_run, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    failures = iter(["", "493 of 600 requests failed (82.2 %), more than …"])

    def fake_bench(ctx: Any, preset: str, release: str | None, overrides: Any = None) -> BenchRun:
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
