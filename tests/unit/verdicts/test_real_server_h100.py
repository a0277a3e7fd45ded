"""The tool's parsers and verdicts on what a real sglang 0.5.12.post1 printed and served on an H100
(tests/fixtures/sglang/real-h100/PROVENANCE.md): issue 49's items, each on the real capture."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path

from orchestrator.parsers.bench import parse_bench_jsonl, parse_bench_summary
from orchestrator.parsers.boot import BootPhase, BootStart, parse_boot, parse_systemd_time
from orchestrator.stacks.kernel_caches import CacheCheck, cache_env
from orchestrator.steps.checks import parse_health_probe
from orchestrator.verdicts.power import autotune_lever, diagnose, held_concurrency
from orchestrator.verdicts.server_log import CapturePhase, find_fatal
from tests.shared import FIXTURES

REAL = FIXTURES / "sglang" / "real-h100"
FATAL = FIXTURES / "sglang" / "fatal"
#: The capture flow's own prefix on each line (`+<s since launch>s <wall> | line`), not sglang's.
_FLOW = re.compile(r"^\+ *(?P<rel>[0-9.]+)s (?P<wall>\S+) \| ?(?P<line>.*)$")


def server_log(name: str) -> tuple[list[str], datetime]:
    """The lines as the journal gives them (`-o cat`), and when the process was launched (its first line's wall time
    less its seconds since launch): what systemd's ExecMainStartTimestamp says under the unit."""
    lines: list[str] = []
    launched: datetime | None = None
    for raw in (REAL / name).read_text().splitlines():
        m = _FLOW.match(raw)
        if m is None:
            continue  # `<<stdout closed>>`
        if launched is None:
            launched = datetime.fromisoformat(m["wall"]) - timedelta(seconds=float(m["rel"]))
        lines.append(m["line"])
    assert launched is not None
    return lines, launched


def seconds(start: BootStart) -> dict[str, float | None]:
    return {p.name: p.seconds for p in start.phases}


# ------------------------------------------------------------------ 1: the piecewise CUDA graph crash


def test_both_real_piecewise_crashes_are_their_verdict_quoting_the_servers_workaround() -> None:
    for case in ("cublas", "illegal-access"):
        lines = (FATAL / f"piecewise-cuda-graph.{case}.log").read_text().splitlines()
        hit = find_fatal(lines)
        assert hit is not None and hit.code == "piecewise-cuda-graph", (case, hit)
        assert hit.line.startswith("[2026-12-07 ") and "Piecewise CUDA Graph failed with error:" in hit.line
        assert ("'To work around this error, add --disable-piecewise-cuda-graph to your launch command.'"
                in hit.fix), hit.fix
        assert "disable-piecewise-cuda-graph=true" in hit.fix
    illegal = find_fatal((FATAL / "piecewise-cuda-graph.illegal-access.log").read_text().splitlines())
    assert illegal is not None and "FusedAddRMSNorm" in illegal.meaning


def test_the_piecewise_line_alone_still_names_the_flag() -> None:
    """A probe that read the failure line but not yet the advice two lines on: the fix is the same flag."""
    line = (FATAL / "piecewise-cuda-graph.log").read_text().splitlines()[1]
    hit = find_fatal([line])
    assert hit is not None and hit.code == "piecewise-cuda-graph" and "--disable-piecewise-cuda-graph" in hit.fix


def test_the_real_healthy_starts_have_no_fatal_line() -> None:
    for name in ("cold.server.log", "moe.server.log"):
        lines, _ = server_log(name)
        phase = CapturePhase()
        assert find_fatal(lines, phase) is None and phase.stuck() is None, name


# ------------------------------------------------------------------ 3 and 9: the phases of a real start


def test_a_real_cold_start_in_the_ledger_with_its_imports_and_piecewise_phase() -> None:
    lines, launched = server_log("cold.server.log")
    start = parse_boot(lines, launched_at=launched)
    assert start is not None and start.complete
    print(f"real cold start: {seconds(start)}, total {start.total_s} s")
    # sglang's own stamps are whole seconds; the flow measured ready at +122.5 s, capture 58.4 s, piecewise 4.8 s
    assert seconds(start) == {"imports": 20.301, "startup": 22, "weights": 0, "capture": 58, "piecewise": 5,
                              "warmup": 16}
    assert start.total_s is not None and abs(start.total_s - 122.5) < 1
    # the phases leave out only the gaps between them (1 s of KV-cache sizing before capture)
    assert 0 <= start.total_s - sum(s or 0 for s in seconds(start).values()) <= 1
    assert start.started_at == launched.isoformat()
    without = parse_boot(lines)
    assert without is not None and without.total_s == 102 and without.phase("imports") is None


def test_a_hang_in_piecewise_capture_is_capture_stuck_with_the_piecewise_switch() -> None:
    lines, _ = server_log("cold.server.log")
    cut = next(i for i, ln in enumerate(lines) if "Capture piecewise CUDA graph begin" in ln)
    phase = CapturePhase()
    assert find_fatal(lines[:cut + 40], phase) is None
    stuck = phase.stuck()
    assert stuck is not None and stuck.code == "capture-stuck" and "piecewise" in stuck.line
    assert "disable-piecewise-cuda-graph" in stuck.fix and stuck.meaning.startswith("Piecewise")
    start = parse_boot(lines[:cut + 40])
    assert start is not None and not start.complete and seconds(start)["piecewise"] is None


def test_the_unit_start_time_comes_with_every_health_probe() -> None:
    probe = parse_health_probe("code=503\nActiveState=active\nSubState=running\nNRestarts=0\n"
                               "ExecMainStartTimestamp=Mon 2026-12-07 15:12:38 UTC\n--journal--\n"
                               "[2026-12-07 15:12:59] line\n-- cursor: s=1\n")
    assert parse_systemd_time(probe.main_started) == datetime(2026, 12, 7, 15, 12, 38)
    assert parse_systemd_time("") is None and parse_systemd_time("n/a") is None


# ------------------------------------------------------------------ 2: cold or warm


#: The warm start on the same caches, as the device README gives it (no log of it was kept): capture 1.7 s,
#: piecewise 2.1 s, ready 54.4 s.
WARM = BootStart(complete=True, total_s=54.4, phases=[BootPhase(name="capture", seconds=1.7),
                                                       BootPhase(name="piecewise", seconds=2.1)])


def test_a_real_cold_start_is_not_labelled_warm_without_a_jit_line() -> None:
    lines, launched = server_log("cold.server.log")
    start = parse_boot(lines, launched_at=launched)
    assert start is not None
    assert start.cold is None  # the lines alone do not say: no JIT line, no autotune line on Hopper bf16
    unknown = start.judged(None)
    assert unknown.cold is None and unknown.summary().startswith("start 122 s (longest: capture 58 s)")
    by_capture = start.judged(None, [WARM])  # an operator's own SGLANG_CACHE_DIR: no check, the capture tells
    assert by_capture.cold is True and "capture 63.0 s against 3.8 s" in by_capture.cold_basis
    assert by_capture.summary().startswith("cold start 122 s")
    warm_again = WARM.judged(None, [by_capture])
    assert warm_again.cold is False
    fresh = start.judged(CacheCheck(dir="/d", state="fresh"), [WARM])
    assert fresh.cold is True and fresh.cold_basis == "kernel cache fresh"
    checked_warm = start.judged(CacheCheck(dir="/d", state="warm"))
    assert checked_warm.cold is False
    unchecked = start.judged(CacheCheck(dir="/d", state="unchecked", reason="x"), [WARM])
    assert unchecked.cold is True and unchecked.kernel_cache is not None


# ------------------------------------------------------------------ 8: the MoE config warning


def test_the_moe_default_config_warning_is_read_mid_line_and_quoted_by_the_diagnosis() -> None:
    lines, launched = server_log("moe.server.log")
    assert any(ln.startswith("Capturing batches") and "Using default MoE kernel config" in ln for ln in lines)
    start = parse_boot(lines, launched_at=launched)
    assert start is not None
    path = ("/root/site/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0/"
            "E=8,N=128,device_name=NVIDIA_H100_80GB_HBM3.json")
    assert start.moe_config_missing == [path]  # the `_down` variant is another warning, not the default config
    lever = autotune_lever(start, "auto")
    assert path in lever and "Using default MoE kernel config" in lever
    cold_lines, _ = server_log("cold.server.log")
    cold = parse_boot(cold_lines)
    assert cold is not None and cold.moe_config_missing == []


# ------------------------------------------------------------------ 6: the concurrency the bench really held


def test_the_bench_peak_is_not_concurrency_and_the_shortfall_reads_the_held_one() -> None:
    text = (REAL / "bench_random_ids.jsonl").read_text()
    bench = parse_bench_jsonl(text)
    printed = parse_bench_summary((REAL / "bench_random_ids.stdout.txt").read_text())
    assert bench.max_concurrent_requests == printed.max_concurrent_requests == 142  # at --max-concurrency 32
    assert bench.max_concurrency == 32 and bench.concurrency is not None and round(bench.concurrency, 1) == 30.6
    assert held_concurrency(bench) == (31, "mean")
    assert [d.code for d in diagnose(bench, None)] == []  # 31 of 32 held: no shortfall
    # the same real run read as if it had offered 64: it held 31, a shortfall the bucket count (142) hid
    record = json.loads(text.splitlines()[-1])
    offered64 = parse_bench_jsonl(json.dumps({**record, "max_concurrency": 64}))
    found = [d for d in diagnose(offered64, None) if d.code == "concurrency-shortfall"]
    assert len(found) == 1 and found[0].message.startswith("concurrency reached 31 of 64 (mean)"), found
    assert found[0].figures["peak_1s_buckets"] == 142
    no_mean = bench.model_copy(update={"concurrency": None})
    assert held_concurrency(no_mean) == (round(200 * bench.mean_e2e_latency_ms / 1000 / bench.duration_s), "mean")
    peak_only = no_mean.model_copy(update={"mean_e2e_latency_ms": None})
    assert held_concurrency(peak_only) == (32, "peak")  # never above the offered load


# ------------------------------------------------------------------ 4: every cache the real start wrote


#: Where each cache lands by default, as the real start wrote them (du_caches.txt; after_cold.caches.txt), and the
#: variable that moves it.
REAL_DEFAULTS = {"/root/.cache/flashinfer": "FLASHINFER_WORKSPACE_BASE", "/root/.cache/sglang": "SGLANG_CACHE_DIR",
                 "/root/.cache/tvm-ffi": "TVM_FFI_CACHE_DIR", "/root/.triton": "TRITON_CACHE_DIR",
                 "/root/.nv": "CUDA_CACHE_PATH", "/tmp/torchinductor_root": "TORCHINDUCTOR_CACHE_DIR"}


def test_every_cache_the_real_start_wrote_is_under_the_managed_directory() -> None:
    written = [line.split("\t")[1] for line in (REAL / "du_caches.txt").read_text().splitlines()]
    homes = [p for p in written if p.startswith(("/root/", "/tmp/torchinductor"))]
    assert set(homes) == set(REAL_DEFAULTS), homes
    env = dict(cache_env("/var/cache/deploy/kernels/k"))
    for default, var in REAL_DEFAULTS.items():
        assert env.get(var, "").startswith("/var/cache/deploy/kernels/k"), (default, var)
    # issue 48's list for the paths the H100 did not take (NSA, CuTe DSL, 0.5.23's own JIT)
    for var in ("TILELANG_CACHE_DIR", "CUTE_DSL_CACHE_DIR", "SGLANG_JIT_CACHE_DIR", "SGLANG_DG_CACHE_DIR"):
        assert env[var].startswith("/var/cache/deploy/kernels/k/"), var
    # deploy's cache env of the MoE start (TRITON_CACHE_DIR, FLASHINFER_WORKSPACE_BASE) kept those under /root/kc;
    # what still landed outside it is tvm-ffi's and the Prometheus files in /tmp
    outside = {line.split("\t")[0].rsplit("/", 1)[0] for line in (REAL / "after_moe.caches.txt").read_text()
               .splitlines() if line.startswith("/") and not line.startswith("/root/kc")}
    assert any(p.startswith("/tmp/tmp") for p in outside), outside


def test_real_paths_are_read_from_a_path_not_hard_coded() -> None:
    assert Path(REAL / "PROVENANCE.md").read_text().count("0.5.12.post1") >= 1


# ------------------------------------------------------------------ the /metrics readers on a real server's series


def test_the_tools_metrics_readers_read_the_real_series() -> None:
    from orchestrator.router.checks import REQUESTS_COUNTER
    from orchestrator.router.drain import in_flight
    from orchestrator.watchdog.probe import PROGRESS_COUNTERS, metric_sum

    text = (REAL / "cold.metrics.txt").read_text()
    assert in_flight(text) == 0  # idle after the start: running + queued, both real gauges read
    assert metric_sum(text, (REQUESTS_COUNTER,)) == 1.0  # the warmup request
    assert metric_sum(text, PROGRESS_COUNTERS) == 16.0 + 13.0 + 11.0 + 8.0


def test_a_restart_reads_the_previous_process_drain_lines_and_leaves_them_out() -> None:
    """After `systemctl restart` the journal after the cursor starts with the old process's drain (its SIGTERM
    and `Gracefully exiting` lines): with the unit's start time they are not this start's."""
    lines, launched = server_log("cold.server.log")
    old = ["[2026-12-07 15:12:31] SIGTERM received. signum=None frame=None. Draining requests and shutting down...",
           "[2026-12-07 15:12:36] Gracefully exiting... Remaining number of requests 0. Remaining requests "
           "remaining_rids=[]."]
    start = parse_boot(old + lines, launched_at=launched)
    assert start is not None and start.phases[0].name == "imports" and start.started_at == launched.isoformat()
    assert start.total_s is not None and abs(start.total_s - 122.5) < 1
