"""The release documents (orchestrator/releases/documents.py) read what earlier versions wrote and write the same
bytes the hand-built dicts did."""

from __future__ import annotations

import json

from orchestrator.releases.documents import ReleaseLine, ReleaseMeta, ReleaseVerdict, StoredFlags


def test_meta_keeps_unknown_fields_and_writes_what_it_read() -> None:
    old = {"id": "20261201T101010-ab12cd34", "source": "roll", "previous": None, "command": "deploy up",
           "stack": {"sha": "5f0c", "venv": "/root/ml-env", "sglang_version": "0.5.12.post1",
                     "requirement": "sglang==0.5.12.post1", "later": 1},
           "flag_diff": [["max-running-requests", 16, 128]], "boot": {"ledger": [1, 2]}}
    meta = ReleaseMeta.model_validate(old)
    assert meta.stack is not None and meta.stack.venv == "/root/ml-env" and meta.tune is None
    assert meta.to_json() == json.dumps(old, sort_keys=True) + "\n"


def test_a_verdict_is_written_with_the_fields_it_was_given() -> None:
    verdict = ReleaseVerdict(verdict="kept", candidate=None, preset=None)
    verdict.reason = "bench skipped"
    assert verdict.kept and verdict.to_json() == json.dumps(
        {"verdict": "kept", "candidate": None, "preset": None, "reason": "bench skipped"}, sort_keys=True) + "\n"
    assert ReleaseVerdict.from_text('{"verdict": "rolled-back", "at": 1764583810.0}') is not None
    assert ReleaseVerdict.from_text("[]") is None and ReleaseVerdict.from_text("") is None


def test_history_lines_type_each_document() -> None:
    line = ReleaseLine.of({"id": "R1", "meta": None, "verdict": {"verdict": "kept"}, "flags": {"a": 1}})
    assert line is not None and line.kept and line.flags == StoredFlags({"a": 1})
    assert line.document() == {"id": "R1", "meta": None, "verdict": {"verdict": "kept"}, "flags": {"a": 1}}


def test_a_verdicts_figures_are_typed_and_written_as_read() -> None:
    """The bench figures and telemetry of a verdict read through typed fields; every other key comes back as it
    was (a figure this version does not type, a GPU's other readings)."""
    old = {"verdict": "kept", "preset": "quick",
           "candidate": {"output_throughput": 1347.1, "p99_ttft_ms": 812.5, "completed": 64, "later": "x"},
           "baseline": {"output_throughput": 1300.0, "p99_tpot_ms": None},
           "telemetry": {"gpus": [{"index": 0, "mean_power_w": 301.5, "max_temp_c": 70}], "tokens_per_s_per_w": 4.4}}
    verdict = ReleaseVerdict.model_validate(old)
    assert verdict.candidate is not None and verdict.candidate.output_throughput == 1347.1
    assert verdict.candidate.p99_ttft_ms == 812.5 and verdict.baseline is not None
    assert verdict.telemetry is not None and verdict.telemetry.total_power_w == 301.5
    assert verdict.telemetry.j_per_output_token is None and verdict.measured_preset == "quick"
    assert verdict.to_json() == json.dumps(old, sort_keys=True) + "\n"
