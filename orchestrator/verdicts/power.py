"""Why a benchmark got the throughput it got: diagnosis lines from bench numbers and GPU telemetry.

Every line names its cause and carries the numbers it was decided on (`figures`), so an operator can check the
reasoning instead of trusting it. Thresholds, all in one place (docs/bench-diagnosis.md explains each):

| constant                      | value | rule                                                                     |
|-------------------------------|-------|--------------------------------------------------------------------------|
| LOW_POWER_PCT                 | 50    | mean power below this % of the limit counts as "low power"               |
| HIGH_SM_UTIL_PCT              | 80    | SM utilisation at/above this counts as "busy"                            |
| LOW_SM_UTIL_PCT               | 50    | SM utilisation below this counts as "mostly idle"                        |
| NEAR_LIMIT_POWER_PCT          | 90    | mean power at/above this % of the limit counts as "at the power limit"   |
| LOW_CLOCK_PCT                 | 85    | mean SM clock below this % of max SM clock counts as "clocks held down"  |
| HOT_TEMP_C                    | 85    | max GPU temperature at/above this counts as "hot"                        |
| CONCURRENCY_SHORTFALL_RATIO   | 0.8   | peak concurrency below this fraction of the offered load is a shortfall  |
| MRR_CAP_RATIO                 | 0.95  | peak concurrency within this fraction of max-running-requests = capped   |
| PCIE_NEAR_ZERO_MBPS           | 100   | rx+tx per GPU below this (MB/s) under TP>1 over PCIe counts as "no P2P"  |
| BURST_ARRIVAL_FRACTION        | 0.1   | arrivals (num_prompts / rate) within this share of the run = a burst     |

`utilization.gpu` / dmon `sm` is the share of time ANY kernel ran, not how much of the chip it used: high
utilisation at low power is exactly the signature of kernels that run all the time without saturating the GPU.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.parsers.bench import BenchResult
from orchestrator.parsers.boot import BootStart
from orchestrator.telemetry.summary import TelemetrySummary

LOW_POWER_PCT = 50.0
HIGH_SM_UTIL_PCT = 80.0
LOW_SM_UTIL_PCT = 50.0
NEAR_LIMIT_POWER_PCT = 90.0
LOW_CLOCK_PCT = 85.0
HOT_TEMP_C = 85.0
CONCURRENCY_SHORTFALL_RATIO = 0.8
MRR_CAP_RATIO = 0.95
PCIE_NEAR_ZERO_MBPS = 100.0
BURST_ARRIVAL_FRACTION = 0.1

Severity = Literal["info", "warn", "fail"]
Figure = float | int | str | None


class Diagnosis(BaseModel):
    """One finding: a stable code for machines, a sentence for people, and the numbers behind it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str
    severity: Severity
    message: str
    figures: dict[str, Figure]


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)


def offered_concurrency(bench: BenchResult) -> int | None:
    """Requests the client could have had in flight: the --max-concurrency cap, else every prompt (a burst)."""
    if bench.max_concurrency is not None:
        return min(bench.max_concurrency, bench.num_prompts) if bench.num_prompts else bench.max_concurrency
    return bench.num_prompts


def held_concurrency(bench: BenchResult) -> tuple[int | None, str]:
    """Requests the server really held in flight, and how it was measured: the bench's mean concurrency (the sum of
    request latencies over the run's duration, `concurrency` in its JSONL), else the same from its mean latency.

    Never bench_serving's "Peak concurrent requests" (`max_concurrent_requests`): it counts the requests that overlap
    each 1 s bucket, so with short requests it exceeds the offered load (142 at --max-concurrency 32 on a real H100)
    and would hide a real shortfall. Only when nothing else is known, that peak capped at the offered load."""
    if bench.concurrency is not None:
        return round(bench.concurrency), "mean"
    if bench.mean_e2e_latency_ms is not None and bench.duration_s and bench.completed:
        return round(bench.completed * bench.mean_e2e_latency_ms / 1000.0 / bench.duration_s), "mean"
    offered = offered_concurrency(bench)
    if bench.max_concurrent_requests is not None:
        peak = bench.max_concurrent_requests
        return (min(peak, offered) if offered else peak), "peak"
    return None, "peak"


def diagnose(
    bench: BenchResult | None,
    telemetry: TelemetrySummary | None,
    *,
    tp_size: int | None = None,
    nvlink: bool = False,
    max_running_requests: int | None = None,
    boot: BootStart | None = None,
    moe_runner_backend: str | None = None,
    sglang_version: str | None = None,
) -> list[Diagnosis]:
    """All findings for one run, most severe first.

    `tp_size` and `nvlink` (from the profile and topology) decide whether near-zero PCIe traffic is a problem:
    with NVLink the TP all-reduce does not cross PCIe at all. `max_running_requests` (the server flag) tells a
    server-side cap from a client that did not offer enough load. `boot` (the server's last start, from the boot
    ledger), `moe_runner_backend` and `sglang_version` name the concrete lever when kernels do not saturate the GPUs.
    """
    out: list[Diagnosis] = []
    if bench is not None:
        out += _bench_findings(bench, max_running_requests)
    if telemetry is not None and telemetry.gpus:
        out += _power_findings(telemetry, autotune_lever(boot, moe_runner_backend, sglang_version))
        out += _pcie_findings(telemetry, tp_size, nvlink)
    order = {"fail": 0, "warn": 1, "info": 2}
    return sorted(out, key=lambda d: order[d.severity])


def _bench_findings(bench: BenchResult, mrr: int | None) -> list[Diagnosis]:
    out: list[Diagnosis] = []
    if bench.failed:
        total = bench.num_prompts or (bench.completed + bench.failed)
        out.append(Diagnosis(
            code="failed-requests", severity="fail",
            message=f"{bench.failed} of {total} requests failed: throughput figures cover only the "
                    f"{bench.completed} that completed; read the server log for the errors",
            figures={"failed": bench.failed, "completed": bench.completed, "num_prompts": bench.num_prompts}))
    if bench.completed == 0:
        out.append(Diagnosis(code="no-completions", severity="fail",
                             message="no request completed: the server did not answer the benchmark",
                             figures={"completed": 0}))
    offered = offered_concurrency(bench)
    reached, measure = held_concurrency(bench)
    if offered and reached is not None and reached < CONCURRENCY_SHORTFALL_RATIO * offered:
        arrival_s = (bench.num_prompts / bench.request_rate
                     if bench.num_prompts and bench.request_rate and math.isfinite(bench.request_rate) else None)
        figures: dict[str, Figure] = {"reached": reached, "measure": measure, "offered": offered,
                                      "peak_1s_buckets": bench.max_concurrent_requests,
                                      "request_rate": bench.request_rate, "arrival_s": _r(arrival_s),
                                      "duration_s": bench.duration_s, "max_running_requests": mrr,
                                      "threshold_ratio": CONCURRENCY_SHORTFALL_RATIO}
        if mrr is not None and reached >= MRR_CAP_RATIO * mrr:
            why = f"capped by --max-running-requests {mrr}"
        elif arrival_s is not None and bench.duration_s and arrival_s >= BURST_ARRIVAL_FRACTION * bench.duration_s:
            why = (f"at {bench.request_rate:g} req/s arrivals spread over {arrival_s:.0f} s of the "
                   f"{bench.duration_s:.0f} s run and the server finished requests faster than they arrived "
                   "(raise --request-rate or set --max-concurrency)")
        else:
            why = ("the server finished requests faster than they arrived, or a server cap "
                   "(max-running-requests, KV cache size) held it down")
        out.append(Diagnosis(
            code="concurrency-shortfall", severity="warn",
            message=f"concurrency reached {reached} of {offered} ({measure}): {why}",
            figures=figures))
    return out


#: The lever when kernels do not saturate the GPUs and nothing more concrete is known.
GENERIC_LEVER = "MoE kernel tuning / autotune is the lever"


#: The first sglang release that autotunes flashinfer_cutlass upstream (0.5.13's `moe_needs_autotune`; read in the
#: released wheels, tests/fixtures/sglang/wheels/); 0.5.12.post1 leaves it out unless a stack patch puts it in.
UPSTREAM_CUTLASS_AUTOTUNE = (0, 5, 13)


def _release(version: str) -> tuple[int, ...] | None:
    """`0.5.12.post1` → (0, 5, 12); None when it is not a release number."""
    head = version.split("+", 1)[0].split(".")[:3]
    return tuple(int(p) for p in head) if len(head) == 3 and all(p.isdigit() for p in head) else None


def autotune_lever(boot: BootStart | None, moe_runner_backend: str | None, sglang_version: str | None = None) -> str:
    """The concrete lever: the boot ledger shows the server's last start had no FlashInfer autotune phase while its
    MoE runner is flashinfer_cutlass; what to do depends on the release (≥ 0.5.13 autotunes it upstream, 0.5.12.post1
    needs the example stack patch); a start that ran on sglang's default MoE kernel config (no tuned file for this GPU
    and Triton) names that file; else the generic lever."""
    if boot is not None and boot.moe_config_missing:
        return (f"the server ran its fused MoE kernel on the default config (\"Using default MoE kernel config. "
                f"Performance might be sub-optimal! Config file not found at {boot.moe_config_missing[0]}\"): a "
                "config tuned for this GPU and Triton version (sglang's benchmark/kernels/fused_moe_triton) is the "
                "lever")
    if not (boot is not None and boot.complete and boot.phase("autotune") is None
            and (moe_runner_backend or "").replace("-", "_") == "flashinfer_cutlass"):
        return GENERIC_LEVER
    release = _release(sglang_version) if sglang_version else None
    head = "FlashInfer autotune did not run for flashinfer_cutlass at the last start"
    if release is not None and release >= UPSTREAM_CUTLASS_AUTOTUNE:
        return (f"{head} (sglang {sglang_version} autotunes it upstream, without a patch: is "
                "--disable-flashinfer-autotune set? read the start log) — that autotune is the lever")
    return (f"{head} (sglang before 0.5.13 excludes it, a stack patch enables it on 0.5.12.post1; ≥ 0.5.13 autotunes "
            "it upstream without a patch; docs/stacks.md) — that autotune is the lever")


def _power_findings(t: TelemetrySummary, lever: str = GENERIC_LEVER) -> list[Diagnosis]:
    out: list[Diagnosis] = []
    pct = t.mean_power_pct_of_limit
    util = t.mean_sm_util_pct
    limits = [g.power_limit_w for g in t.gpus if g.power_limit_w]
    limit = max(limits) if limits else None
    mean_w = (t.total_mean_power_w / len(t.gpus)) if t.total_mean_power_w is not None else None
    base: dict[str, Figure] = {"mean_power_w_per_gpu": _r(mean_w), "power_limit_w": _r(limit),
                               "power_pct_of_limit": _r(pct), "mean_sm_util_pct": _r(util), "gpus": len(t.gpus)}
    if pct is not None and util is not None:
        if pct < LOW_POWER_PCT and util >= HIGH_SM_UTIL_PCT:
            out.append(Diagnosis(
                code="kernels-not-saturating", severity="warn",
                message=f"decode ran at {pct:.0f} % of the power limit ({mean_w:.0f} of {limit:.0f} W per GPU) "
                        f"with SM utilisation {util:.0f} %: kernels are not saturating the GPUs — "
                        f"{lever}",
                figures={**base, "low_power_pct": LOW_POWER_PCT, "high_sm_util_pct": HIGH_SM_UTIL_PCT}))
        elif pct < LOW_POWER_PCT and util < LOW_SM_UTIL_PCT:
            out.append(Diagnosis(
                code="gpus-idle", severity="warn",
                message=f"GPUs are mostly idle ({pct:.0f} % of the power limit, SM utilisation {util:.0f} %): "
                        "the load does not reach them (request rate, concurrency, max-running-requests)",
                figures={**base, "low_power_pct": LOW_POWER_PCT, "low_sm_util_pct": LOW_SM_UTIL_PCT}))
        elif pct >= NEAR_LIMIT_POWER_PCT and util >= HIGH_SM_UTIL_PCT:
            out.append(Diagnosis(
                code="power-bound", severity="info",
                message=f"GPUs ran at {pct:.0f} % of the power limit with SM utilisation {util:.0f} %: the run "
                        "is compute/power bound; more throughput needs cheaper kernels or a higher limit",
                figures={**base, "near_limit_power_pct": NEAR_LIMIT_POWER_PCT}))
    elif pct is not None and pct < LOW_POWER_PCT:
        out.append(Diagnosis(
            code="low-power", severity="warn",
            message=f"GPUs drew {pct:.0f} % of the power limit (no utilisation reading to say why)",
            figures={**base, "low_power_pct": LOW_POWER_PCT}))

    temps = [g.max_temp_c for g in t.gpus if g.max_temp_c is not None]
    hot = max(temps) if temps else None
    clock_ratios = [(g.gpu, 100.0 * g.mean_sm_clock_mhz / g.max_sm_clock_mhz) for g in t.gpus
                    if g.mean_sm_clock_mhz is not None and g.max_sm_clock_mhz]
    low_clock = [(gpu, r) for gpu, r in clock_ratios if r < LOW_CLOCK_PCT]
    if low_clock:
        worst_gpu, worst = min(low_clock, key=lambda x: x[1])
        figs: dict[str, Figure] = {**base, "worst_gpu": worst_gpu, "sm_clock_pct_of_max": _r(worst),
                                   "max_temp_c": hot, "low_clock_pct": LOW_CLOCK_PCT, "hot_temp_c": HOT_TEMP_C}
        if hot is not None and hot >= HOT_TEMP_C:
            out.append(Diagnosis(
                code="thermal-throttle", severity="warn",
                message=f"SM clock averaged {worst:.0f} % of max on GPU {worst_gpu} at up to {hot:.0f} °C: "
                        "thermal throttling — check cooling and fan curves",
                figures=figs))
        elif pct is not None and pct >= NEAR_LIMIT_POWER_PCT:
            out.append(Diagnosis(
                code="power-capped", severity="info",
                message=f"SM clock averaged {worst:.0f} % of max on GPU {worst_gpu} at {pct:.0f} % of the power "
                        "limit: the power cap sets the clock; a higher limit or cheaper kernels would raise it",
                figures=figs))
    elif hot is not None and hot >= HOT_TEMP_C:
        out.append(Diagnosis(
            code="hot", severity="warn",
            message=f"GPU temperature reached {hot:.0f} °C (clocks held up so far): check cooling",
            figures={"max_temp_c": hot, "hot_temp_c": HOT_TEMP_C}))
    return out


def _pcie_findings(t: TelemetrySummary, tp_size: int | None, nvlink: bool) -> list[Diagnosis]:
    if not tp_size or tp_size <= 1 or nvlink:
        return []
    per_gpu = [(g.mean_pcie_rx_mbps or 0.0) + (g.mean_pcie_tx_mbps or 0.0) for g in t.gpus
               if g.mean_pcie_rx_mbps is not None or g.mean_pcie_tx_mbps is not None]
    if not per_gpu:
        return []
    peak = max(per_gpu)
    if peak >= PCIE_NEAR_ZERO_MBPS:
        return []
    return [Diagnosis(
        code="pcie-idle-under-tp", severity="warn",
        message=f"PCIe traffic near zero during TP{tp_size} decode (at most {peak:.0f} MB/s rx+tx per GPU): "
                "tensor-parallel all-reduce is not crossing PCIe peer-to-peer — check P2P (deploy verify-p2p)",
        figures={"max_pcie_rxtx_mbps_per_gpu": _r(peak), "tp_size": tp_size,
                 "pcie_near_zero_mbps": PCIE_NEAR_ZERO_MBPS})]
