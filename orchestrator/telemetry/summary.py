"""Per-GPU power, utilisation, clocks and PCIe figures over a bench window, and energy per token.

Inputs are `Sample`s from `--query-gpu` (250 ms loop), dmon (1 s) or both. The sources name fields differently
and sample at different rates, so for every GPU and every metric the summary picks ONE source -- the one with the
most readings of that metric -- rather than mixing a 250 ms series with a 1 s one (which would bias means toward
the denser source and make the energy integral jagged). In practice power, utilisation, clocks and temperature come
from the query loop and PCIe rx/tx from dmon's `t` columns.

Energy is the trapezoid integral of power over the sample timestamps inside the window. Where samples have no
timestamps, or fewer than two per GPU, it falls back to mean power x window duration, and says so
(`energy_method`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.parsers.gpu_query import Sample, Source
from orchestrator.telemetry.energy import ValidatedEnergy, validated_energy

# Canonical metric -> (field name, scale to canonical unit) per source. NVML-based samplers write `nvml.*` fields
# in NVML's own units (PCIe throughput in KB/s), converted here.
_ALIASES: dict[str, tuple[tuple[str, float], ...]] = {
    "power_w": (("power.draw", 1.0), ("power.draw.average", 1.0), ("power.draw.instant", 1.0), ("pwr", 1.0),
                ("nvml.power_mw", 0.001)),
    "power_limit_w": (("enforced.power.limit", 1.0), ("power.limit", 1.0), ("nvml.power_limit_mw", 0.001)),
    "sm_util_pct": (("utilization.gpu", 1.0), ("sm", 1.0), ("nvml.util_gpu", 1.0)),
    "mem_util_pct": (("utilization.memory", 1.0), ("mem", 1.0), ("nvml.util_memory", 1.0)),
    "sm_clock_mhz": (("clocks.sm", 1.0), ("clocks.current.sm", 1.0), ("pclk", 1.0), ("nvml.clock_sm", 1.0)),
    "max_sm_clock_mhz": (("clocks.max.sm", 1.0), ("clocks.max.graphics", 1.0)),
    "temp_c": (("temperature.gpu", 1.0), ("gtemp", 1.0), ("nvml.temp_gpu", 1.0)),
    "pcie_rx_mbps": (("rxpci", 1.0), ("nvml.pcie_rx_kbps", 1.0 / 1000.0)),
    "pcie_tx_mbps": (("txpci", 1.0), ("nvml.pcie_tx_kbps", 1.0 / 1000.0)),
    "power_violation_pct": (("pviol", 1.0),),
}


def metric(sample: Sample, name: str) -> float | None:
    """A canonical metric (`power_w`, `sm_util_pct`, `pcie_rx_mbps`, ...) from a sample of any source."""
    for field_name, scale in _ALIASES[name]:
        v = sample.number(field_name)
        if v is not None:
            return v * scale
    return None


class GpuTelemetry(BaseModel):
    """One GPU over the window. None where no source had the metric (e.g. PCIe without dmon `t`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: int
    samples: int
    mean_power_w: float | None
    p95_power_w: float | None
    power_limit_w: float | None
    power_pct_of_limit: float | None
    mean_sm_util_pct: float | None
    mean_mem_util_pct: float | None
    mean_sm_clock_mhz: float | None
    max_sm_clock_mhz: float | None
    mean_pcie_rx_mbps: float | None
    mean_pcie_tx_mbps: float | None
    max_temp_c: float | None
    mean_power_violation_pct: float | None
    energy_j: float | None


class TelemetrySummary(BaseModel):
    """All GPUs over one bench window plus energy-per-token figures."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_start: datetime | None
    window_end: datetime | None
    duration_s: float | None
    sources: tuple[Source, ...]
    gpus: tuple[GpuTelemetry, ...]
    total_mean_power_w: float | None
    total_energy_j: float | None
    energy_method: Literal["trapezoid", "mean_power_x_duration", "mixed", "none"]
    output_tokens: int | None
    j_per_output_token: float | None
    output_tokens_per_j: float | None
    tokens_per_s_per_w: float | None
    sampling_overhead_pct: float | None = None
    #: The window's energy with its coverage and gap checks (telemetry/energy.py); None: no window, or a summary
    #: written before it existed.
    energy: ValidatedEnergy | None = None

    @property
    def j_per_total_token(self) -> float | None:
        return self.energy.j_per_total_token if self.energy else None

    @property
    def output_tok_s_per_gpu(self) -> float | None:
        return self.energy.output_tok_s_per_gpu if self.energy else None

    @property
    def output_tok_s_per_user(self) -> float | None:
        return self.energy.output_tok_s_per_user if self.energy else None

    def gpu(self, index: int) -> GpuTelemetry | None:
        return next((g for g in self.gpus if g.gpu == index), None)

    @property
    def mean_power_pct_of_limit(self) -> float | None:
        vals = [g.power_pct_of_limit for g in self.gpus if g.power_pct_of_limit is not None]
        return sum(vals) / len(vals) if vals else None

    @property
    def mean_sm_util_pct(self) -> float | None:
        vals = [g.mean_sm_util_pct for g in self.gpus if g.mean_sm_util_pct is not None]
        return sum(vals) / len(vals) if vals else None


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (numpy's default method) without numpy."""
    if not values:
        raise ValueError("percentile of no values")
    s = sorted(values)
    k = (len(s) - 1) * pct / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _series(samples: Sequence[Sample], name: str) -> list[tuple[Sample, float]]:
    """The metric's readings from the single best source (most readings; query wins ties)."""
    by_source: dict[str, list[tuple[Sample, float]]] = {}
    for s in samples:
        v = metric(s, name)
        if v is not None:
            by_source.setdefault(s.source, []).append((s, v))
    if not by_source:
        return []
    best = max(by_source, key=lambda src: (len(by_source[src]), src == "query"))
    return by_source[best]


def trapezoid_energy_j(points: Sequence[tuple[datetime, float]]) -> float | None:
    """Integral of power (W) over time (s) by the trapezoid rule; None with fewer than two distinct instants."""
    pts = sorted(points)
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    total = 0.0
    for (t0, p0), (t1, p1) in itertools.pairwise(pts):
        total += (t1 - t0).total_seconds() * (p0 + p1) / 2.0
    return total


def summarize(
    samples: Iterable[Sample],
    *,
    window: tuple[datetime, datetime] | None = None,
    duration_s: float | None = None,
    output_tokens: int | None = None,
    output_throughput: float | None = None,
    static: Iterable[Sample] = (),
    sampling_overhead_pct: float | None = None,
    input_tokens: int | None = None,
    mean_tpot_ms: float | None = None,
) -> TelemetrySummary:
    """Summarise samples over the bench window.

    - `window`: (start, end) in the same clock as the sample timestamps (the host's local time, as the sampler
      script prints it). Samples with a timestamp outside it are dropped; samples without one are kept (dmon
      without `-o T` cannot be placed, the caller ran it only during the bench).
    - `duration_s`: the window length when `window` is None (e.g. the bench's own duration), used by the
      mean-power fallback for energy.
    - `output_tokens` / `output_throughput`: from the BenchResult, for J/token and tokens/s per W.
    - `static`: a one-shot `--query-gpu` of limits and max clocks (STATIC_FIELDS), for what the loop lacks.
    - `sampling_overhead_pct`: measured by the caller (the samplers' CPU time as % of one core over the
      window, or a bench with vs without samplers); carried as is.
    - `input_tokens` / `mean_tpot_ms`: for the validated energy's J per total token and tokens/s per user.
    """
    start: datetime | None = None
    end: datetime | None = None
    duration = duration_s
    if window is not None:
        start, end = window
        if end < start:
            raise ValueError("window end is before its start")
        duration = (end - start).total_seconds()

    def inside(s: Sample) -> bool:
        return start is None or end is None or s.ts is None or start <= s.ts <= end

    kept = [s for s in samples if inside(s)]
    static_by_gpu: dict[int, list[Sample]] = {}
    for s in static:
        static_by_gpu.setdefault(s.gpu, []).append(s)
    by_gpu: dict[int, list[Sample]] = {}
    for s in kept:
        by_gpu.setdefault(s.gpu, []).append(s)

    gpus: list[GpuTelemetry] = []
    methods: set[str] = set()
    timed_power: dict[int, list[tuple[datetime, float]]] = {}
    for gpu in sorted(by_gpu):
        ss = by_gpu[gpu]
        power = _series(ss, "power_w")
        timed_power[gpu] = [(s.ts, v) for s, v in power if s.ts is not None]
        pvals = [v for _, v in power]
        mean_p = _mean(pvals)
        limit_vals = [v for _, v in _series(ss, "power_limit_w")] or \
                     [v for _, v in _series(static_by_gpu.get(gpu, []), "power_limit_w")]
        limit = max(limit_vals) if limit_vals else None
        max_clock_vals = [v for _, v in _series(ss + static_by_gpu.get(gpu, []), "max_sm_clock_mhz")]
        temps = [v for _, v in _series(ss, "temp_c")]
        energy: float | None = None
        timed = [(s.ts, v) for s, v in power if s.ts is not None]
        if len(timed) >= 2:
            energy = trapezoid_energy_j(timed)
            if energy is not None:
                methods.add("trapezoid")
        if energy is None and mean_p is not None and duration is not None:
            energy = mean_p * duration
            methods.add("mean_power_x_duration")
        gpus.append(GpuTelemetry(
            gpu=gpu,
            samples=len(ss),
            mean_power_w=mean_p,
            p95_power_w=percentile(pvals, 95) if pvals else None,
            power_limit_w=limit,
            power_pct_of_limit=(100.0 * mean_p / limit) if (mean_p is not None and limit) else None,
            mean_sm_util_pct=_mean([v for _, v in _series(ss, "sm_util_pct")]),
            mean_mem_util_pct=_mean([v for _, v in _series(ss, "mem_util_pct")]),
            mean_sm_clock_mhz=_mean([v for _, v in _series(ss, "sm_clock_mhz")]),
            max_sm_clock_mhz=max(max_clock_vals) if max_clock_vals else None,
            mean_pcie_rx_mbps=_mean([v for _, v in _series(ss, "pcie_rx_mbps")]),
            mean_pcie_tx_mbps=_mean([v for _, v in _series(ss, "pcie_tx_mbps")]),
            max_temp_c=max(temps) if temps else None,
            mean_power_violation_pct=_mean([v for _, v in _series(ss, "power_violation_pct")]),
            energy_j=energy,
        ))

    powers = [g.mean_power_w for g in gpus if g.mean_power_w is not None]
    total_power = sum(powers) if powers else None
    energies = [g.energy_j for g in gpus if g.energy_j is not None]
    total_energy = sum(energies) if energies and len(energies) == len(powers) else None
    method: Literal["trapezoid", "mean_power_x_duration", "mixed", "none"]
    if total_energy is None:
        method = "none"
    elif len(methods) > 1:
        method = "mixed"
    else:
        method = "trapezoid" if "trapezoid" in methods else "mean_power_x_duration"
    j_per_tok = total_energy / output_tokens if (total_energy is not None and output_tokens) else None
    tok_per_j = output_tokens / total_energy if (total_energy and output_tokens is not None) else None
    tps_per_w = output_throughput / total_power if (output_throughput is not None and total_power) else None
    energy_check = None
    if start is not None and end is not None and end > start and timed_power:
        energy_check = validated_energy(timed_power, start, end, expected_gpus=sorted(static_by_gpu),
                                        output_tokens=output_tokens, input_tokens=input_tokens,
                                        output_throughput=output_throughput, mean_tpot_ms=mean_tpot_ms)
    return TelemetrySummary(
        window_start=start,
        window_end=end,
        duration_s=duration,
        sources=tuple(sorted({s.source for s in kept})),
        gpus=tuple(gpus),
        total_mean_power_w=total_power,
        total_energy_j=total_energy,
        energy_method=method,
        output_tokens=output_tokens,
        j_per_output_token=j_per_tok,
        output_tokens_per_j=tok_per_j,
        tokens_per_s_per_w=tps_per_w,
        sampling_overhead_pct=sampling_overhead_pct,
        energy=energy_check,
    )

