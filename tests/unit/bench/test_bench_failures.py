"""Issue 38 item 10: a bench run that lost more of its requests than its preset allows is a failed bench: `deploy
bench` exits 1 and a tune never counts the run as meeting its SLO."""

from __future__ import annotations

from datetime import datetime

import pytest
from pydantic import ValidationError

from orchestrator.bench.failures import failed_bench
from orchestrator.bench.run import BenchRun
from orchestrator.cli.bench_cmd import failed_runs
from orchestrator.inventory.models import BenchPreset
from orchestrator.parsers.bench import BenchResult
from orchestrator.tune.search import Measurement, bracket, concurrency_grid, goodput
from orchestrator.tune.slo import parse_slo


def result(completed: int, failed: int | None, prompts: int | None = None) -> BenchResult:
    return BenchResult(source="jsonl", completed=completed, failed=failed, output_throughput=900.0,
                       num_prompts=prompts if prompts is not None else completed + (failed or 0))


def test_the_issues_run_is_a_failed_bench_and_a_clean_one_is_not() -> None:
    assert failed_bench(result(107, 493), 0.01) == ("493 of 600 requests failed (82.2 %), more than the preset's "
                                                    "max_failed_fraction 0.01 (1 %)")
    assert failed_bench(result(600, 0), 0.01) == ""
    assert failed_bench(result(198, 2), 0.01) == ""  # 1 %: within the preset's allowance
    assert failed_bench(result(197, 3), 0.01).startswith("3 of 200 requests failed (1.5 %)")
    assert failed_bench(result(599, 1), 0.0).startswith("1 of 600 requests failed")  # 0: any failure fails it
    assert failed_bench(result(0, 0, prompts=64), 0.5) == "no request completed: the server did not answer the " \
                                                          "benchmark"
    assert failed_bench(result(50, None, prompts=0), 0.01) == ""  # an imported block without counts: unknown


def test_the_preset_sets_the_allowance() -> None:
    base = {"random_input_len": 8, "random_output_len": 8, "random_range_ratio": 1.0, "num_prompts": 8}
    assert BenchPreset.model_validate(base).max_failed_fraction == 0.01
    assert BenchPreset.model_validate({**base, "max_failed_fraction": 0.2}).max_failed_fraction == 0.2
    for bad in (-0.1, 1.0, "lots"):
        with pytest.raises(ValidationError):
            BenchPreset.model_validate({**base, "max_failed_fraction": bad})


def bench_run(run_id: str, failure: str = "") -> BenchRun:
    return BenchRun(run_id, "e2e", datetime(2026, 12, 1), result(600, 0), None, [], "/x.jsonl", "",
                    failure=failure)


def test_a_command_with_a_failed_run_exits_1_and_says_which() -> None:
    assert failed_runs(["e2e"], [bench_run("r1")]) == {}
    verdict = failed_runs(["max-concurrency=16", "max-concurrency=64"],
                          [bench_run("r1"), bench_run("r2", "493 of 600 requests failed (82.2 %), …")])
    assert verdict["exit_code"] == 1 and verdict["ok"] is False
    assert verdict["what"] == ("1 of 2 bench run(s) failed: max-concurrency=64 (run r2): 493 of 600 requests "
                               "failed (82.2 %), …")
    assert "max_failed_fraction" in verdict["fix"] and "journalctl -u sglang" in verdict["fix"]
    assert bench_run("r2", "x").to_dict()["failure"] == "x" and bench_run("r1").to_dict()["failure"] is None


SLO = parse_slo("ttft_p99<=2s")


def test_a_failed_bench_never_meets_the_slo_in_the_tune() -> None:
    """The survivors of a run that lost most of its requests have fine latencies: the run still misses."""
    def measure(c: int) -> Measurement:
        lost = "300 of 600 requests failed (50.0 %), more than …" if c > 32 else ""
        return Measurement(c, {"ttft_p99": 100.0}, 10.0 * c, failed=lost)

    res = bracket(concurrency_grid(8, 64, 8), SLO, measure, noise_pct=5.0)
    assert res.limit == 32  # the fine figures of 40..64 do not count
    top = res.probe_at(64)
    assert top is not None and not top.met and len(top.runs) == 1  # no repeat of a failed bench
    assert top.misses[0].startswith("failed bench: 300 of 600 requests failed")
    # A failed confirmation run at the limit leaves the point without a goodput: it cannot win.
    assert goodput(res, [Measurement(32, {"ttft_p99": 100.0}, 320.0)], noise_pct=0.0) is not None
    assert goodput(res, [Measurement(32, {"ttft_p99": 100.0}, 320.0, failed="…")], noise_pct=0.0) is None
