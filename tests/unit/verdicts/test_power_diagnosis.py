"""Diagnosis lines: each rule fires on its numbers and stays quiet otherwise."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from orchestrator.parsers.bench import BenchResult
from orchestrator.parsers.boot import BootPhase, BootStart
from orchestrator.parsers.dmon import parse_dmon
from orchestrator.parsers.gpu_query import SAMPLER_FIELDS, Sample, parse_query_gpu
from orchestrator.telemetry.summary import TelemetrySummary, summarize
from orchestrator.verdicts.power import (
    CONCURRENCY_SHORTFALL_RATIO,
    GENERIC_LEVER,
    LOW_POWER_PCT,
    PCIE_NEAR_ZERO_MBPS,
    autotune_lever,
    diagnose,
)
from tests.shared import H200_NVLINK

FIX = H200_NVLINK
T0 = datetime(2026, 11, 30, 2, 0, 0)


def telemetry(power: float, util: float, *, gpus: int = 8, limit: float = 600.0, clock: float = 2400.0,
              max_clock: float = 2430.0, temp: float = 60.0, pcie: float | None = None) -> TelemetrySummary:
    """Ten seconds of 1 s query samples per GPU (plus dmon PCIe samples when `pcie` is given)."""
    samples: list[Sample] = []
    for g in range(gpus):
        for i in range(10):
            ts = T0 + timedelta(seconds=i)
            samples.append(Sample(ts=ts, gpu=g, tick=i, values={
                "power.draw": power, "power.limit": limit, "utilization.gpu": util, "clocks.sm": clock,
                "temperature.gpu": temp}))
            if pcie is not None:
                samples.append(Sample(ts=ts, gpu=g, tick=i, source="dmon",
                                      values={"rxpci": pcie / 2, "txpci": pcie / 2}))
    static = [Sample(ts=None, gpu=g, values={"clocks.max.sm": max_clock}) for g in range(gpus)]
    return summarize(samples, static=static, output_tokens=100_000, output_throughput=10_000.0)


def bench(**kw: object) -> BenchResult:
    base: dict[str, object] = {"source": "jsonl", "completed": 1024, "num_prompts": 1024, "failed": 0,
                               "output_throughput": 3000.0, "request_rate": 999.0, "max_concurrent_requests": 1000,
                               "concurrency": 950.0}
    base.update(kw)
    return BenchResult.model_validate(base)


def codes(ds: list) -> list[str]:  # type: ignore[type-arg]
    return [d.code for d in ds]


def test_seed_case_low_power_high_util() -> None:
    # The operator's observation: ~235 W of 600 W under load.
    ds = diagnose(bench(), telemetry(235.0, 92.0), tp_size=8, nvlink=False)
    (d,) = [d for d in ds if d.code == "kernels-not-saturating"]
    assert d.severity == "warn"
    assert d.message.startswith("decode ran at 39 % of the power limit (235 of 600 W per GPU) "
                                "with SM utilisation 92 %")
    assert "MoE kernel tuning / autotune is the lever" in d.message
    assert d.figures["power_pct_of_limit"] == pytest.approx(39.2)
    assert d.figures["low_power_pct"] == LOW_POWER_PCT


def test_boot_ledger_names_the_autotune_lever_for_flashinfer_cutlass() -> None:
    """A last start without a FlashInfer autotune phase on flashinfer_cutlass: the concrete lever is named."""
    no_autotune = BootStart(complete=True, total_s=60.0, phases=[BootPhase(name="weights", seconds=30.0)])
    ds = diagnose(bench(), telemetry(235.0, 92.0), tp_size=8, boot=no_autotune, moe_runner_backend="flashinfer_cutlass")
    (d,) = [d for d in ds if d.code == "kernels-not-saturating"]
    assert "FlashInfer autotune did not run for flashinfer_cutlass" in d.message
    assert "docs/stacks.md" in d.message
    autotuned = no_autotune.model_copy(update={"phases": [BootPhase(name="autotune", seconds=40.0)], "cold": True})
    for boot, backend in ((autotuned, "flashinfer_cutlass"), (no_autotune, "triton"), (None, "flashinfer_cutlass")):
        (d,) = [d for d in diagnose(bench(), telemetry(235.0, 92.0), boot=boot, moe_runner_backend=backend)
                if d.code == "kernels-not-saturating"]
        assert "MoE kernel tuning / autotune is the lever" in d.message, (boot, backend)


def test_the_autotune_lever_says_which_releases_need_the_patch() -> None:
    """sglang ≥ 0.5.13 autotunes flashinfer_cutlass upstream (moe_needs_autotune in the released wheels): no patch is
    the lever there; 0.5.12.post1 leaves it out, and the example stack patch puts it in."""
    no_autotune = BootStart(complete=True, total_s=60.0, phases=[BootPhase(name="weights", seconds=30.0)])

    def lever(version: str | None) -> str:
        (d,) = [d for d in diagnose(bench(), telemetry(235.0, 92.0), boot=no_autotune,
                                    moe_runner_backend="flashinfer_cutlass", sglang_version=version)
                if d.code == "kernels-not-saturating"]
        return d.message

    for version in ("0.5.23", "0.5.13"):
        assert f"sglang {version} autotunes it upstream, without a patch" in lever(version)
        assert "stack patch" not in lever(version) and "--disable-flashinfer-autotune" in lever(version)
    for version in ("0.5.12.post1", None):
        assert "a stack patch enables it on 0.5.12.post1; ≥ 0.5.13 autotunes it upstream" in lever(version)


def test_idle_gpus() -> None:
    ds = diagnose(bench(), telemetry(85.0, 10.0))
    assert codes(ds) == ["gpus-idle"]
    assert "the load does not reach them" in ds[0].message


def test_just_above_thresholds_is_quiet() -> None:
    ds = diagnose(bench(), telemetry(0.51 * 600, 79.0))
    assert ds == []


def test_concurrency_shortfall_capped_by_mrr() -> None:
    ds = diagnose(bench(concurrency=512.0, max_concurrency=None), None, max_running_requests=512)
    (d,) = ds
    assert d.code == "concurrency-shortfall"
    assert d.message == "concurrency reached 512 of 1024 (mean): capped by --max-running-requests 512"
    assert d.figures["threshold_ratio"] == CONCURRENCY_SHORTFALL_RATIO


def test_concurrency_shortfall_burst_and_peak_fallback() -> None:
    ds = diagnose(bench(concurrency=633.4), None, max_running_requests=2048)
    (d,) = ds
    assert d.message.startswith("concurrency reached 633 of 1024 (mean): the server finished requests faster")
    assert diagnose(bench(concurrency=900.0), None) == []  # 88 % of offered: fine
    # the bench's 1 s-bucket peak is read only when nothing else is there, and never above the offered load
    (d,) = diagnose(bench(concurrency=None, max_concurrent_requests=700), None)
    assert d.message.startswith("concurrency reached 700 of 1024 (peak)")
    assert diagnose(bench(concurrency=None, max_concurrent_requests=4000), None) == []


def test_concurrency_offered_respects_max_concurrency() -> None:
    assert diagnose(bench(max_concurrency=256, concurrency=250.0), None) == []
    ds = diagnose(bench(max_concurrency=256, concurrency=100.0, request_rate=4.0, duration_s=300.0),
                  None)
    assert "at 4 req/s arrivals spread over 256 s of the 300 s run and the server finished requests faster" \
        in ds[0].message


def test_failed_requests_first() -> None:
    ds = diagnose(bench(completed=1000, failed=24), telemetry(235.0, 92.0))
    assert ds[0].code == "failed-requests" and ds[0].severity == "fail"
    assert ds[0].message.startswith("24 of 1024 requests failed")


def test_pcie_near_zero_under_tp_over_pcie_only() -> None:
    t = telemetry(235.0, 92.0, pcie=20.0)
    ds = diagnose(None, t, tp_size=8, nvlink=False)
    (d,) = [d for d in ds if d.code == "pcie-idle-under-tp"]
    assert d.message.startswith("PCIe traffic near zero during TP8 decode")
    assert "deploy verify-p2p" in d.message
    assert d.figures["pcie_near_zero_mbps"] == PCIE_NEAR_ZERO_MBPS
    assert "pcie-idle-under-tp" not in codes(diagnose(None, t, tp_size=8, nvlink=True))
    assert "pcie-idle-under-tp" not in codes(diagnose(None, t, tp_size=1))
    busy = telemetry(235.0, 92.0, pcie=8000.0)
    assert "pcie-idle-under-tp" not in codes(diagnose(None, busy, tp_size=8))
    # Without dmon PCIe columns there is nothing to judge.
    assert "pcie-idle-under-tp" not in codes(diagnose(None, telemetry(235.0, 92.0), tp_size=8))


def test_thermal_throttle() -> None:
    ds = diagnose(None, telemetry(580.0, 99.0, clock=1600.0, temp=90.0))
    assert "thermal-throttle" in codes(ds)
    assert "power-capped" not in codes(ds)


def test_real_h200_capture_is_power_bound_and_capped() -> None:
    loop = parse_query_gpu((FIX / "query-loop-under-load.csv").read_text(), SAMPLER_FIELDS)
    static = parse_query_gpu((FIX / "query-gpu.csv").read_text())
    dmon = parse_dmon((FIX / "dmon-under-load.txt").read_text()).samples
    ds = diagnose(None, summarize([*loop, *dmon], static=static), tp_size=2, nvlink=True)
    assert codes(ds) == ["power-bound", "power-capped"]
    capped = ds[1]
    assert capped.figures["sm_clock_pct_of_max"] is not None
    assert 70 < float(capped.figures["sm_clock_pct_of_max"] or 0) < 80  # ~1465 of 1980 MHz


@pytest.mark.parametrize("playbook", ["up", "bench", "roll"])
def test_first_and_second_run_of_a_release_name_the_same_lever(playbook: str) -> None:
    """Issue 50, item 16: the first run of a release starts the server (its start is this run's); the second run
    starts nothing and must read that start from the boot ledger, whichever playbook benches."""
    from types import SimpleNamespace

    from orchestrator.facts import CT
    from orchestrator.playbooks import load_playbook
    from orchestrator.steps import REGISTRY, load_all_steps
    from orchestrator.steps.checks import last_boot

    load_all_steps()
    start = BootStart(complete=True, total_s=60.0, phases=[BootPhase(name="weights", seconds=30.0)])
    read = {f.name for name in load_playbook(playbook, REGISTRY).step_names for f in REGISTRY[name].ct_facts}

    def ctx(this_run: BootStart | None) -> SimpleNamespace:
        ledger = {CT.current_boot.name: [start]}  # what the host's boot.jsonl holds after the first run
        facts = SimpleNamespace(find=lambda fact: ledger.get(fact.name) if fact.name in read else None)
        return SimpleNamespace(state=SimpleNamespace(server=SimpleNamespace(boot=this_run)), facts=facts)

    first = autotune_lever(last_boot(ctx(start)), "flashinfer_cutlass")  # type: ignore[arg-type]
    second = autotune_lever(last_boot(ctx(None)), "flashinfer_cutlass")  # type: ignore[arg-type]
    assert "FlashInfer autotune did not run" in first
    assert first == second != GENERIC_LEVER
