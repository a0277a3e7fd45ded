"""Repeated bench figures as mean, confidence interval and spread (`deploy bench --repeat N`, the gate, tune).

Why: one run per point is not a measurement on a shared machine (this project's own baselines moved from 1.8k to
3.1k tok/s with load alone). N runs give a mean and a Student-t interval; two figures whose intervals overlap are
not told apart. Pure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: Two-sided 95 % Student-t quantiles by degrees of freedom (1..30); above 30 the normal 1.96 is close enough.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(df: int) -> float:
    return _T95[df - 1] if 1 <= df <= len(_T95) else 1.96


@dataclass(frozen=True)
class Estimate:
    """n measurements of one figure: mean, 95 % CI, stdev and the spread (min..max)."""

    n: int
    mean: float
    stdev: float
    ci_low: float
    ci_high: float
    low: float
    high: float

    @property
    def half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2.0

    @property
    def half_width_pct(self) -> float:
        return 100.0 * self.half_width / abs(self.mean) if self.mean else 0.0

    def overlaps(self, other: Estimate) -> bool:
        """The intervals touch: the two figures are not distinguishable at this confidence."""
        return self.ci_low <= other.ci_high and other.ci_low <= self.ci_high

    def text(self, fmt: str = ".1f") -> str:
        if self.n < 2:
            return format(self.mean, fmt)
        return f"{self.mean:{fmt}} ± {self.half_width:{fmt}}"

    def to_dict(self) -> dict[str, float | int]:
        return {"n": self.n, "mean": self.mean, "stdev": self.stdev, "ci95_low": self.ci_low,
                "ci95_high": self.ci_high, "min": self.low, "max": self.high}


def estimate(values: Sequence[float], *, noise_pct: float = 0.0) -> Estimate:
    """Mean and 95 % CI of `values`. One value has no spread of its own: its interval is ±noise_pct of it (the
    profile's noise threshold), so a single run is never taken for more exact than the machine is."""
    if not values:
        raise ValueError("no values to estimate")
    n = len(values)
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if n > 1 else 0.0
    half = t95(n - 1) * sd / math.sqrt(n) if n > 1 else 0.0
    half = max(half, abs(mean) * noise_pct / 100.0)
    return Estimate(n, mean, sd, mean - half, mean + half, min(values), max(values))


def median_index(values: Sequence[float]) -> int:
    """The index of the median value (the lower one of an even count): the run that stands for the repeats."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    return order[(len(order) - 1) // 2]
