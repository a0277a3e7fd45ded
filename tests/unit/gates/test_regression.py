"""Throughput gate: noise band, direction of each metric, failures, floor, operator override."""

from __future__ import annotations

import pytest

from orchestrator.gates.throughput import delta_pct, gate
from orchestrator.parsers.bench import BenchResult


def run(out: float = 3000.0, tpot: float = 100.0, ttft: float = 1000.0, failed: int = 0,
        completed: int = 1024) -> BenchResult:
    return BenchResult(source="jsonl", completed=completed, failed=failed, output_throughput=out,
                       mean_tpot_ms=tpot, mean_ttft_ms=ttft)


def test_within_noise_passes() -> None:
    g = gate(run(out=2900.0, tpot=104.0, ttft=1040.0), run())
    assert g.verdict == "pass" and g.passed
    assert [d.status for d in g.deltas] == ["pass", "pass", "pass"]
    assert g.deltas[0].delta_pct == pytest.approx(-3.333, abs=1e-3)


def test_throughput_drop_regresses() -> None:
    g = gate(run(out=2800.0), run())
    assert g.verdict == "regressed" and not g.passed
    assert "output throughput (tok/s) 2800.00 vs baseline 3000.00 (-6.7 %" in g.reasons[0]


def test_latency_is_reported_and_gated_only_when_asked() -> None:
    g = gate(run(tpot=110.0), run())
    assert g.verdict == "pass" and g.deltas[1].status == "regressed"  # reported, not gated by default
    assert gate(run(tpot=110.0), run(), gated=("output_throughput", "mean_tpot_ms")).verdict == "regressed"
    assert gate(run(ttft=900.0), run(), gated=("mean_ttft_ms",)).verdict == "pass"  # better TTFT is no regression


def test_improved() -> None:
    g = gate(run(out=3500.0, tpot=90.0), run())
    assert g.verdict == "improved" and g.passed
    assert g.deltas[0].status == "improved" and g.deltas[1].status == "improved"


def test_the_seeds_trade_passes_unless_ttft_is_gated() -> None:
    g = gate(run(out=3840.0, ttft=1500.0), run())  # the +28 % trade with queueing
    assert g.verdict == "improved" and g.passed
    strict = ("output_throughput", "mean_ttft_ms")
    assert gate(run(out=3840.0, ttft=1500.0), run(), gated=strict).verdict == "regressed"
    g2 = gate(run(out=3840.0, ttft=1500.0), run(), gated=strict, accept_regression=True)
    assert g2.verdict == "regressed" and g2.accepted and g2.passed


def test_failures_fail_even_with_override() -> None:
    g = gate(run(out=4000.0, failed=3), run(), accept_regression=True)
    assert g.verdict == "fail" and not g.passed and not g.accepted
    assert gate(run(completed=0), None).verdict == "fail"


def test_noise_threshold_is_configurable() -> None:
    assert gate(run(out=2800.0), run(), noise_pct=10.0).verdict == "pass"
    assert gate(run(out=2990.0), run(), noise_pct=0.0).verdict == "regressed"
    with pytest.raises(ValueError):
        gate(run(), run(), noise_pct=-1)


def test_no_baseline_and_floor() -> None:
    g = gate(run(), None)
    assert g.verdict == "pass" and all(d.status == "n/a" for d in g.deltas)
    assert any("no baseline" in r for r in g.reasons)
    g2 = gate(run(out=2000.0), None, min_output_throughput=2500.0)
    assert g2.verdict == "regressed" and "floor 2500.0" in g2.reasons[0]


def test_delta_pct_edge_cases() -> None:
    assert delta_pct(0.0, 5.0) is None
    assert delta_pct(None, 5.0) is None
    assert delta_pct(200.0, 250.0) == 25.0
