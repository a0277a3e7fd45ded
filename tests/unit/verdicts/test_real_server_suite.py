"""The tool's parsers on the GPU suite's own run of the real sglang 0.5.12.post1 (held out from the suite itself:
tests/fixtures/sglang/real-h100-suite/PROVENANCE.md)."""

from __future__ import annotations

import json

from orchestrator.parsers.bench import parse_bench_jsonl, parse_bench_summary
from orchestrator.parsers.boot import BootStart, parse_boot
from orchestrator.router.drain import in_flight
from orchestrator.stacks.kernel_caches import CacheCheck
from orchestrator.verdicts.power import diagnose, held_concurrency
from orchestrator.verdicts.server_log import CapturePhase, find_fatal
from orchestrator.watchdog.probe import PROGRESS_COUNTERS, metric_sum
from tests.shared import FIXTURES

SUITE = FIXTURES / "sglang" / "real-h100-suite"


def start(name: str) -> BootStart:
    lines = (SUITE / name).read_text().splitlines()
    phase = CapturePhase()
    assert find_fatal(lines, phase) is None and phase.stuck() is None, name
    got = parse_boot(lines)
    assert got is not None and got.complete, name
    return got


def seconds(s: BootStart) -> dict[str, float | None]:
    return {p.name: p.seconds for p in s.phases}


def test_real_cold_warm_and_fresh_starts_in_the_ledger() -> None:
    cold, warm, fresh = start("cold.server.log"), start("warm.server.log"), start("fresh.server.log")
    assert seconds(cold) == {"startup": 12, "weights": 0, "capture": 58, "piecewise": 5, "warmup": 18}
    assert seconds(warm) == {"startup": 14, "weights": 0, "capture": 2, "piecewise": 2, "warmup": 2}
    assert seconds(fresh)["capture"] == 77 and seconds(fresh)["piecewise"] == 4
    # without a kernel-cache check (an operator's own SGLANG_CACHE_DIR) the capture time tells them apart
    judged_warm = warm.judged(None, [cold.judged(CacheCheck(dir="/d", state="fresh"))])
    assert judged_warm.cold is False and "capture 4.0 s against 63.0 s" in judged_warm.cold_basis
    assert fresh.judged(None, [judged_warm]).cold is True
    # the check said warm on a directory holding only its manifest, and the start compiled for 58 s: the check
    # now says fresh there (tests/unit/test_kernel_caches.py), and the ledger believes the check
    assert cold.judged(CacheCheck(dir="/d", state="fresh", reason="it holds only its manifest")).cold is True


def test_real_metrics_under_load_and_idle() -> None:
    idle, load = (SUITE / "metrics_idle.txt").read_text(), (SUITE / "metrics_load.txt").read_text()
    assert in_flight(load) == 8  # the eight streams the suite had open
    assert in_flight(idle) is not None and in_flight(idle) <= 1
    busy, quiet = metric_sum(load, PROGRESS_COUNTERS), metric_sum(idle, PROGRESS_COUNTERS)
    assert busy is not None and quiet is not None and busy > quiet


def test_real_bench_of_2000_prompts_held_its_concurrency() -> None:
    bench = parse_bench_jsonl((SUITE / "bench_2000.jsonl").read_text(), num_prompts=2000)
    printed = parse_bench_summary((SUITE / "bench_2000.stdout.txt").read_text())
    assert bench.completed == printed.completed == 2000 and not bench.failed
    assert bench.max_concurrent_requests is not None and bench.max_concurrent_requests > 32  # 1 s buckets, again
    assert held_concurrency(bench) == (31, "mean")
    assert [d.code for d in diagnose(bench, None)] == []


def test_real_drain_with_streams_in_flight() -> None:
    down = json.loads((SUITE / "cold.shutdown.json").read_text())
    assert down["rc"] == -9 and down["health_during_drain"] == 503 and down["exit_after_sigterm_s"] < 10
    assert [s["end"] for s in down["streams"]] == ["done"] * 6
