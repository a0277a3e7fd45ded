"""bench_serving prints each release's own summary block and JSONL keys (0.5.12.post1 lacks P90/P95 rows)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import STANDIN, Server

ROWS_OLD = ["Mean E2E Latency (ms):", "Median E2E Latency (ms):", "P90 E2E Latency (ms):", "P99 E2E Latency (ms):",
            "Mean TTFT (ms):", "Median TTFT (ms):", "P99 TTFT (ms):", "Mean TPOT (ms):", "Median TPOT (ms):",
            "P99 TPOT (ms):", "Mean ITL (ms):", "Median ITL (ms):", "P95 ITL (ms):", "P99 ITL (ms):", "Max ITL (ms):"]
ROWS_NEW = [f"{stat} {metric} (ms):" for metric in ("E2E Latency", "TTFT", "TPOT", "ITL")
            for stat in ("Mean", "Median", "P90", "P95", "P99")] + ["Max ITL (ms):"]


@pytest.mark.parametrize(("version", "rows"), [("0.5.12.post1", ROWS_OLD), ("0.5.23", ROWS_NEW)])
def test_summary_rows_and_jsonl_keys_follow_the_release(start_server: Callable[..., Server], tmp_path: Path,
                                                        version: str, rows: list[str]) -> None:
    srv = start_server(None, "--tp", "8", start_s=0.2, version=version)
    assert srv.wait_status(200)[-1] == 200
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEPLOY_SIM", "SGLANG_SIM"))}
    env.update(PYTHONPATH=str(STANDIN), SGLANG_SIM_VERSION=version)
    out = tmp_path / "b.jsonl"
    res = subprocess.run([sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--host", "127.0.0.1",
                          "--port", str(srv.port), "--dataset-name", "random-ids", "--random-input-len", "16",
                          "--random-output-len", "16", "--random-range-ratio", "1.0", "--num-prompts", "8",
                          "--output-file", str(out), "--disable-tqdm"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    block = res.stdout.split("============ Serving Benchmark Result ============")[1]
    latency_rows = [line.split(":")[0] + ":" for line in block.splitlines() if "(ms):" in line]
    assert latency_rows == rows
    rec = json.loads(out.read_text().splitlines()[-1])
    assert ("p90_ttft_ms" in rec) == (version == "0.5.23") and ("p95_tpot_ms" in rec) == (version == "0.5.23")
    assert "p99_ttft_ms" in rec and "p95_itl_ms" in rec and "p90_e2e_latency_ms" in rec
