"""The bracketing search for one flag point's SLO limit, and the choice of a winner through noise. Pure.

The limit is the highest concurrency on the grid whose bench meets the SLO. Latency rises with concurrency (the
stand-in's knee, a real server's queue), so the SLO holds below some grid index and fails above it: probe the
top (met: the limit is at least the top), then the bottom (missed: no concurrency meets it), then bisect the
bracket. That is at most 2 + ceil(log2(n - 1)) ≤ ceil(log2(n)) + 2 runs over n grid values, against n for a grid.
A probe within the noise of a bound is run again (at most MAX_REPEATS times, the band narrowing as 1/sqrt(n)) and
decided on the mean (counted apart, `repeats`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from orchestrator.bench.stats import Estimate, estimate
from orchestrator.tune.slo import Slo


@dataclass(frozen=True)
class Measurement:
    """What one bench run at one concurrency gave: the SLO's figures (ms, by bound name) and the output rate."""

    concurrency: int
    figures: dict[str, float | None]
    output_tok_s: float
    run_id: str = ""
    failed: str = ""  # why the run is a failed bench (too many failed requests): it never meets the SLO


Measure = Callable[[int], Measurement]


@dataclass(frozen=True)
class Probe:
    concurrency: int
    runs: tuple[Measurement, ...]
    met: bool
    misses: tuple[str, ...]

    @property
    def output_tok_s(self) -> float:
        return statistics.fmean(r.output_tok_s for r in self.runs)


@dataclass
class SearchResult:
    grid: tuple[int, ...]
    probes: list[Probe] = field(default_factory=list)
    limit: int | None = None  # the highest grid concurrency meeting the SLO; None: not even the lowest
    at_top: bool = False  # the top of the grid met it: the true limit may be higher

    @property
    def runs(self) -> int:
        return sum(len(p.runs) for p in self.probes)

    @property
    def search_runs(self) -> int:
        return len(self.probes)

    @property
    def repeats(self) -> int:
        return self.runs - self.search_runs

    def probe_at(self, concurrency: int) -> Probe | None:
        return next((p for p in self.probes if p.concurrency == concurrency), None)


def max_search_runs(n: int) -> int:
    """The bound the brief sets on one point's search: ceil(log2(n)) + 2 bench runs over n grid values."""
    return math.ceil(math.log2(max(n, 1))) + 2


def grid_size(low: int, high: int, step: int) -> int:
    """How many values concurrency_grid(low, high, step) has, without building it."""
    return (high - low) // step + 1 + (0 if (high - low) % step == 0 else 1)


def concurrency_grid(low: int, high: int, step: int) -> tuple[int, ...]:
    """low, low+step, …, high (high always included): not only powers of two."""
    values = list(range(low, high + 1, step))
    if values[-1] != high:
        values.append(high)
    return tuple(values)


def _borderline(slo: Slo, figures: dict[str, float | None], noise_pct: float) -> bool:
    """A figure lies within the band of its bound, and no other bound is missed beyond it: only then could a
    repeat change the decision."""
    near = False
    for b in slo.bounds:
        v = figures.get(b.name)
        if v is None:
            continue
        band = b.limit_ms * noise_pct / 100.0
        if v > b.limit_ms + band:
            return False
        near = near or abs(v - b.limit_ms) <= band
    return near


def _mean_figures(runs: Sequence[Measurement]) -> dict[str, float | None]:
    names = runs[0].figures.keys()
    out: dict[str, float | None] = {}
    for name in names:
        vals = [r.figures[name] for r in runs if r.figures.get(name) is not None]
        out[name] = statistics.fmean(v for v in vals if v is not None) if vals else None
    return out


#: The most extra runs a borderline probe takes: the mean of 4 runs has half the noise of one.
MAX_REPEATS = 3


def probe(slo: Slo, measure: Measure, concurrency: int, *, noise_pct: float) -> Probe:
    """One run; more (up to MAX_REPEATS) while the mean of a figure lies within noise_pct of its bound, decided
    on the mean of all."""
    runs = [measure(concurrency)]
    while (noise_pct > 0 and len(runs) <= MAX_REPEATS and not any(r.failed for r in runs)
           and _borderline(slo, _mean_figures(runs), noise_pct / math.sqrt(len(runs)))):
        runs.append(measure(concurrency))
    # Figures of a failed bench describe only its survivors: the run misses the SLO, whatever they say.
    misses = [*(f"failed bench: {r.failed}" for r in runs if r.failed), *slo.misses(_mean_figures(runs))]
    return Probe(concurrency, tuple(runs), not misses, tuple(misses))


def bracket(grid: Sequence[int], slo: Slo, measure: Measure, *, noise_pct: float = 0.0) -> SearchResult:
    """The highest grid value meeting the SLO, in at most max_search_runs(len(grid)) probes."""
    values = tuple(sorted(set(grid)))
    result = SearchResult(values)

    def check(i: int) -> bool:
        p = probe(slo, measure, values[i], noise_pct=noise_pct)
        result.probes.append(p)
        return p.met

    hi = len(values) - 1
    if check(hi):
        result.limit, result.at_top = values[hi], True
        return result
    if hi == 0 or not check(0):
        return result
    lo = 0  # invariant: values[lo] meets the SLO, values[hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if check(mid):
            lo = mid
        else:
            hi = mid
    result.limit = values[lo]
    return result


@dataclass(frozen=True)
class Ranked:
    """A point's goodput as an estimate; None when it has none (missed the SLO everywhere, gate, crash)."""

    label: str
    goodput: Estimate | None


@dataclass(frozen=True)
class Verdict:
    winner: str | None  # None: no point has a goodput, or the best is not told apart from the current flags
    best: str | None  # the highest mean goodput, distinguishable or not
    indistinguishable: tuple[str, ...]  # the points whose goodput the best cannot be told from
    margin_pct: float | None  # the best's mean over the current flags' mean
    reason: str


def choose(points: Sequence[Ranked], current: str | None) -> Verdict:
    """The best goodput wins only where its interval clears the current flags' (else the current flags stay).
    Points whose intervals overlap the best's are named as not distinguishable from it."""
    scored = [p for p in points if p.goodput is not None]
    if not scored:
        return Verdict(None, None, (), None, "no point met the SLO")
    best = max(scored, key=lambda p: p.goodput.mean if p.goodput else 0.0)
    assert best.goodput is not None
    ties = tuple(p.label for p in scored if p is not best and p.goodput is not None
                 and p.goodput.overlaps(best.goodput))
    cur = next((p for p in points if p.label == current), None)
    margin = None
    if cur is not None and cur.goodput is not None and cur.goodput.mean:
        margin = 100.0 * (best.goodput.mean - cur.goodput.mean) / cur.goodput.mean
    if best.label == current:
        return Verdict(current, best.label, ties, 0.0, "the current flags are the best")
    if cur is not None and cur.goodput is not None and cur.goodput.overlaps(best.goodput):
        return Verdict(current, best.label, ties, margin,
                       f"{best.label} is not distinguishable from the current flags: keep them")
    if cur is not None and cur.goodput is None:
        return Verdict(best.label, best.label, ties, None,
                       "best goodput; the current flags met the SLO at no concurrency of the grid")
    return Verdict(best.label, best.label, ties, margin, "best goodput, beyond the noise of the current flags")


def goodput(result: SearchResult, confirm: Sequence[Measurement], *, noise_pct: float) -> Estimate | None:
    """The output rate at the SLO limit over the limit's probe runs and the confirmation runs; None when the limit
    is not met, or a confirmation run was a failed bench (its rate counts only the requests that survived)."""
    if result.limit is None:
        return None
    at = result.probe_at(result.limit)
    runs = [*(at.runs if at is not None else ()), *confirm]
    if any(r.failed for r in runs):
        return None
    return estimate([r.output_tok_s for r in runs], noise_pct=noise_pct) if runs else None
