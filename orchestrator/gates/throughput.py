"""Throughput gate: a new bench run against a baseline, with a noise band.

Rules, in order:
1. failed requests (or no completions) -> `fail`; `accept_regression` does NOT override this: a flag set that
   drops requests is broken, not slower.
2. below the profile's absolute floor (`min_output_throughput`) -> `regressed`.
3. any gated metric worse than the baseline by more than `noise_pct` -> `regressed`. By default only output
   throughput is gated (the seeds' +28 % change raised TTFT, as `--num-continuous-decode-steps` documents);
   TPOT and TTFT deltas are always reported, and gated when the profile's `gate_metrics` (or `roll --gate`)
   names them.
4. output throughput better by more than `noise_pct` and nothing regressed -> `improved`; else `pass`.
`accept_regression=True` lets a `regressed` verdict pass (the operator accepts the trade, e.g. lower TTFT for
lower throughput); the verdict stays `regressed` and `accepted` records the override.

Compared metrics: output throughput (higher is better), mean TPOT and mean TTFT (lower is better).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.parsers.bench import BenchResult

DEFAULT_NOISE_PCT = 5.0
DEFAULT_GATED: tuple[str, ...] = ("output_throughput",)

Verdict = Literal["pass", "improved", "regressed", "fail"]

# (BenchResult field, label, True when higher is better)
GATED_METRICS: tuple[tuple[str, str, bool], ...] = (
    ("output_throughput", "output throughput (tok/s)", True),
    ("mean_tpot_ms", "mean TPOT (ms)", False),
    ("mean_ttft_ms", "mean TTFT (ms)", False),
)


class MetricDelta(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str
    label: str
    baseline: float | None
    new: float | None
    delta_pct: float | None  # (new - baseline) / baseline * 100
    higher_is_better: bool
    status: Literal["pass", "improved", "regressed", "n/a"]


class GateResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    verdict: Verdict
    passed: bool
    accepted: bool
    noise_pct: float
    deltas: tuple[MetricDelta, ...]
    reasons: tuple[str, ...]


def delta_pct(baseline: float | None, new: float | None) -> float | None:
    """Percent change from baseline; None when either side is missing or the baseline is zero."""
    if baseline is None or new is None or baseline == 0:
        return None
    return (new - baseline) / abs(baseline) * 100.0


def _metric_delta(field: str, label: str, higher: bool, base: BenchResult | None, new: BenchResult,
                  noise_pct: float) -> MetricDelta:
    b = getattr(base, field) if base is not None else None
    n = getattr(new, field)
    d = delta_pct(b, n)
    status: Literal["pass", "improved", "regressed", "n/a"]
    if d is None:
        status = "n/a"
    else:
        gain = d if higher else -d
        status = "improved" if gain > noise_pct else "regressed" if gain < -noise_pct else "pass"
    return MetricDelta(metric=field, label=label, baseline=b, new=n, delta_pct=d, higher_is_better=higher,
                       status=status)


def gate(
    new: BenchResult,
    baseline: BenchResult | None,
    *,
    noise_pct: float = DEFAULT_NOISE_PCT,
    accept_regression: bool = False,
    min_output_throughput: float | None = None,
    gated: tuple[str, ...] | list[str] = DEFAULT_GATED,
) -> GateResult:
    """Decide whether `new` may replace `baseline` (None: first run, only failures and the floor count)."""
    if noise_pct < 0:
        raise ValueError("noise_pct must be >= 0")
    deltas = tuple(_metric_delta(f, label, hi, baseline, new, noise_pct) for f, label, hi in GATED_METRICS)
    reasons: list[str] = []
    verdict: Verdict = "pass"
    if new.failed or new.completed == 0:
        verdict = "fail"
        reasons.append(f"{new.failed or 0} requests failed, {new.completed} completed")
    else:
        if min_output_throughput is not None and new.output_throughput < min_output_throughput:
            verdict = "regressed"
            reasons.append(f"output throughput {new.output_throughput:.1f} tok/s is below the profile's "
                           f"floor {min_output_throughput:.1f}")
        for d in deltas:
            if d.status == "regressed" and d.metric in gated:
                verdict = "regressed"
                reasons.append(f"{d.label} {d.new:.2f} vs baseline {d.baseline:.2f} ({d.delta_pct:+.1f} %, "
                               f"noise ±{noise_pct:g} %)")
        if verdict == "pass" and deltas[0].status == "improved":
            verdict = "improved"
            reasons.append(f"{deltas[0].label} {deltas[0].delta_pct:+.1f} % vs baseline")
        if baseline is None:
            reasons.append("no baseline: only failures and the absolute floor were checked")
    accepted = verdict == "regressed" and accept_regression
    if accepted:
        reasons.append("regression accepted by the operator (accept_regression)")
    passed = verdict in ("pass", "improved") or accepted
    return GateResult(verdict=verdict, passed=passed, accepted=accepted, noise_pct=noise_pct, deltas=deltas,
                      reasons=tuple(reasons))
