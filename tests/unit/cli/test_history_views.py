"""`history` never puts figures of two presets side by side unlabelled, and says what a sweep row swept (issue 25
item 9): the releases table has a preset column, a sweep run shows its point, `history group` names the current
release's verdict, flag changes and figure."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestrator.cli.bench_cmd import ledger_table
from orchestrator.cli.roll_cmd import _power, _preset, _throughput
from orchestrator.commands.history import BenchRuns, ReleaseHistory
from orchestrator.ledger.sqlite import RunRecord
from orchestrator.parsers.bench import BenchResult
from orchestrator.releases.documents import ReleaseLine, ReleaseVerdict
from orchestrator.ui.tables import plain_lines

BENCH = BenchResult(source="jsonl", completed=64, num_prompts=64, failed=0, output_throughput=1347.1,
                    total_throughput=2694.2, mean_tpot_ms=35.1, concurrency=61.2)


def test_a_sweep_row_shows_the_point_it_measured() -> None:
    rows = [RunRecord(id="r-20261201-120000-ab01", host="sim-70", preset="quick", release_id="R1",
                      started_at=datetime(2026, 12, 1, 12), bench=BENCH, source="sweep",
                      label="max-concurrency=256"),
            RunRecord(id="r-20261201-120100-ab02", host="sim-70", preset="quick", release_id="R1",
                      started_at=datetime(2026, 12, 1, 12, 1), bench=BENCH, source="bench")]
    lines = plain_lines(ledger_table(rows, "runs"))
    assert "sweep max-concurrency=256" in lines[2]
    assert lines[3].split()[2] == "bench"


def test_the_releases_table_names_each_figures_preset() -> None:
    def preset(data: dict[str, Any]) -> str:
        return _preset(ReleaseVerdict.model_validate(data))

    assert preset({"verdict": "kept", "preset": "quick", "candidate": {"output_throughput": 5086.9}}) == "quick"
    assert preset({"verdict": "kept", "candidate": {"output_throughput": 1.0}}) == "?"  # older verdicts
    assert preset({"verdict": "kept", "reason": "bench skipped"}) == "-"  # no figure, no preset
    assert preset({"verdict": "kept", "candidate": {}}) == "-"
    assert _preset(None) == "-"


def test_the_releases_table_reads_the_figures_typed() -> None:
    """Throughput and GPU power from verdict.json as its models read them; a figure of another shape is "-"."""
    verdict = ReleaseVerdict.model_validate({
        "verdict": "kept", "preset": "quick", "candidate": {"output_throughput": 5086.94, "completed": 64},
        "telemetry": {"gpus": [{"index": 0, "mean_power_w": 301.2}, {"index": 1, "mean_power_w": 299.0},
                               {"index": 2}]}})
    assert (_throughput(verdict), _power(verdict)) == ("5086.9", "600")
    assert verdict.document()["candidate"] == {"output_throughput": 5086.94, "completed": 64}  # kept as it came
    assert (_throughput(None), _power(ReleaseVerdict(verdict="kept"))) == ("-", "-")


def test_history_group_line_says_what_the_current_release_is() -> None:
    history = ReleaseHistory(host="sim-70", current="R2", releases=[ReleaseLine.model_validate(r) for r in [
        {"id": "R1", "meta": {"source": "up"}, "verdict": {"verdict": "kept"}},
        {"id": "R2", "meta": {"source": "roll", "flag_diff": [["max-running-requests", 16, 128]]},
         "verdict": {"verdict": "kept", "preset": "quick", "candidate": {"output_throughput": 5086.9}}}]])
    assert history.detail() == ("current R2 (kept, roll: max-running-requests: 16→128, 5086.9 tok/s "
                                "(quick)), 2 release(s)")
    assert ReleaseHistory(host="sim-70").detail() == "current none, 0 release(s)"
    run = RunRecord(id="r-20261201-120000-ab01", host="sim-70", preset="quick", started_at=datetime(2026, 12, 1, 12))
    assert BenchRuns(runs=[run, run]).detail() == "2 bench run(s)"
