"""Issue 23: repeated bench figures as mean, 95 % CI and spread; overlapping intervals are not told apart."""

from __future__ import annotations

import pytest

from orchestrator.bench.stats import estimate, median_index, t95


def test_mean_ci_and_spread() -> None:
    e = estimate([100.0, 110.0, 90.0])
    assert e.n == 3 and e.mean == pytest.approx(100.0) and e.stdev == pytest.approx(10.0)
    assert e.half_width == pytest.approx(4.303 * 10.0 / 3 ** 0.5, rel=1e-3)
    assert (e.low, e.high) == (90.0, 110.0)
    assert e.text() == "100.0 ± 24.8"


def test_a_single_run_is_as_exact_as_the_noise_band() -> None:
    e = estimate([200.0], noise_pct=5.0)
    assert (e.ci_low, e.ci_high) == (190.0, 210.0)
    assert estimate([200.0]).half_width == 0.0


def test_overlap() -> None:
    a, b, c = estimate([100, 101, 99]), estimate([100.5, 101.5, 99.5]), estimate([150, 151, 149])
    assert a.overlaps(b) and b.overlaps(a) and not a.overlaps(c)


def test_t_quantiles_and_median() -> None:
    assert t95(1) == 12.706 and t95(100) == 1.96
    assert median_index([5.0, 1.0, 3.0]) == 2 and median_index([4.0, 1.0, 3.0, 2.0]) == 3
    with pytest.raises(ValueError):
        estimate([])
