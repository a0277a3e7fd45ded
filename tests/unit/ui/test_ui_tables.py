"""Tables never cut a value: 80 columns without a TTY (a pipe, CI) used to show `r-20…` and `1…`."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

from rich.console import Console

from orchestrator.bench.report import SweepPoint, sweep_table
from orchestrator.cli.bench_cmd import ledger_table, table_spec
from orchestrator.ledger.sqlite import Ledger, RunRecord
from orchestrator.parsers.bench import BenchResult
from orchestrator.ui.tables import fit_widths, plain_lines, print_table, spec
from tests.shared import EXAMPLE_INVENTORY

REPO = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 11, 30, 3, 0, 0)
RELEASE = "20261130T030547-f040fd49"


def bench(out: float = 1384.69) -> BenchResult:
    return BenchResult(source="jsonl", completed=64, num_prompts=64, failed=0, output_throughput=out,
                       total_throughput=out * 2, mean_tpot_ms=35.11, concurrency=61.2, random_input_len=64,
                       random_output_len=64, random_range_ratio=1.0, dataset_name="random-ids")


def record(i: int, host: str = "pve-gpu-1") -> RunRecord:
    return RunRecord(id=f"r-20261130-0300{i:02d}-ab{i:02d}", host=host, preset="seed-1024x256",
                     release_id=RELEASE, started_at=T0 + timedelta(seconds=i), bench=bench(1000.0 + i))


def render(t: object, *, width: int, terminal: bool) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=terminal, color_system=None, highlight=False,
                      soft_wrap=True)
    print_table(console, t)  # type: ignore[arg-type]
    return buf.getvalue()


def test_fit_widths_gives_every_column_its_longest_word_or_refuses() -> None:
    assert fit_widths([22, 5], [22, 40], 30) == [22, 8]  # the id whole, the prose takes the rest
    assert fit_widths([22, 5, 3], [22, 40, 3], 40) == [22, 15, 3]  # a short column gets its natural width first
    assert fit_widths([22, 24], [22, 24], 45) is None  # not even the ids fit: no table that would cut them


def test_plain_layout_keeps_every_cell_whole_and_aligned() -> None:
    t = ledger_table([record(1), record(2, "other-box")], "bench runs")
    lines = plain_lines(t)
    assert lines[0] == "bench runs"
    assert lines[1].split() == ["run", "host", "source", "preset", "release", "out", "tok/s", "TPOT", "ms", "conc.",
                                "W/GPU", "tok/J"]
    assert lines[2].split()[:5] == ["r-20261130-030002-ab02", "other-box", "bench", "seed-1024x256", RELEASE] \
        or lines[2].split()[:5] == ["r-20261130-030001-ab01", "pve-gpu-1", "bench", "seed-1024x256", RELEASE]
    # numbers are right-aligned: the figure columns end at the same place on every line
    ends = {line.index("35.11") + len("35.11") for line in lines[2:]}
    assert len(ends) == 1


def test_terminal_table_at_80_columns_never_cuts_an_id() -> None:
    t = ledger_table([record(1), record(2)], "bench runs")
    for width, terminal in ((80, False), (80, True), (120, True), (40, True)):
        out = render(t, width=width, terminal=terminal)
        assert "…" not in out, (width, terminal, out)
        for rid in ("r-20261130-030001-ab01", "r-20261130-030002-ab02", RELEASE):
            assert rid in out, (width, terminal, out)
    wide = render(t, width=200, terminal=True)
    assert "┃" in wide and "r-20261130-030001-ab01" in wide  # a roomy terminal gets the boxed table


def test_prose_wraps_between_words_in_a_boxed_table() -> None:
    reason = "throughput gate: regressed: mean TPOT (ms) 37.24 vs baseline 35.11 (+6.1 %, noise ±5 %)"
    t = spec("releases", ["release", "reason"], [(RELEASE, reason)])
    out = render(t, width=80, terminal=True)
    assert "┃" in out and RELEASE in out and "…" not in out
    cells = [line.split("│")[2].strip() for line in out.splitlines() if line.startswith("│")]
    assert len(cells) == 2 and " ".join(cells) == reason  # two lines, split at a space


def test_sweep_table_at_80_columns_shows_every_figure() -> None:
    pts = [SweepPoint(value=v, bench=bench(1590.7 + v)) for v in (16, 1024)]
    data = sweep_table(pts)
    out = render(table_spec(data, "sweep over max-concurrency"), width=80, terminal=False)
    assert "…" not in out
    for row in data.rows:
        line = next(ln for ln in out.splitlines() if ln.split()[:1] == [row[0]])
        assert line.split() == [c for c in row]  # one row per line, every cell whole


def test_history_bench_piped_at_80_columns(tmp_path: Path) -> None:
    """The real command, as a subprocess with a pipe for stdout and COLUMNS=80."""
    led = Ledger(tmp_path / "state" / "ledger.sqlite")
    ids = [led.record_run(host="pve-gpu-1", bench=bench(1000.0 + i), preset="quick", release_id=RELEASE,
                          started_at=T0 + timedelta(seconds=i)).id for i in range(3)]
    env = {**os.environ, "COLUMNS": "80", "DEPLOY_STATE_DIR": str(tmp_path / "state"),
           "DEPLOY_INVENTORY": str(EXAMPLE_INVENTORY)}
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "history", "--bench"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout
    lines = proc.stdout.splitlines()
    for rid in ids:
        (line,) = [ln for ln in lines if rid in ln]
        assert line.split()[:5] == [rid, "pve-gpu-1", "bench", "quick", RELEASE]
