"""bench_serving stand-in: real requests, the summary block, JSONL, and the flag-dependent perf/power model."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from .conftest import STANDIN, Server
from .standins import CtRoot, ct_smi, make_ct_root, with_userspace

LABELS = ["Backend:", "Traffic request rate:", "Max request concurrency:", "Successful requests:",
          "Benchmark duration (s):", "Total input tokens:", "Total generated tokens:",
          "Output token throughput (tok/s):", "Peak output token throughput (tok/s):", "Concurrency:",
          "Mean TPOT (ms):", "P99 ITL (ms):"]
OUTPUT_LEN = 256


def bench(ct: CtRoot | None, port: int, out: Path, *extra: str,
          output_len: int = 48) -> subprocess.CompletedProcess[str]:
    env = ct.env() if ct else {}
    env.update(PYTHONPATH=str(STANDIN), PATH="/usr/bin:/bin")
    argv = [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--host", "127.0.0.1", "--port",
            str(port), "--model", "glm-5", "--tokenizer", "/models/GLM-5-NVFP4", "--dataset-name", "random-ids",
            "--random-input-len", "32", "--random-output-len", str(output_len), "--random-range-ratio", "1.0",
            "--num-prompts", "48", "--output-file", str(out), "--disable-tqdm", *extra]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_decode_steps_change_throughput_and_power(start_server: Callable[..., Server], tmp_path: Path) -> None:
    # Model time at 1x the clock: at the default 4x, a CPU-starved client's wall-clock overhead (a busy 2-core CI
    # machine, the power sampler's subprocesses) counts four times over and can hide the decode-steps gain.
    ct = with_userspace(make_ct_root(tmp_path / "ct", time_scale=1.0))
    results = {}
    for steps in ("1", "8"):
        srv = start_server(ct, "--tp", "8", "--num-continuous-decode-steps", steps, start_s=0.2)
        assert srv.wait_status(200)[-1] == 200
        idle = ct_smi(ct, "--query-gpu=power.draw", "--format=csv,noheader,nounits")
        samples: list[str] = []
        done = threading.Event()

        def sample(samples: list[str] = samples, done: threading.Event = done) -> None:
            # Sample for the whole bench: a loaded machine starts the client late, so one timed sample can miss it.
            while not done.wait(0.2):
                samples.append(ct_smi(ct, "--query-gpu=power.draw", "--format=csv,noheader,nounits").stdout)

        t = threading.Thread(target=sample)
        t.start()
        # Long outputs: a request that reaches the server just after a round began waits that whole round (as on
        # the real server), which is 8x longer with 8 steps; over 48 tokens that wait alone cancels the gain.
        r = bench(ct, srv.port, tmp_path / f"b{steps}.jsonl", output_len=OUTPUT_LEN)
        done.set()
        t.join()
        assert r.returncode == 0, r.stderr
        for label in LABELS:
            assert any(line.startswith(label) for line in r.stdout.splitlines()), label
        assert "============ Serving Benchmark Result ============" in r.stdout
        assert "Warmup completed with 1 sequences. Starting main benchmark run..." in r.stdout
        assert "#Input tokens: 1536" in r.stdout
        rec = json.loads((tmp_path / f"b{steps}.jsonl").read_text().splitlines()[-1])
        assert rec["completed"] == 48 and rec["total_output_tokens"] == 48 * OUTPUT_LEN
        assert rec["server_info"]["num_continuous_decode_steps"] == int(steps)
        for key in ("output_throughput", "max_output_tokens_per_s", "max_concurrent_requests", "concurrency",
                    "mean_tpot_ms", "p99_itl_ms", "mean_e2e_latency_ms", "total_throughput"):
            assert key in rec
        results[steps] = rec["output_throughput"]
        busy = max(float(x) for sample_text in samples for x in sample_text.split())
        assert busy > max(float(x) for x in idle.stdout.split()) + 20
        srv.proc.terminate()
        srv.proc.wait(10)  # the real watchdog looks at SIGTERM every 5 s
    assert results["8"] > results["1"] * 1.05, results


def test_failed_requests_are_counted(tmp_path: Path) -> None:
    from .conftest import free_port

    r = bench(None, free_port(), tmp_path / "x.jsonl", "--warmup-requests", "0", "--num-prompts", "4")
    assert r.returncode == 0
    rec = json.loads((tmp_path / "x.jsonl").read_text())
    assert rec["completed"] == 0


def test_random_dataset_needs_download(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(STANDIN), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-m", "sglang.bench_serving", "--dataset-name", "random", "--port", "1"],
                       env=env, capture_output=True, text=True, timeout=20)
    assert r.returncode == 1 and "ShareGPT_V3_unfiltered_cleaned_split.json" in r.stdout
    assert "ConnectionError" in r.stderr
    r = subprocess.run([sys.executable, "-m", "sglang.bench_serving", "--bogus"], env=env, capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 2 and "unrecognized arguments: --bogus" in r.stderr
