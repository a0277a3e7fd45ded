"""Telemetry summary on the real H200 captures, and the sampler script run for real with a stand-in nvidia-smi."""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from orchestrator.parsers.dmon import parse_dmon
from orchestrator.parsers.gpu_query import SAMPLER_FIELDS, STATIC_FIELDS, Sample, parse_query_gpu
from orchestrator.telemetry.sampler import (
    SamplerOutputError,
    build_sampled_bench_script,
    parse_sampled_output,
    run_samples,
)
from orchestrator.telemetry.summary import percentile, summarize, trapezoid_energy_j
from tests.shared import H200_NVLINK

FIX = H200_NVLINK


def fixture(name: str) -> str:
    return (FIX / name).read_text()


def loop_samples() -> list[Sample]:
    return parse_query_gpu(fixture("query-loop-under-load.csv"), SAMPLER_FIELDS)


def test_percentile_and_trapezoid() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 95) == 5.0
    t0 = datetime(2026, 1, 1, 0, 0, 0)
    t1 = datetime(2026, 1, 1, 0, 0, 2)
    assert trapezoid_energy_j([(t1, 300.0), (t0, 100.0)]) == 400.0  # order-independent
    assert trapezoid_energy_j([(t0, 100.0)]) is None


def test_summary_of_real_loop_capture() -> None:
    samples = loop_samples()
    s = summarize(samples, output_tokens=10_000, output_throughput=3600.0)
    assert [g.gpu for g in s.gpus] == [0, 1]
    g0 = s.gpus[0]
    p0 = [x.number("power.draw") or 0.0 for x in samples if x.gpu == 0]
    assert g0.samples == 12
    assert g0.mean_power_w == pytest.approx(sum(p0) / 12)
    assert g0.power_limit_w == 700.0
    assert g0.power_pct_of_limit == pytest.approx(100 * sum(p0) / 12 / 700)
    assert g0.mean_sm_util_pct == 100.0
    assert 1440 <= (g0.mean_sm_clock_mhz or 0) <= 1515
    assert g0.max_temp_c == 57.0
    assert g0.mean_pcie_rx_mbps is None  # the query loop has no PCIe throughput
    assert g0.p95_power_w is not None and max(p0) >= g0.p95_power_w >= g0.mean_power_w
    # Energy: trapezoid over 02:03:55.170 .. 02:03:57.944 (2.774 s) at ~692 W.
    assert s.energy_method == "trapezoid"
    assert g0.energy_j == pytest.approx(692.2 * 2.774, rel=0.01)
    assert s.total_energy_j == pytest.approx((g0.energy_j or 0) + (s.gpus[1].energy_j or 0))
    assert s.j_per_output_token == pytest.approx((s.total_energy_j or 0) / 10_000)
    assert s.output_tokens_per_j == pytest.approx(10_000 / (s.total_energy_j or 1))
    assert s.tokens_per_s_per_w == pytest.approx(3600.0 / (s.total_mean_power_w or 1))
    assert s.mean_sm_util_pct == 100.0


def test_window_filters_samples() -> None:
    s = summarize(loop_samples(), window=(datetime(2026, 11, 30, 2, 3, 56), datetime(2026, 11, 30, 2, 3, 57)))
    assert s.duration_s == 1.0
    assert [g.samples for g in s.gpus] == [4, 4]


def test_dmon_alone_falls_back_to_mean_power_times_duration() -> None:
    dmon = parse_dmon(fixture("dmon-under-load.txt")).samples
    s = summarize(dmon, duration_s=6.0, output_tokens=1000)
    g1 = s.gpus[1]
    pw = [x.number("pwr") or 0.0 for x in dmon if x.gpu == 1]
    assert s.energy_method == "mean_power_x_duration"
    assert g1.energy_j == pytest.approx(sum(pw) / len(pw) * 6.0)
    assert g1.power_limit_w is None and g1.power_pct_of_limit is None  # dmon has no limit column
    assert g1.mean_pcie_rx_mbps == pytest.approx((0 + 0 + 0 + 22 + 16 + 16) / 6)
    assert g1.mean_pcie_tx_mbps == pytest.approx((5 + 7 + 7) / 6)


def test_both_sources_each_metric_from_its_best_source() -> None:
    static = parse_query_gpu(fixture("query-gpu.csv"))
    s = summarize([*loop_samples(), *parse_dmon(fixture("dmon-under-load.txt")).samples], static=static,
                  sampling_overhead_pct=0.7)
    g0 = s.gpus[0]
    assert s.sources == ("dmon", "query")
    assert g0.mean_power_w is not None and g0.mean_power_w > 680  # query loop (12) beats dmon (6, mostly idle)
    assert g0.mean_pcie_rx_mbps == pytest.approx((0 + 0 + 0 + 0 + 14 + 14) / 6)  # only dmon has it
    assert g0.max_sm_clock_mhz == 1980.0  # from the static query
    assert g0.mean_power_violation_pct == pytest.approx(100 / 6)
    assert s.sampling_overhead_pct == 0.7


def test_static_limit_used_when_loop_lacks_it() -> None:
    dmon = parse_dmon(fixture("dmon-under-load.txt")).samples
    s = summarize(dmon, static=parse_query_gpu(fixture("query-gpu.csv")))
    assert s.gpus[0].power_limit_w == 700.0
    assert s.energy_method == "none" and s.total_energy_j is None  # no timestamps, no duration


# ---- sampler script ---------------------------------------------------------------------------------------

FAKE_NVIDIA_SMI = r"""#!/bin/bash
# Stand-in for nvidia-smi: prints the real capture shapes with live timestamps.
case "$*" in
  *dmon*)
    echo "#Date       Time        gpu    pwr     sm    mem   pclk  rxpci  txpci"
    echo "#YYYYMMDD   HH:MM:SS    Idx      W      %      %    MHz   MB/s   MB/s"
    while :; do
      for g in 0 1; do echo " $(date +%Y%m%d) $(date +%H:%M:%S) $g 450 97 30 1500 900 800"; done
      sleep 0.2
    done ;;
  *-lms*)
    while :; do
      for g in 0 1; do echo "$(date '+%Y/%m/%d %H:%M:%S.%3N'), $g, 300.00, 600.00, 95, 1500, 5, 16, 60, 90000"; done
      sleep 0.05
    done ;;
  *)
    echo "0, NVIDIA RTX PRO 6000, 600.00, 600.00, 600.00, 2430, 5, 16"
    echo "1, NVIDIA RTX PRO 6000, 600.00, 600.00, 600.00, 2430, 5, 16" ;;
esac
"""


@pytest.fixture()
def fake_path(tmp_path: Path) -> dict[str, str]:
    if shutil.which("bash") is None or shutil.which("awk") is None:
        pytest.skip("bash and awk are needed to run the sampler script")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}


def test_sampler_script_runs_and_frames_everything(tmp_path: Path, fake_path: dict[str, str]) -> None:
    result_file = tmp_path / "run's result.jsonl"  # a quote in the path: quoting is exercised
    bench_cmd = (f"sleep 1.2; echo 'Output token throughput (tok/s):         86.21'; "
                 f"echo '{{\"completed\": 5}}' > {shlex.quote(str(result_file))}; exit 3")
    sc = build_sampled_bench_script(bench_cmd, query_interval_ms=50, lead_in_s=0.3,
                                    extra_sections=[("jsonl", f"cat {shlex.quote(str(result_file))}")],
                                    tmp_dir=str(tmp_path))
    proc = subprocess.run(["bash", "-c", sc.script], capture_output=True, text=True, env=fake_path, timeout=30)
    assert proc.returncode == 3  # the bench's exit code comes through
    run = parse_sampled_output(proc.stdout, sc.nonce)
    assert run.bench_rc == 3
    assert 1.1 < run.duration_s < 5
    assert "86.21" in run.section("bench")
    assert run.section("jsonl").strip() == '{"completed": 5}'
    samples, static = run_samples(run, sc.query_fields)
    assert {s.source for s in samples} == {"query", "dmon"}
    assert [s.gpu for s in static] == [0, 1]
    summary = summarize(samples, window=(run.started_at, run.ended_at), static=static,
                        output_tokens=1000, output_throughput=500.0)
    g0 = summary.gpus[0]
    assert g0.mean_power_w == 300.0 and g0.power_limit_w == 600.0 and g0.power_pct_of_limit == 50.0
    assert g0.mean_pcie_rx_mbps == 900.0 and g0.max_sm_clock_mhz == 2430.0
    assert summary.energy_method == "trapezoid"
    assert summary.total_energy_j == pytest.approx(2 * 300.0 * run.duration_s, rel=0.25)
    # Samplers are gone and the temp dir is cleaned up.
    assert not list(tmp_path.glob("deploy-bench.*"))
    ps = subprocess.run(["pgrep", "-f", str(tmp_path / "bin")], capture_output=True, text=True)
    assert ps.stdout.strip() == ""


def test_script_structure_and_validation() -> None:
    sc = build_sampled_bench_script("pct exec 120 -- /root/ml-env/bin/python3 -m sglang.bench_serving",
                                    nonce="abc123def")
    assert "nvidia-smi --query-gpu=" + ",".join(SAMPLER_FIELDS) in sc.script
    assert "--format=csv,noheader,nounits -lms 250" in sc.script
    assert "nvidia-smi dmon -s pucvmet -o DT -d 1" in sc.script
    assert "nvidia-smi --query-gpu=" + ",".join(STATIC_FIELDS) in sc.script
    assert "M=@@deploy-abc123def" in sc.script
    assert subprocess.run(["bash", "-n"], input=sc.script, text=True).returncode == 0
    with pytest.raises(ValueError):
        build_sampled_bench_script("")
    with pytest.raises(ValueError):
        build_sampled_bench_script("true", extra_sections=[("bench", "true")])
    with pytest.raises(ValueError):
        build_sampled_bench_script("true", nonce="x; rm")


def test_output_without_meta_is_an_error() -> None:
    with pytest.raises(SamplerOutputError, match="did not finish"):
        parse_sampled_output("@@deploy-abcdef begin bench\npartial\n", "abcdef")


# Real output of build_sampled_bench_script(..., nonce="devcheck01") on a 2x H200 host (driver 580), with a
# 5 s bf16 matmul load as the "bench": real `-lms 250` loop, real `dmon -o DT` (trailing spaces), real static query.
REAL_RUN = Path(__file__).resolve().parents[1] / "data" / "sampled-bench-h200x2.txt"


def test_real_sampled_run_on_h200() -> None:
    run = parse_sampled_output(REAL_RUN.read_text(), "devcheck01")
    assert run.bench_rc == 0
    assert run.started_at == datetime(2026, 11, 30, 2, 41, 50, 72000)
    assert run.duration_s == pytest.approx(9.44)
    assert sorted(run.sections) == ["bench", "dmon", "extra", "query", "static"]
    samples, static = run_samples(run)
    dmon = [s for s in samples if s.source == "dmon"]
    assert dmon and all(s.ts is not None and s.ts.date() == run.started_at.date() for s in dmon)
    assert [s.number("power.limit") for s in static] == [700.0, 700.0]
    t = summarize(samples, window=(run.started_at, run.ended_at), static=static, output_tokens=1000)
    g0 = t.gpus[0]
    assert g0.power_limit_w == 700.0 and g0.max_sm_clock_mhz == 1980.0
    assert g0.p95_power_w is not None and g0.p95_power_w > 680  # the load phase
    assert g0.mean_power_w is not None and 77 < g0.mean_power_w < g0.p95_power_w  # idle lead-in averaged in
    assert g0.mean_pcie_rx_mbps is not None and g0.mean_pcie_rx_mbps < 20  # NVLink box: PCIe stays quiet
    assert t.energy_method == "trapezoid"
    # Both GPUs over ~9.2 s of samples at ~406 W mean.
    assert t.total_energy_j == pytest.approx(7375.6, rel=0.01)


def test_sampler_cpu_line_gives_the_measured_overhead() -> None:
    from orchestrator.telemetry.sampler import parse_sampled_output

    text = ("@@deploy-abc123 meta bench_rc=0 start=2026/11/30 02:00:00.000 end=2026/11/30 02:00:10.000\n"
            "@@deploy-abc123 sampler_cpu ticks=50 hz=100\n")
    run = parse_sampled_output(text, "abc123")
    assert run.sampler_cpu_s == 0.5
    assert run.sampler_overhead_pct == 5.0  # 0.5 CPU-seconds over 10 s = 5 % of one core
    assert parse_sampled_output(text.splitlines()[0] + "\n", "abc123").sampler_overhead_pct is None
