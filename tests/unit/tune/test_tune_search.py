"""Issue 23: the bracketing search against a model function, its run bound, and the winner through noise."""

from __future__ import annotations

import math

import pytest

from orchestrator.bench.stats import estimate
from orchestrator.tune.search import (
    MAX_REPEATS,
    Measurement,
    Ranked,
    bracket,
    choose,
    concurrency_grid,
    goodput,
    max_search_runs,
)
from orchestrator.tune.slo import parse_slo

SLO = parse_slo("ttft_p99<=2s,tpot_p99<=80ms")


def knee_at(limit: int, calls: list[int] | None = None, tpot_at: float = 80.0):
    """A server whose TTFT explodes past `limit` and whose TPOT grows with concurrency."""

    def measure(c: int) -> Measurement:
        if calls is not None:
            calls.append(c)
        ttft = 500.0 if c <= limit else 5000.0
        return Measurement(c, {"ttft_p99": ttft, "tpot_p99": tpot_at * c / 1000.0}, c * 10.0)

    return measure


@pytest.mark.parametrize("limit", [8, 9, 100, 255, 256, 257, 511, 1000])
def test_finds_the_highest_grid_value_meeting_the_slo(limit: int) -> None:
    grid = concurrency_grid(8, 512, 8)
    calls: list[int] = []
    res = bracket(grid, SLO, knee_at(limit, calls))
    expect = max(c for c in grid if c <= limit)
    assert res.limit == expect and res.at_top == (limit >= 512)
    assert len(calls) == len(set(calls)) <= max_search_runs(len(grid)) == math.ceil(math.log2(64)) + 2


def test_top_and_bottom_of_the_grid() -> None:
    grid = concurrency_grid(16, 256, 16)
    top = bracket(grid, SLO, knee_at(10_000))
    assert top.limit == 256 and top.at_top and top.runs == 1
    none = bracket(grid, SLO, knee_at(4))
    assert none.limit is None and none.runs == 2
    tpot_bound = bracket(grid, SLO, knee_at(10_000, tpot_at=1000.0))  # TPOT 80 ms at c = 80
    assert tpot_bound.limit == 80


def test_grid_is_not_only_powers_of_two() -> None:
    assert concurrency_grid(8, 40, 12) == (8, 20, 32, 40)
    assert max_search_runs(1) == 2 and max_search_runs(100) == 9


def test_a_borderline_probe_is_run_again_and_decided_on_the_mean() -> None:
    seen: list[int] = []

    def measure(c: int) -> Measurement:
        seen.append(c)
        ttft = 1990.0 if len(seen) % 2 else 2030.0  # straddles the 2 s bound; mean 2010 misses it
        return Measurement(c, {"ttft_p99": ttft, "tpot_p99": 10.0}, 100.0)

    res = bracket((64,), SLO, measure, noise_pct=5.0)
    assert res.runs == 4 and res.repeats == MAX_REPEATS == 3 and res.limit is None  # never out of the band


def test_repeats_stop_once_the_mean_leaves_the_noise_band() -> None:
    ttfts = iter([1990.0, 1500.0])

    def measure(c: int) -> Measurement:
        return Measurement(c, {"ttft_p99": next(ttfts), "tpot_p99": 10.0}, 100.0)

    res = bracket((64,), SLO, measure, noise_pct=5.0)
    assert res.runs == 2 and res.limit == 64


def test_goodput_pools_the_limit_probe_and_the_confirmations() -> None:
    res = bracket(concurrency_grid(8, 64, 8), SLO, knee_at(40))
    est = goodput(res, [Measurement(40, {}, 410.0), Measurement(40, {}, 390.0)], noise_pct=0.0)
    assert est is not None and est.n == 3 and est.mean == pytest.approx(400.0)
    assert goodput(bracket((8,), SLO, knee_at(1)), [], noise_pct=0.0) is None


def test_equal_points_are_not_a_winner_over_the_current_flags() -> None:
    cur = Ranked("current", estimate([1000, 1020, 980]))
    same = Ranked("steps=8", estimate([1010, 1030, 990]))
    v = choose([cur, same], "current")
    assert v.winner == "current" and v.best == "steps=8" and "current" in v.indistinguishable
    assert "not distinguishable" in v.reason


def test_a_clear_winner_with_its_margin() -> None:
    cur = Ranked("current", estimate([1000, 1010, 990]))
    better = Ranked("steps=8", estimate([1300, 1310, 1290]))
    lost = Ranked("mrr=64", None)
    v = choose([cur, better, lost], "current")
    assert v.winner == "steps=8" and v.margin_pct == pytest.approx(30.0) and v.indistinguishable == ()
    assert choose([lost], "current").winner is None
    no_slo = choose([Ranked("current", None), better], "current")
    assert no_slo.winner == "steps=8" and no_slo.margin_pct is None and "met the SLO at no concurrency" in no_slo.reason


def test_no_repeat_when_another_bound_is_missed_by_far() -> None:
    def measure(c: int) -> Measurement:
        return Measurement(c, {"ttft_p99": 7000.0, "tpot_p99": 79.0}, 100.0)  # TPOT borderline, TTFT far off

    res = bracket((64,), SLO, measure, noise_pct=5.0)
    assert res.runs == 1 and res.limit is None
