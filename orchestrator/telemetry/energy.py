"""Energy over the measured window, validated: per-GPU power integrated with coverage and gap checks (pure).

What the peers report (InferenceX integrates per-GPU power over the benchmark window with coverage checks and gives
J per output and per total token; AIPerf gives tokens per joule) is a figure only when the samples cover the
window. Here each GPU's power series is integrated by the trapezoid rule over the window, its edges held at the
nearest reading, and judged:

| check     | rule                                                                                             |
|-----------|--------------------------------------------------------------------------------------------------|
| coverage  | the sampled span (first to last reading inside the window) is >= MIN_COVERAGE of the window      |
| gap       | no two consecutive readings are more than MAX_GAP_S apart (the sampler polls every 250 ms)        |
| edges     | the first reading is within EDGE_S of the window's start, the last within EDGE_S of its end      |
| all GPUs  | every GPU expected has a series                                                                  |

A window that fails any check is kept but marked invalid (`valid: false`, with each problem named), and its
per-token figures are still computed: a consumer decides, the record says which.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict

MIN_COVERAGE = 0.95
MAX_GAP_S = 1.0
EDGE_S = 1.0


class GpuEnergy(BaseModel):
    """One GPU's energy over the window and how well its readings covered it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    gpu: int
    energy_j: float
    readings: int
    coverage: float
    max_gap_s: float
    problems: tuple[str, ...] = ()


class ValidatedEnergy(BaseModel):
    """All GPUs over one window, the per-token figures, and whether the integral can be trusted."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    window_s: float
    gpus: tuple[GpuEnergy, ...]
    total_energy_j: float
    valid: bool
    problems: tuple[str, ...]
    j_per_output_token: float | None
    j_per_total_token: float | None
    output_tok_s_per_gpu: float | None
    output_tok_s_per_user: float | None


def integrate(points: Sequence[tuple[datetime, float]], start: datetime, end: datetime) -> float:
    """Power (W) over [start, end] in J: trapezoids between readings, the edges held at the nearest reading."""
    pts = sorted((t, p) for t, p in points if start <= t <= end)
    if not pts:
        return 0.0
    total = (pts[0][0] - start).total_seconds() * pts[0][1] + (end - pts[-1][0]).total_seconds() * pts[-1][1]
    for (t0, p0), (t1, p1) in itertools.pairwise(pts):
        total += (t1 - t0).total_seconds() * (p0 + p1) / 2.0
    return total


def gpu_energy(gpu: int, points: Sequence[tuple[datetime, float]], start: datetime, end: datetime) -> GpuEnergy:
    window = (end - start).total_seconds()
    pts = sorted(t for t, _ in points if start <= t <= end)
    problems: list[str] = []
    if not pts:
        return GpuEnergy(gpu=gpu, energy_j=0.0, readings=0, coverage=0.0, max_gap_s=window,
                         problems=(f"GPU {gpu}: no power reading inside the window",))
    span = (pts[-1] - pts[0]).total_seconds()
    coverage = span / window if window > 0 else 0.0
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(pts)]
    max_gap = max([*gaps, (pts[0] - start).total_seconds(), (end - pts[-1]).total_seconds()])
    if coverage < MIN_COVERAGE:
        problems.append(f"GPU {gpu}: readings cover {100 * coverage:.0f} % of the window "
                        f"(< {100 * MIN_COVERAGE:.0f} %)")
    if gaps and max(gaps) > MAX_GAP_S:
        problems.append(f"GPU {gpu}: a {max(gaps):.1f} s gap between two power readings (> {MAX_GAP_S:g} s)")
    lead, tail = (pts[0] - start).total_seconds(), (end - pts[-1]).total_seconds()
    if lead > EDGE_S or tail > EDGE_S:
        problems.append(f"GPU {gpu}: first reading {lead:.1f} s after the start, last {tail:.1f} s before the end "
                        f"(> {EDGE_S:g} s)")
    return GpuEnergy(gpu=gpu, energy_j=integrate(points, start, end), readings=len(pts), coverage=round(coverage, 4),
                     max_gap_s=round(max_gap, 3), problems=tuple(problems))


def validated_energy(power: Mapping[int, Sequence[tuple[datetime, float]]], start: datetime, end: datetime, *,
                     expected_gpus: Sequence[int] = (), output_tokens: int | None = None,
                     input_tokens: int | None = None, output_throughput: float | None = None,
                     mean_tpot_ms: float | None = None) -> ValidatedEnergy:
    """The window's energy per GPU and in total, its checks, J per output and per total token, and output
    throughput per GPU and per user (1000 / mean TPOT: the tokens one stream sees a second)."""
    if end <= start:
        raise ValueError("the window ends before it starts")
    gpus = [gpu_energy(g, power.get(g, ()), start, end) for g in sorted(set(power) | set(expected_gpus))]
    problems = [p for g in gpus for p in g.problems]
    total = sum(g.energy_j for g in gpus)
    total_tokens = (output_tokens or 0) + (input_tokens or 0) if output_tokens is not None else None
    return ValidatedEnergy(
        window_s=(end - start).total_seconds(), gpus=tuple(gpus), total_energy_j=total,
        valid=not problems and bool(gpus), problems=tuple(problems) if gpus else ("no GPU power readings",),
        j_per_output_token=total / output_tokens if output_tokens else None,
        j_per_total_token=total / total_tokens if total_tokens else None,
        output_tok_s_per_gpu=output_throughput / len(gpus) if (output_throughput is not None and gpus) else None,
        output_tok_s_per_user=1000.0 / mean_tpot_ms if mean_tpot_ms else None)
