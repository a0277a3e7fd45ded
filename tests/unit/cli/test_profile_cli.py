"""`deploy profile import` through click's CliRunner on the real H100 trace: the table, the verdict, --json, and a
bad file refused with exit 2 and no traceback."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from orchestrator.cli import cli
from tests.shared import EXAMPLE_INVENTORY

DECODE = (Path(__file__).resolve().parents[2] / "fixtures" / "profile"
          / "bystage-1796659222.7204502-TP-0-DECODE.trace.gpu.json.gz")


def deploy(tmp_path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={"DEPLOY_STATE_DIR": str(tmp_path), "COLUMNS": "200"})


def test_import_prints_the_breakdown_and_the_verdict(tmp_path: Path) -> None:
    res = deploy(tmp_path, "profile", "import", str(DECODE))
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "decode step time by kernel class, per rank on NVIDIA H100 80GB HBM3"
    assert lines[2].split() == ["0", "6", "2355", "0.0", "%", "0.8", "%", "0.6", "%", "0.7", "%", "1.6", "%", "96.2",
                                "%", "100.0", "%"]
    assert lines[3].startswith("verdict: host-bound: the GPU is idle 96 % of each decode step")
    assert "fused_moe_kernel" in res.output


def test_import_json(tmp_path: Path) -> None:
    res = deploy(tmp_path, "profile", "import", str(DECODE), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["ok"] is True and doc["verdict"]["code"] == "host-bound"
    (rank,) = doc["breakdown"]["ranks"]
    assert rank["steps"] == 6 and abs(sum(rank["shares"].values()) - 1) < 0.05
    assert rank["per_step_us"][0] == 6337.2


def test_a_file_that_is_no_trace_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2")
    res = deploy(tmp_path, "profile", "import", str(bad), "--json")
    assert res.exit_code == 2
    doc = json.loads(res.output)
    assert doc["ok"] is False and "x.json is not a chrome trace" in doc["what"]
    assert "Traceback" not in res.output


def test_bench_profile_takes_one_host_and_is_refused_for_a_fleet_before_any_connection(tmp_path: Path) -> None:
    res = deploy(tmp_path, "--inventory", str(EXAMPLE_INVENTORY), "bench", "host", "a", "b", "--profile", "4")
    assert res.exit_code == 2
    assert "--profile takes one host's bench" in res.output and "Traceback" not in res.output
    res = deploy(tmp_path, "bench", "host", "a", "--profile", "0")
    assert res.exit_code == 2 and "0 is not in the range 1<=x<=64" in res.output


def test_stage_extend_breaks_down_the_prefill_step(tmp_path: Path) -> None:
    extend = DECODE.with_name(DECODE.name.replace("DECODE", "EXTEND"))
    res = deploy(tmp_path, "profile", "import", str(extend), "--stage", "EXTEND")
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0].startswith("extend step time by kernel class")
    assert "of each extend step" in res.output
    refused = deploy(tmp_path, "profile", "import", str(extend))
    assert refused.exit_code == 2 and "(it has EXTEND steps)" in refused.output
