"""`deploy bench import`: bench_serving's printed result block (a terminal copy) or its JSONL, told apart by
content; anything else is refused with exit 2 and a message, never a traceback (issue 13 §4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.parsers.bench import BenchParseError, detect_bench_format, parse_bench_import

REPO = Path(__file__).resolve().parents[2]
PRINTED = REPO / "tests" / "fixtures" / "bench" / "serving-benchmark-result.txt"
RECORD = {"backend": "sglang", "dataset_name": "random-ids", "completed": 1020, "output_throughput": 4263.18,
          "duration": 61.25, "total_output_tokens": 261120, "mean_tpot_ms": 144.43}


def test_detect_format() -> None:
    assert detect_bench_format(PRINTED.read_text()) == "summary"
    assert detect_bench_format("\n" + json.dumps(RECORD) + "\n") == "jsonl"
    assert detect_bench_format("hello\nworld\n") is None
    assert detect_bench_format("") is None


def test_printed_block_from_a_terminal() -> None:
    (r,) = parse_bench_import(PRINTED.read_text())
    assert r.source == "summary" and r.completed == 50 and r.output_throughput == 86.21
    assert r.mean_tpot_ms == 11.44 and r.p99_itl_ms == 57.67 and r.max_concurrent_requests == 2
    assert r.num_prompts is None and r.failed is None  # the block does not say how many were sent


def test_printed_blocks_with_the_args_line_give_prompts_and_failures() -> None:
    block = PRINTED.read_text()
    text = ("benchmark_args=Namespace(backend='sglang', num_prompts=52, seed=1)\n#Input tokens: 204800\n" + block
            + "some log line\n" + block.replace("86.21", "90.00"))
    first, second = parse_bench_import(text)
    assert (first.num_prompts, first.failed) == (52, 2)
    assert second.output_throughput == 90.0 and second.num_prompts is None  # its own args line was not copied


def test_jsonl_counts_from_output_details_or_unknown() -> None:
    (plain,) = parse_bench_import(json.dumps(RECORD) + "\n")
    assert plain.completed == 1020 and plain.num_prompts is None and plain.failed is None
    details = {**RECORD, "input_lens": [128] * 1024, "errors": [""] * 1020 + ["timeout"] * 4}
    (det,) = parse_bench_import(json.dumps(RECORD) + "\n" + json.dumps(details) + "\n")[1:]
    assert det.num_prompts == 1024 and det.failed == 4


@pytest.mark.parametrize(("text", "needle"), [
    ("", "no bench_serving record"),
    ("Mean TPOT (ms): 11.4\n", "neither bench_serving JSONL"),
    ('{"completed": 3, "output_throughput": 1.0}\nnot json\n', "line 2 of the bench JSONL is not JSON"),
    ('{"completed": 3}\n', "no 'output_throughput'"),
    ("============ Serving Benchmark Result ============\nBackend: sglang\n=====\n", "no 'Successful requests:'"),
])
def test_refusals_say_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(BenchParseError, match=needle):
        parse_bench_import(text)


def deploy(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEPLOY_STATE_DIR": str(state), "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          cwd=state.parent, timeout=60, env=env)  # not the checkout: its ./inventory is the demo's


def test_cli_imports_a_printed_block_a_jsonl_and_refuses_garbage(tmp_path: Path) -> None:
    state = tmp_path / "state"
    res = deploy(state, "bench", "import", str(PRINTED), "--host", "laptop")
    assert res.returncode == 0, res.stderr
    assert "printed result block, 50 completed of unknown prompts, failed unknown, output 86.21 tok/s" in res.stdout

    jsonl = tmp_path / "run.jsonl"
    jsonl.write_text(json.dumps(RECORD) + "\n")
    res = deploy(state, "--json", "bench", "import", str(jsonl), "--host", "laptop")
    assert res.returncode == 0, res.stderr
    (run,) = json.loads(res.stdout)["imported"]
    assert run["bench"]["completed"] == 1020
    assert run["bench"]["num_prompts"] == "unknown" and run["bench"]["failed"] == "unknown"

    hist = json.loads(deploy(state, "--json", "history", "--bench", "--all-inventories").stdout)
    assert sorted(r["bench"]["output_throughput"] for r in hist["runs"]) == [86.21, 4263.18]

    garbage = tmp_path / "notes.txt"
    garbage.write_text("copied the wrong window\nMean TPOT (ms): 11.44\n")
    binary = tmp_path / "capture.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    for path, why in ((garbage, "neither bench_serving JSONL"), (binary, "not UTF-8 text"),
                      (tmp_path / "missing.txt", "cannot read")):
        res = deploy(state, "bench", "import", str(path), "--host", "laptop")
        assert res.returncode == 2, res.stderr
        assert why in res.stderr and "Traceback" not in res.stderr + res.stdout
        assert res.stderr.startswith("error: ") and "fix: " in res.stderr
    hist = json.loads(deploy(state, "--json", "history", "--bench", "--all-inventories").stdout)
    assert len(hist["runs"]) == 2  # nothing recorded by the refused imports
