"""Issue 23: the throughput step can bench N times and hand the gate the median run (profile gate_repeats)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from orchestrator.bench.run import BenchRun
from orchestrator.parsers.bench import BenchResult
from orchestrator.steps import checks


def _run(i: int, out: float) -> BenchRun:
    result = BenchResult(source="jsonl", completed=64, num_prompts=64, failed=0, output_throughput=out)
    return BenchRun(f"run{i}", "e2e", datetime(2026, 12, 1), result, None, [], "/x.jsonl", "")


def test_the_gate_judges_the_median_of_the_repeats(make_run, monkeypatch: pytest.MonkeyPatch) -> None:
    rates = iter([1000.0, 400.0, 980.0])  # one slow run on a busy machine
    calls: list[Any] = []

    def fake_bench(ctx: Any, preset: str, release: str | None, overrides: Any = None, *, judged: bool = False
                   ) -> BenchRun:
        calls.append(preset)
        return _run(len(calls), next(rates))

    monkeypatch.setattr(checks, "bench_for_release", fake_bench)
    run = make_run({}, {})
    run.ctx.profile = run.ctx.profile.model_copy(update={"gate_repeats": 3})
    rec = run.step("throughput")
    assert len(calls) == 3
    assert run.ctx.state.bench_run is not None and run.ctx.state.bench_run.result.output_throughput == 980.0
    rep = rec.details["repeats"]
    assert rep["gated_run"] == "run3" and rep["output_throughput"]["n"] == 3
    assert rep["output_throughput"]["min"] == 400.0


def test_one_run_by_default(make_run, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def fake_bench(ctx: Any, preset: str, release: str | None, overrides: Any = None, *, judged: bool = False
                   ) -> BenchRun:
        calls.append(preset)
        return _run(1, 1000.0)

    monkeypatch.setattr(checks, "bench_for_release", fake_bench)
    rec = make_run({}, {}).step("throughput")
    assert len(calls) == 1 and "repeats" not in rec.details
