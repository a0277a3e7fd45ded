"""`deploy bench import`: bench_serving's printed result block (a terminal copy) or its JSONL, told apart by
content; anything else is refused with exit 2 and a message, never a traceback (issue 13 §4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.parsers.bench import (
    BenchParseError,
    BenchValueError,
    detect_bench_format,
    parse_bench_import,
    parse_bench_output,
)

REPO = Path(__file__).resolve().parents[3]
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


# Issue 38 (low): negative throughput and counts were filed; NaN, 1e309 or a string were "no 'output_throughput'".
@pytest.mark.parametrize(("field", "raw", "shown", "allowed"), [
    ("output_throughput", "-4263.18", "-4263.18", "a finite number ≥ 0"),
    ("completed", "-3", "-3", "a whole number ≥ 0"),
    ("completed", "10.5", "10.5", "a whole number ≥ 0"),
    ("failed", "-1", "-1", "a whole number ≥ 0"),
    ("mean_tpot_ms", "-0.5", "-0.5", "a finite number ≥ 0"),
    ("output_throughput", "NaN", "NaN", "a finite number ≥ 0"),
    ("completed", "NaN", "NaN", "a whole number ≥ 0"),
    ("output_throughput", "1e309", "infinite", "a finite number ≥ 0"),
    ("total_output_tokens", "Infinity", "infinite", "a whole number ≥ 0"),
    ("output_throughput", '"fast"', "'fast'", "a finite number ≥ 0"),
    ("completed", "true", "true", "a whole number ≥ 0"),
    ("request_rate", "0", "0", "a number above 0, or inf"),
])
def test_an_imported_record_with_a_figure_no_run_measures_is_refused(field: str, raw: str, shown: str,
                                                                     allowed: str) -> None:
    line = json.dumps(RECORD)[:-1] + f', "{field}": {raw}}}'  # the raw JSON text, as a file could hold it
    with pytest.raises(BenchValueError) as err:
        parse_bench_import(json.dumps(RECORD) + "\n" + line + "\n")
    assert f"line 2: {field!r} is {shown}" in str(err.value) and allowed in str(err.value), str(err.value)


def test_a_printed_block_with_a_bad_figure_is_refused_and_not_set_is_no_figure() -> None:
    block = PRINTED.read_text()
    with pytest.raises(BenchValueError, match=r"'Output token throughput \(tok/s\)' is -86.21; it must be a "):
        parse_bench_import(block.replace("86.21 ", "-86.21"))
    with pytest.raises(BenchValueError, match=r"'Successful requests' is 'many'; it must be a whole number"):
        parse_bench_import(block.replace("50        ", "many      ", 1))
    (r,) = parse_bench_import(block.replace("concurrency:                 1 ", "concurrency:                 not set"))
    assert r.max_concurrency is None and r.request_rate == float("inf")  # `inf` is a request rate, `not set` none


def test_counts_that_contradict_each_other_are_refused() -> None:
    details = {**RECORD, "completed": 5, "input_lens": [128, 128]}  # two requests sent, five completed
    with pytest.raises(BenchValueError, match="'completed' is 5, more than the 2 requests sent"):
        parse_bench_import(json.dumps(details))


def test_our_own_run_drops_an_odd_optional_figure_but_names_a_bad_required_one() -> None:
    """A run of ours is lenient about optional figures (a new sglang version's oddity does not lose the run)."""
    r = parse_bench_output(json.dumps({**RECORD, "mean_tpot_ms": float("nan"), "p99_ttft_ms": -1}), None)
    assert r.mean_tpot_ms is None and r.p99_ttft_ms is None and r.output_throughput == 4263.18
    with pytest.raises(BenchParseError, match="'output_throughput' is NaN"):
        parse_bench_output(json.dumps({**RECORD, "output_throughput": float("nan")}), None)


def test_cli_refuses_a_bad_figure_with_exit_2_and_records_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    bad = tmp_path / "edited.jsonl"
    bad.write_text(json.dumps(RECORD) + "\n" + json.dumps({**RECORD, "output_throughput": -1.0}) + "\n")
    res = deploy(state, "--json", "bench", "import", str(bad), "--host", "laptop")
    doc = json.loads(res.stdout)
    assert res.returncode == 2 and doc["error"] == "config-error", res.stdout + res.stderr
    assert "line 2: 'output_throughput' is -1.0; it must be a finite number ≥ 0" in doc["what"], doc
    assert "nothing was recorded" in doc["fix"]
    hist = json.loads(deploy(state, "--json", "history", "--bench", "--all-inventories").stdout)
    assert hist["runs"] == []  # not even the good first line: the file is refused whole
