"""bench_serving results: the real printed block (sglang.md 3.2), older blocks, and JSONL records (3.3)."""

from __future__ import annotations

import json
import math

import pytest

from orchestrator.parsers.bench import (
    BenchParseError,
    BenchResult,
    parse_bench_jsonl,
    parse_bench_output,
    parse_bench_summary,
)

# Verbatim from sgl-project/sglang PR #29007 (reference/sglang.md 3.2), trailing spaces kept.
REAL_BLOCK = (
    "============ Serving Benchmark Result ============\n"
    "Backend:                                 sglang    \n"
    "Traffic request rate:                    inf       \n"
    "Max request concurrency:                 1         \n"
    "Successful requests:                     50        \n"
    "Benchmark duration (s):                  890.81    \n"
    "Total input tokens:                      204800    \n"
    "Total input text tokens:                 204800    \n"
    "Total generated tokens:                  76800     \n"
    "Total generated tokens (retokenized):    76436     \n"
    "Request throughput (req/s):              0.06      \n"
    "Input token throughput (tok/s):          229.90    \n"
    "Output token throughput (tok/s):         86.21     \n"
    "Peak output token throughput (tok/s):    96.00     \n"
    "Peak concurrent requests:                2         \n"
    "Total token throughput (tok/s):          316.12    \n"
    "Concurrency:                             1.00      \n"
    "----------------End-to-End Latency----------------\n"
    "Mean E2E Latency (ms):                   17813.70  \n"
    "Median E2E Latency (ms):                 17755.02  \n"
    "P90 E2E Latency (ms):                    18381.57  \n"
    "P95 E2E Latency (ms):                    18551.06  \n"
    "P99 E2E Latency (ms):                    20518.64  \n"
    "---------------Time to First Token----------------\n"
    "Mean TTFT (ms):                          249.77    \n"
    "Median TTFT (ms):                        218.59    \n"
    "P90 TTFT (ms):                           361.41    \n"
    "P95 TTFT (ms):                           362.67    \n"
    "P99 TTFT (ms):                           405.75    \n"
    "-----Time per Output Token (excl. 1st token)------\n"
    "Mean TPOT (ms):                          11.44     \n"
    "Median TPOT (ms):                        11.36     \n"
    "P90 TPOT (ms):                           11.83     \n"
    "P95 TPOT (ms):                           11.86     \n"
    "P99 TPOT (ms):                           13.18     \n"
    "---------------Inter-Token Latency----------------\n"
    "Mean ITL (ms):                           11.44     \n"
    "Median ITL (ms):                         10.54     \n"
    "P90 ITL (ms):                            10.69     \n"
    "P95 ITL (ms):                            10.80     \n"
    "P99 ITL (ms):                            57.67     \n"
    "Max ITL (ms):                            2235.31   \n"
    "==================================================\n"
)

# A v0.5.x-shaped block: no P90/P95 rows, no Peak concurrent requests, "not set" concurrency, Accept length,
# no trailing spaces (the cookbook prints it so), embedded in surrounding log output.
OLD_BLOCK = """\
#Input tokens: 131072
#Output tokens: 262144
Starting warmup with 1 sequences...
Warmup completed with 1 sequences. Starting main benchmark run...
============ Serving Benchmark Result ============
Backend:                                 sglang
Traffic request rate:                    999.0
Max request concurrency:                 not set
Successful requests:                     1020
Benchmark duration (s):                  61.25
Total input tokens:                      130560
Total generated tokens:                  261120
Total generated tokens (retokenized):    260998
Request throughput (req/s):              16.65
Input token throughput (tok/s):          2131.59
Output token throughput (tok/s):         4263.18
Peak output token throughput (tok/s):    6144.00
Total token throughput (tok/s):          6394.77
Concurrency:                             633.41
Accept length:                           2.71
----------------End-to-End Latency----------------
Mean E2E Latency (ms):                   38034.77
Median E2E Latency (ms):                 38500.10
---------------Time to First Token----------------
Mean TTFT (ms):                          1205.11
Median TTFT (ms):                        1190.30
P99 TTFT (ms):                           2500.90
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          144.43
Median TPOT (ms):                        143.00
P99 TPOT (ms):                           160.12
---------------Inter-Token Latency----------------
Mean ITL (ms):                           144.40
Median ITL (ms):                         120.00
P95 ITL (ms):                            300.00
P99 ITL (ms):                            900.00
Max ITL (ms):                            2500.00
==================================================
"""


def test_real_block_by_label() -> None:
    r = parse_bench_summary(REAL_BLOCK)
    assert r.source == "summary"
    assert r.backend == "sglang"
    assert r.request_rate is not None and math.isinf(r.request_rate)
    assert r.max_concurrency == 1
    assert r.completed == 50
    assert r.duration_s == 890.81
    assert r.total_input_tokens == 204800
    assert r.total_output_tokens == 76800
    assert r.total_output_tokens_retokenized == 76436
    assert r.output_throughput == 86.21
    assert r.total_throughput == 316.12
    assert r.input_throughput == 229.90
    assert r.peak_output_throughput == 96.00
    assert r.max_concurrent_requests == 2
    assert r.concurrency == 1.00
    assert (r.mean_e2e_latency_ms, r.p90_e2e_latency_ms, r.p99_e2e_latency_ms) == (17813.70, 18381.57, 20518.64)
    assert (r.mean_ttft_ms, r.median_ttft_ms, r.p95_ttft_ms, r.p99_ttft_ms) == (249.77, 218.59, 362.67, 405.75)
    assert (r.mean_tpot_ms, r.p99_tpot_ms) == (11.44, 13.18)
    assert (r.median_itl_ms, r.p99_itl_ms, r.max_itl_ms) == (10.54, 57.67, 2235.31)
    assert r.accept_length is None
    assert r.failed is None  # not derivable from the block alone


def test_real_block_with_preset_prompts_derives_failures() -> None:
    r = parse_bench_summary(REAL_BLOCK, num_prompts=52)
    assert (r.num_prompts, r.failed) == (52, 2)


def test_old_block_missing_rows_and_log_around_it() -> None:
    r = parse_bench_summary(OLD_BLOCK, num_prompts=1024)
    assert r.request_rate == 999.0
    assert r.max_concurrency is None
    assert r.completed == 1020 and r.failed == 4
    assert r.concurrency == 633.41
    assert r.accept_length == 2.71
    assert r.max_concurrent_requests is None
    assert r.p90_ttft_ms is None and r.p95_ttft_ms is None
    assert r.p95_itl_ms == 300.0 and r.p99_ttft_ms == 2500.90


def test_last_block_wins_when_log_holds_two() -> None:
    r = parse_bench_summary(OLD_BLOCK + "\n" + REAL_BLOCK)
    assert r.completed == 50


def test_block_without_output_throughput_is_an_error() -> None:
    broken = "\n".join(ln for ln in REAL_BLOCK.splitlines() if not ln.startswith("Output token throughput"))
    with pytest.raises(BenchParseError, match="Output token throughput"):
        parse_bench_summary(broken)
    with pytest.raises(BenchParseError, match=r"no .* block in the bench output"):
        parse_bench_summary("Traceback (most recent call last):\n")


def _record(**over: object) -> dict[str, object]:
    """A v0.5.x JSONL record with the 3.3 keys (values consistent with OLD_BLOCK)."""
    rec: dict[str, object] = {
        "tag": None, "backend": "sglang", "dataset_name": "random-ids", "request_rate": 999.0,
        "max_concurrency": None, "sharegpt_output_len": None, "random_input_len": 128, "random_output_len": 256,
        "random_range_ratio": 1.0, "server_info": {"tp_size": 8, "max_running_requests": 2048},
        "duration": 61.25, "completed": 1020, "total_input_tokens": 130560, "total_input_text_tokens": 130560,
        "total_input_vision_tokens": 0, "total_output_tokens": 261120, "total_output_tokens_retokenized": 260998,
        "request_throughput": 16.65, "input_throughput": 2131.59, "output_throughput": 4263.18,
        "total_throughput": 6394.77, "mean_e2e_latency_ms": 38034.77, "median_e2e_latency_ms": 38500.1,
        "std_e2e_latency_ms": 900.0, "p99_e2e_latency_ms": 40000.0, "mean_ttft_ms": 1205.11,
        "median_ttft_ms": 1190.3, "std_ttft_ms": 100.0, "p99_ttft_ms": 2500.9, "mean_tpot_ms": 144.43,
        "median_tpot_ms": 143.0, "std_tpot_ms": 5.0, "p99_tpot_ms": 160.12, "mean_itl_ms": 144.4,
        "median_itl_ms": 120.0, "std_itl_ms": 50.0, "p95_itl_ms": 300.0, "p99_itl_ms": 900.0,
        "concurrency": 633.41, "accept_length": None, "max_output_tokens_per_s": 6144.0,
        "max_concurrent_requests": 1020,
    }
    rec.update(over)
    return rec


def test_jsonl_takes_last_line() -> None:
    older = json.dumps(_record(output_throughput=1.0, completed=1))
    text = older + "\n" + json.dumps(_record()) + "\n\n"
    r = parse_bench_jsonl(text, num_prompts=1024)
    assert r.source == "jsonl"
    assert r.output_throughput == 4263.18
    assert r.peak_output_throughput == 6144.0
    assert r.max_concurrent_requests == 1020
    assert r.total_output_tokens == 261120
    assert r.completed == 1020 and r.num_prompts == 1024 and r.failed == 4
    assert r.server_info == {"tp_size": 8, "max_running_requests": 2048}
    assert r.random_range_ratio == 1.0 and r.dataset_name == "random-ids"


def test_jsonl_metrics_dict_keys_and_details() -> None:
    rec = _record()
    rec["total_output"] = rec.pop("total_output_tokens")
    rec["total_input"] = rec.pop("total_input_tokens")
    rec["max_itl_ms"] = 2500.0
    rec["input_lens"] = [128] * 1024
    rec["errors"] = [""] * 1020 + ["timeout"] * 4
    rec["request_rate"] = float("inf")
    r = parse_bench_jsonl(json.dumps(rec))  # json writes Infinity, Python reads it back
    assert r.total_output_tokens == 261120 and r.total_input_tokens == 130560
    assert r.max_itl_ms == 2500.0
    assert r.num_prompts == 1024 and r.failed == 4
    assert r.request_rate is not None and math.isinf(r.request_rate)


def test_jsonl_and_summary_agree_on_shared_fields() -> None:
    j = parse_bench_jsonl(json.dumps(_record()), num_prompts=1024)
    s = parse_bench_summary(OLD_BLOCK, num_prompts=1024)
    for f in ("completed", "failed", "output_throughput", "total_throughput", "peak_output_throughput",
              "concurrency", "mean_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "duration_s"):
        assert getattr(j, f) == getattr(s, f), f


def test_jsonl_torn_last_line_is_an_error_not_an_old_run() -> None:
    text = json.dumps(_record()) + "\n" + '{"backend": "sglang", "compl'
    with pytest.raises(BenchParseError, match="line 2"):
        parse_bench_jsonl(text)


def test_jsonl_missing_required_key() -> None:
    rec = _record()
    del rec["output_throughput"]
    with pytest.raises(BenchParseError, match="output_throughput"):
        parse_bench_jsonl(json.dumps(rec))


def test_output_falls_back_to_summary() -> None:
    r = parse_bench_output("", REAL_BLOCK)
    assert r.source == "summary" and r.completed == 50
    r2 = parse_bench_output("not json\n", OLD_BLOCK)
    assert r2.source == "summary"
    with pytest.raises(BenchParseError, match=r"JSONL: .*summary: "):
        parse_bench_output(None, "nothing here")


def test_result_round_trips_json_with_inf_rate() -> None:
    r = parse_bench_summary(REAL_BLOCK)
    back = BenchResult.model_validate_json(r.model_dump_json())
    assert back == r
