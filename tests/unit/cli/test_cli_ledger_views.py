"""`history --bench` scoped to the inventory, `compare` refusing different benchmarks, `bench --help` presets.

Through click's CliRunner on a real SQLite ledger in a temporary state dir; no host is needed.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from orchestrator.cli import cli
from orchestrator.errors import ConfigError
from orchestrator.ledger.compare import comparability
from orchestrator.ledger.sqlite import Ledger, RunRecord
from orchestrator.parsers.bench import BenchResult
from orchestrator.parsers.gpu_query import Sample
from orchestrator.telemetry.summary import TelemetrySummary, summarize
from tests.shared import EXAMPLE_INVENTORY

REPO = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 11, 30, 3, 0, 0)


def bench(out: float, inp: int = 64, outp: int = 64, prompts: int = 64, conc: int | None = None) -> BenchResult:
    return BenchResult(source="jsonl", completed=prompts, num_prompts=prompts, failed=0, output_throughput=out,
                       mean_tpot_ms=35.0, random_input_len=inp, random_output_len=outp, random_range_ratio=1.0,
                       dataset_name="random-ids", max_concurrency=conc)


def tel(gpus: int, limit: float) -> TelemetrySummary:
    samples = [Sample(ts=T0 + timedelta(seconds=i), gpu=g, values={"power.draw": 200.0, "power.limit": limit})
               for g in range(gpus) for i in range(3)]
    return summarize(samples, output_tokens=1000, output_throughput=100.0)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def ledger(state: Path) -> Ledger:
    return Ledger(state / "ledger.sqlite")


def deploy(state: Path, *args: str, inventory: Path = EXAMPLE_INVENTORY) -> Result:
    return CliRunner().invoke(cli, ["--inventory", str(inventory), *args],
                              env={"DEPLOY_STATE_DIR": str(state), "COLUMNS": "80"})


def add(ledger: Ledger, i: int, *, host: str = "pve-gpu-1", preset: str | None = "quick",
        b: BenchResult | None = None, telemetry: TelemetrySummary | None = None) -> RunRecord:
    return ledger.record_run(host=host, bench=b or bench(1000.0 + 100 * i), preset=preset,
                             started_at=T0 + timedelta(seconds=i), run_id=f"r-20261130-0300{i:02d}-abcd",
                             telemetry=telemetry)


# ---------------------------------------------------------------------------------------------- history --bench
def test_history_bench_shows_the_inventory_hosts_and_says_what_it_hides(state: Path, ledger: Ledger) -> None:
    mine, theirs = add(ledger, 1), add(ledger, 2, host="lab-box-9")
    res = deploy(state, "history", "--bench")
    assert res.exit_code == 0, res.output
    assert mine.id in res.output and theirs.id not in res.output
    assert "bench runs of pve-gpu-1 (the hosts of inventory" in res.output
    assert "1 run(s) of 1 other host(s) not shown (lab-box-9)" in res.output
    assert "--all-inventories" in res.output

    every = deploy(state, "history", "--bench", "--all-inventories")
    assert every.exit_code == 0 and mine.id in every.output and theirs.id in every.output
    assert "bench runs of every host" in every.output and "not shown" not in every.output

    js = json.loads(deploy(state, "--json", "history", "--bench").output)
    assert [r["id"] for r in js["runs"]] == [mine.id] and js["hosts"] == ["pve-gpu-1"] and js["hidden_runs"] == 1
    js = json.loads(deploy(state, "--json", "history", "--bench", "--all-inventories").output)
    assert {r["id"] for r in js["runs"]} == {mine.id, theirs.id} and js["hosts"] is None


def test_history_bench_of_a_host_outside_the_inventory_needs_all_inventories(state: Path, ledger: Ledger) -> None:
    theirs = add(ledger, 2, host="lab-box-9")
    res = deploy(state, "history", "--bench", "host", "lab-box-9")
    assert res.exit_code == 2 and "no host 'lab-box-9'" in res.output
    res = deploy(state, "history", "--bench", "host", "lab-box-9", "--all-inventories")
    assert res.exit_code == 0 and theirs.id in res.output and "bench runs of host lab-box-9" in res.output


def test_all_inventories_is_refused_without_bench(state: Path) -> None:
    res = deploy(state, "history", "--all-inventories")
    assert res.exit_code == 2 and "--all-inventories applies to the local bench ledger" in res.output


def test_missing_inventory_points_at_all_inventories(state: Path, ledger: Ledger, tmp_path: Path) -> None:
    add(ledger, 1)
    res = deploy(state, "history", "--bench", inventory=tmp_path / "nowhere")
    assert res.exit_code == 2 and "does not exist" in res.output and "--all-inventories" in res.output


# ------------------------------------------------------------------------------------------------------ compare
def test_compare_refuses_runs_of_different_presets(state: Path, ledger: Ledger) -> None:
    a = add(ledger, 1, preset="quick")
    b = add(ledger, 2, preset="seed-1024x256", b=bench(3571.0, 128, 256, 1024))
    res = deploy(state, "compare", a.id, b.id)
    assert res.exit_code == 2
    assert "'quick'" in res.output and "'seed-1024x256'" in res.output and "--force" in res.output
    assert "better" not in res.output
    js = json.loads(deploy(state, "--json", "compare", a.id, b.id).output)
    assert js["ok"] is False and js["error"] == "config-error" and "different presets" in js["what"]


def test_compare_force_prints_a_loud_warning(state: Path, ledger: Ledger) -> None:
    a = add(ledger, 1, preset="quick")
    b = add(ledger, 2, preset="seed-1024x256", b=bench(3927.0, 128, 256, 1024))  # 1100 → 3927 tok/s
    res = deploy(state, "compare", a.id, b.id, "--force")
    assert res.exit_code == 0, res.output
    assert res.output.startswith("WARNING: NOT THE SAME BENCHMARK")
    assert "+257.0" in res.output  # the deltas are there, under the warning
    js = json.loads(deploy(state, "--json", "compare", a.id, b.id, "--force").output)
    assert js["ok"] is True and js["comparable"] is False
    assert "different presets" in js["warning"] and "quick" in js["warning"] and "seed-1024x256" in js["warning"]


def test_compare_same_preset_is_quiet_and_other_host_or_gpus_warn(state: Path, ledger: Ledger) -> None:
    a, b = add(ledger, 1), add(ledger, 2)
    js = json.loads(deploy(state, "--json", "compare", a.id, b.id).output)
    assert js["ok"] and js["comparable"] and js["warning"] is None and js["warnings"] == []
    c = add(ledger, 3, host="lab-box-9", telemetry=tel(4, 350.0))
    d = add(ledger, 4, telemetry=tel(8, 600.0))
    res = deploy(state, "--json", "compare", d.id, c.id)
    js = json.loads(res.output)
    assert res.exit_code == 0 and js["comparable"]
    assert any("different hosts" in w and "lab-box-9" in w for w in js["warnings"])
    assert any("8 GPUs at 600 W vs 4 GPUs at 350 W" in w for w in js["warnings"])
    text = deploy(state, "compare", d.id, c.id).output
    assert "warning: different hosts" in text and "warning: different GPUs" in text


def test_comparability_rules() -> None:
    def rec(i: int, preset: str | None, b: BenchResult) -> RunRecord:
        return RunRecord(id=f"r-{i}", host="h", preset=preset, started_at=T0, bench=b)

    same = comparability(rec(1, "quick", bench(1.0)), rec(2, "quick", bench(2.0)))
    assert same.comparable and same.warnings == ()
    load = comparability(rec(1, "quick", bench(1.0, conc=16)), rec(2, "quick", bench(2.0, conc=64)))
    assert load.comparable and "max concurrency 16 vs 64" in load.warnings[0]
    # an import without --preset: the token lengths still decide
    imported = comparability(rec(1, None, bench(1.0, 128, 256)), rec(2, "quick", bench(2.0)))
    assert not imported.comparable and "input length 128 vs 64" in imported.refusals[0]
    alike = comparability(rec(1, None, bench(1.0)), rec(2, "quick", bench(2.0)))
    assert alike.comparable and "no preset recorded for r-1" in alike.warnings[0]


def test_compare_prefix_is_looked_up_in_the_inventory_hosts(state: Path, ledger: Ledger) -> None:
    add(ledger, 1)
    theirs = add(ledger, 2, host="lab-box-9")
    res = deploy(state, "compare", "r-20261130-030001", "r-20261130-030002")
    assert res.exit_code == 2 and "no run 'r-20261130-030002'" in res.output
    assert "deploy history --bench" in res.output and "--all-inventories" in res.output
    res = deploy(state, "--json", "compare", "r-20261130-030001", "r-20261130-030002", "--all-inventories")
    assert res.exit_code == 0 and json.loads(res.output)["b"] == theirs.id
    res = deploy(state, "--json", "compare", "r-20261130-030001-abcd", theirs.id)  # full ids: found anywhere
    assert res.exit_code == 0


def test_missing_run_hint_names_history_bench(ledger: Ledger) -> None:
    with pytest.raises(ConfigError) as err:
        ledger.get_run("r-nope")
    assert "deploy history --bench" in err.value.fix


# ------------------------------------------------------------------------------------------------- bench --help
def test_bench_help_lists_the_inventory_presets(tmp_path: Path, state: Path) -> None:
    inv = tmp_path / "inventory"
    shutil.copytree(EXAMPLE_INVENTORY, inv)
    presets = yaml.safe_load((inv / "presets.yaml").read_text())
    presets["presets"]["long-ctx"] = {"random_input_len": 8192, "random_output_len": 512, "random_range_ratio": 1.0,
                                      "num_prompts": 200, "request_rate": 4, "max_concurrency": 32}
    (inv / "presets.yaml").write_text(yaml.safe_dump(presets))
    res = CliRunner().invoke(cli, ["--inventory", str(inv), "bench", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    section = res.output.split(f"Presets (inventory {inv.resolve()}):")[1]
    lines: dict[str, str] = {}
    for ln in section.splitlines():  # "  name  description", wrapped lines indented further
        if ln.startswith("  ") and not ln.startswith("   "):
            name = ln.split()[0]
            lines[name] = ln
        elif ln.strip():
            lines[name] += " " + ln.strip()
    assert set(lines) == set(presets["presets"])
    assert "8192 in / 512 out tokens, 200 prompts, rate 4/s, max concurrency 32, random-ids" in lines["long-ctx"]
    assert "(default of profile glm5-nvfp4)" in lines["seed-1024x256"]


def test_bench_help_falls_back_to_the_shipped_presets(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["--inventory", str(tmp_path / "nowhere"), "bench", "--help"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0
    assert "Presets shipped with deploy" in res.output and "does not exist" in res.output
    shipped = yaml.safe_load((EXAMPLE_INVENTORY / "presets.yaml").read_text())["presets"]
    for name in shipped:
        assert f"\n  {name} " in res.output


# ------------------------------------------------------------------- compare: directions, release and flags (25.18)
def drawing(watts: float, out_tps: float) -> TelemetrySummary:
    samples = [Sample(ts=T0 + timedelta(seconds=i), gpu=g, values={"power.draw": watts, "power.limit": 700.0})
               for g in range(2) for i in range(3)]
    return summarize(samples, duration_s=10.0, output_tokens=int(out_tps * 10), output_throughput=out_tps)


def loaded(out: float, conc: float) -> BenchResult:
    return BenchResult(source="jsonl", completed=64, num_prompts=64, failed=0, output_throughput=out,
                       mean_tpot_ms=35.0, mean_ttft_ms=100.0 * conc / 30, concurrency=conc, random_input_len=64,
                       random_output_len=64, random_range_ratio=1.0, dataset_name="random-ids")


def test_compare_calls_concurrency_and_power_neither_better_nor_worse(state: Path, ledger: Ledger) -> None:
    a = ledger.record_run(host="pve-gpu-1", bench=loaded(1000.0, 30.0), preset="quick", run_id="r-20261130-030001-aaaa",
                          started_at=T0, release_id="20261130T030547-f040fd49", telemetry=drawing(200.0, 1000.0),
                          flags={"tp": 2, "mem-fraction-static": 0.85, "enable-metrics": True})
    b = ledger.record_run(host="pve-gpu-1", bench=loaded(1200.0, 60.0), preset="quick", run_id="r-20261130-040001-bbbb",
                          started_at=T0 + timedelta(hours=1), release_id="20261130T040112-9e1d2c3b",
                          telemetry=drawing(300.0, 1200.0),
                          flags={"tp": 2, "mem-fraction-static": 0.9, "cuda-graph-max-bs": 64})
    rows = {r.metric: r for r in ledger.compare(a, b, noise_pct=5.0)}
    for neutral in ("concurrency (mean)", "total mean power (W)"):
        assert rows[neutral].beyond_noise and rows[neutral].better is None, neutral
    assert rows["output throughput (tok/s)"].better is True
    assert rows["mean TTFT (ms)"].better is False  # latencies: lower is better
    per_w, j = rows["tokens/s per W"], rows["J per output token"]
    assert per_w.beyond_noise and per_w.better == (per_w.delta_pct > 0)  # type: ignore[operator]
    assert j.beyond_noise and j.better == (j.delta_pct < 0)  # type: ignore[operator]

    text = deploy(state, "compare", a.id, b.id).output
    lines = text.splitlines()
    conc = next(ln for ln in lines if ln.startswith("concurrency (mean)"))
    power = next(ln for ln in lines if ln.startswith("total mean power (W)"))
    assert "+100.0" in conc and "better" not in conc and "worse" not in conc
    assert "+50.0" in power and "better" not in power and "worse" not in power
    assert "better" in next(ln for ln in lines if ln.startswith("output throughput (tok/s)"))
    assert (f"A: {a.id} on pve-gpu-1, release 20261130T030547-f040fd49, preset quick, bench run at "
            "2026-11-30 03:00:00") in lines
    assert "   flags: enable-metrics=true mem-fraction-static=0.85 tp=2" in lines
    assert any(ln.startswith(f"B: {b.id} on pve-gpu-1, release 20261130T040112-9e1d2c3b,") for ln in lines)
    assert "   flags: cuda-graph-max-bs=64 mem-fraction-static=0.9 tp=2" in lines
    assert ("flag changes A → B: +cuda-graph-max-bs=64, -enable-metrics, mem-fraction-static: 0.85 → 0.9"
            in lines)
    js = json.loads(deploy(state, "--json", "compare", a.id, b.id).output)
    assert js["runs"]["a"]["release_id"] == "20261130T030547-f040fd49" and js["runs"]["b"]["flags"]["tp"] == 2
    assert "mem-fraction-static: 0.85 → 0.9" in js["flag_changes"]
