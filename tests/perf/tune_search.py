"""How well `deploy tune`'s search finds the stand-in model's true answer, through noise, for how many runs.

Runs the tune's own search and winner rule (orchestrator/tune/search.py) against the stand-in's performance model
(simulator/sglang_standin/README.md, "The knee"): each bench run is the model's TTFT/TPOT/output rate at that
concurrency, times a seeded noise factor, as the stand-in server applies it per busy period. Prints, over 10
seeded runs:

- whether the search found the model's true best flag point and each point's SLO limit within one grid step;
- bench runs used (search, noise repeats, confirmations) against an exhaustive grid over the same points;
- the false-winner rate when two points are equal in the model (a flag the model ignores): a winner over the
  current flags declared where there is none.

Nothing is asserted: this is a measurement. `python tests/perf/tune_search.py [--noise 0.05] [--seeds 10]`.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator.bench.stats import estimate  # noqa: E402
from orchestrator.tune.search import Measurement, Ranked, bracket, choose, concurrency_grid, goodput, max_search_runs  # noqa: E402
from orchestrator.tune.slo import Slo, parse_slo  # noqa: E402
from tests.standin_model import perf_module  # noqa: E402

perf = perf_module()

IN_LEN, OUT_LEN = 128, 256
SLO_TEXT = "ttft_p99<=2s,tpot_p99<=80ms"
GRID = concurrency_grid(16, 1024, 16)  # 64 values: at most 8 search runs a point
CURRENT = {"max_running_requests": 128, "num_continuous_decode_steps": 1}
POINTS = [{"max_running_requests": m, "num_continuous_decode_steps": s} for m in (128, 256) for s in (1, 4, 16)]
CONFIRM = 2
NOISE_PCT = 5.0


@dataclass(frozen=True)
class Truth:
    limit: int | None
    goodput: float | None


def model_for(flags: dict[str, int]) -> Any:
    return perf.PerfModel.from_args({"tp_size": 8, **flags})


def truth(flags: dict[str, int], slo: Slo) -> Truth:
    """The highest grid concurrency whose noiseless model figures meet the SLO, and the output rate there."""
    m = model_for(flags)
    ok = [c for c in GRID if not slo.misses(figures(perf.latency(m, c, IN_LEN, OUT_LEN)))]
    limit = max(ok) if ok else None
    return Truth(limit, perf.latency(m, limit, IN_LEN, OUT_LEN).output_tok_s if limit else None)


def figures(lat: Any, factor: float = 1.0) -> dict[str, float | None]:
    return {"ttft_p99": lat.ttft_ms * factor, "tpot_p99": lat.tpot_ms * factor}


class NoisyModel:
    """A bench run: the model at concurrency c, every figure moved by one seeded N(1, sigma) draw (clipped)."""

    def __init__(self, flags: dict[str, int], sigma: float, seed: int) -> None:
        self.model = model_for(flags)
        self.sigma, self.seed, self.period, self.runs = sigma, seed, 0, 0

    def __call__(self, c: int) -> Measurement:
        self.period += 1
        self.runs += 1
        f = perf.noise_factor(self.seed, self.sigma, self.period)
        lat = perf.latency(self.model, c, IN_LEN, OUT_LEN)
        return Measurement(c, figures(lat, f), lat.output_tok_s / f)


def tune(points: list[tuple[str, dict[str, int]]], slo: Slo, sigma: float, seed: int) -> tuple[Any, dict[str, Any]]:
    """The tune's search, confirmation and winner rule over `points` (the first is the current flags)."""
    ranked, found, runs = [], {}, 0
    for i, (label, flags) in enumerate(points):
        measure = NoisyModel(flags, sigma, seed * 1000 + i)
        res = bracket(GRID, slo, measure, noise_pct=NOISE_PCT)
        confirm = [measure(res.limit) for _ in range(CONFIRM)] if res.limit is not None else []
        ranked.append(Ranked(label, goodput(res, confirm, noise_pct=NOISE_PCT)))
        found[label] = res
        runs += measure.runs
    return choose(ranked, points[0][0]), {"found": found, "runs": runs}


def label_of(flags: dict[str, int]) -> str:
    return f"mrr={flags['max_running_requests']},steps={flags['num_continuous_decode_steps']}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--noise", type=float, default=0.05, help="sigma of the per-run noise factor")
    ap.add_argument("--seeds", type=int, default=10)
    args = ap.parse_args()
    slo = parse_slo(SLO_TEXT)
    step = GRID[1] - GRID[0]
    points = [("current", CURRENT)] + [(label_of(p), p) for p in POINTS]
    truths = {label: truth(flags, slo) for label, flags in points}
    top = max(t.goodput or 0.0 for t in truths.values())
    best_true = {lbl for lbl, t in truths.items() if t.goodput and t.goodput >= top * 0.995}  # ties in the model
    print(f"model: TP8, {IN_LEN}/{OUT_LEN} tokens, SLO {SLO_TEXT}, concurrency {GRID[0]}..{GRID[-1]} step {step} "
          f"({len(GRID)} values, at most {max_search_runs(len(GRID))} search runs a point), noise sigma "
          f"{args.noise:.0%}, {CONFIRM} confirmation runs, noise band {NOISE_PCT:g} %")
    print(f"{'point':<22} {'true limit':>10} {'true goodput tok/s':>19}")
    for label, _ in points:
        t = truths[label]
        print(f"{label:<22} {t.limit if t.limit else '-':>10} {t.goodput or 0:>19.0f}")
    print(f"true best: {', '.join(sorted(best_true))}")

    best_ok = limit_ok = 0
    runs_used: list[int] = []
    most_probes = 0
    for seed in range(args.seeds):
        verdict, info = tune(points, slo, args.noise, seed)
        found = info["found"]
        limits_within = all((truths[lbl].limit is None and r.limit is None)
                            or (truths[lbl].limit is not None and r.limit is not None
                                and abs(r.limit - truths[lbl].limit) <= step)
                            for lbl, r in found.items())
        best_ok += verdict.best in best_true
        limit_ok += limits_within
        runs_used.append(info["runs"])
        most_probes = max(most_probes, *(r.search_runs for r in found.values()))
        print(f"seed {seed}: best {verdict.best} (winner {verdict.winner}, {verdict.margin_pct or 0:+.1f} % over "
              f"current), limits within one step: {limits_within}, bench runs {info['runs']}")
    grid_runs = len(points) * len(GRID)
    print(f"found the true best point: {best_ok} of {args.seeds}; every SLO limit within one grid step: "
          f"{limit_ok} of {args.seeds}")
    print(f"search probes per point: at most {most_probes} (bound ceil(log2({len(GRID)})) + 2 = "
          f"{max_search_runs(len(GRID))}); noise repeats and confirmations come on top")
    mean_runs = sum(runs_used) / len(runs_used)
    print(f"bench runs per tune: {mean_runs:.1f} (min {min(runs_used)}, max {max(runs_used)}) for {len(points)} "
          f"points, against {grid_runs} for an exhaustive grid run once ({grid_runs * (1 + CONFIRM)} with the same "
          f"{CONFIRM} repeats): {100 * mean_runs / grid_runs:.1f} % of the grid")

    # Two points equal in the model: the current flags and a point that differs only in a flag the model ignores.
    false_wins = 0
    same = dict(CURRENT)
    for seed in range(args.seeds):
        verdict, _ = tune([("current", CURRENT), ("same-in-model", same)], slo, args.noise, 100 + seed)
        false_wins += verdict.winner not in ("current", None)
        print(f"equal points, seed {seed}: winner {verdict.winner}, best {verdict.best}, "
              f"indistinguishable {list(verdict.indistinguishable)}")
    print(f"false winner when two points are equal in the model: {false_wins} of {args.seeds}")
    e = estimate([float(r) for r in runs_used])
    print(f"(bench runs per tune, 95 % CI: {e.text()})")
    assert math.isfinite(mean_runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
