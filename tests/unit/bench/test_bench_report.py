"""Sweep table, PNG plot and self-contained HTML report; the CLI's bench summary rows."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.bench.report import (
    SWEEP_HEADERS,
    SweepPoint,
    SweepResult,
    bench_summary_table,
    gpu_table,
    html_report,
    plot_sweep,
    power_axis,
    sweep_table,
    write_sweep_report,
)
from orchestrator.parsers.bench import BenchResult
from orchestrator.parsers.gpu_query import Sample
from orchestrator.telemetry.summary import TelemetrySummary, summarize
from orchestrator.verdicts.power import Diagnosis

T0 = datetime(2026, 11, 30, 2, 0, 0)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def tel(power: float, out_tps: float) -> TelemetrySummary:
    samples = [Sample(ts=T0 + timedelta(seconds=i), gpu=g,
                      values={"power.draw": power, "power.limit": 600.0, "utilization.gpu": 90.0})
               for g in range(8) for i in range(4)]
    return summarize(samples, output_tokens=int(out_tps * 3), output_throughput=out_tps)


def points() -> list[SweepPoint]:
    out = []
    for conc, tps, tpot, watts in ((256, 2100.0, 110.0, 210.0), (512, 3000.0, 150.0, 235.0),
                                   (1024, 3600.0, 240.0, 250.0), (2048, 3840.0, 420.0, 255.0)):
        b = BenchResult(source="jsonl", completed=1024, failed=0, num_prompts=1024, output_throughput=tps,
                        total_throughput=tps * 1.5, mean_tpot_ms=tpot, max_concurrency=conc, concurrency=conc * 0.8)
        diag = (Diagnosis(code="kernels-not-saturating", severity="warn",
                          message=f"decode ran at {watts / 6:.0f} % of the power limit <b>",
                          figures={"power_pct_of_limit": watts / 6}),)
        out.append(SweepPoint(value=conc, bench=b, telemetry=tel(watts, tps), diagnosis=diag,
                              result_dir=f"/var/lib/deploy/sweeps/s1/c{conc}"))
    return out


def test_sweep_table_rows() -> None:
    t = sweep_table(points())
    assert t.headers == SWEEP_HEADERS
    assert len(t.rows) == 4
    first = dict(zip(t.headers, t.rows[0], strict=True))
    assert first["value"] == "256"
    assert first["output tok/s"] == "2,100.0"
    assert first["W/GPU"] == "210"
    assert first["% limit"] == "35"
    assert first["tok/s/W"] == f"{2100 / (8 * 210):.2f}"
    assert first["failed"] == "0"


def test_sweep_table_without_telemetry_shows_dashes() -> None:
    p = points()[0]
    t = sweep_table([SweepPoint(value="fa3", bench=p.bench)])
    row = dict(zip(t.headers, t.rows[0], strict=True))
    assert row["value"] == "fa3" and row["W/GPU"] == "—" and row["J/tok"] == "—"


def test_plot_png(tmp_path: Path) -> None:
    out = plot_sweep(points(), tmp_path / "sub" / "sweep.png", parameter="max-concurrency")
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 20_000  # four panels with lines, not an empty canvas
    cat = plot_sweep([SweepPoint(value=v, bench=points()[0].bench) for v in ("a", "b")], tmp_path / "c.png")
    assert cat.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ValueError):
        plot_sweep([], tmp_path / "none.png")


def test_html_is_self_contained(tmp_path: Path) -> None:
    pts = points()
    png = plot_sweep(pts, tmp_path / "sweep.png")
    page = html_report(pts, "GLM-5 concurrency sweep <pve-gpu-1>", png, parameter="max-concurrency")
    assert page.startswith("<!DOCTYPE html>")
    assert "data:image/png;base64," in page
    assert not re.search(r"(src|href)=\"(https?:)?//", page)
    assert "http://" not in page and "https://" not in page
    assert "&lt;pve-gpu-1&gt;" in page and "<pve-gpu-1>" not in page  # escaped
    assert "&lt;b&gt;" in page  # diagnosis text escaped too
    assert page.count("<tr>") == 1 + 4
    assert "kernels-not-saturating" in page
    assert "/var/lib/deploy/sweeps/s1/c2048" in page


def test_write_sweep_report(tmp_path: Path) -> None:
    png, html_path = write_sweep_report(SweepResult(parameter="max-concurrency", points=tuple(points()),
                                                    host="pve-gpu-1", preset="seed-c1024"), tmp_path / "r")
    assert png.exists() and html_path.exists()
    text = html_path.read_text()
    assert "Sweep over max-concurrency on pve-gpu-1" in text and "preset seed-c1024" in text


def test_bench_summary_and_gpu_tables() -> None:
    p = points()[1]
    t = bench_summary_table(p.bench, p.telemetry)
    rows = dict(t.rows)
    assert rows["Output token throughput (tok/s)"] == "3,000.00"
    assert rows["Successful / failed requests"] == "1,024 / 0"
    assert rows["Mean power per GPU (W)"] == "235"
    assert rows["Mean power, % of limit"] == "39"
    assert "Sampling overhead (%)" not in rows
    assert len(bench_summary_table(p.bench).rows) == 11
    assert p.telemetry is not None
    g = gpu_table(p.telemetry)
    assert len(g.rows) == 8 and g.rows[0][0] == "0" and g.rows[0][1] == "235"


def test_a_sweep_report_says_what_its_figures_are_from(tmp_path: Path) -> None:
    """Issue 25 item 16: the title names preset, release and overrides; the HTML also the date and each run id."""
    pts = [SweepPoint(value=p.value, bench=p.bench, telemetry=p.telemetry, diagnosis=p.diagnosis,
                      result_dir=p.result_dir, run_id=f"r-20261201-1200{i:02d}-ab{i:02d}")
           for i, p in enumerate(points())]
    result = SweepResult(parameter="max-concurrency", points=tuple(pts), host="sim-70", preset="quick",
                         release="20261201T115900-0a1b2c3d", started_at="2026-12-01T12:00:00",
                         overrides=("random-input-len=2048",))
    assert result.title() == ("Sweep over max-concurrency on sim-70 — preset quick; release "
                              "20261201T115900-0a1b2c3d; overrides random-input-len=2048")
    _, html_path = write_sweep_report(result, tmp_path / "r")
    text = html_path.read_text()
    for needle in ("release 20261201T115900-0a1b2c3d", "started 2026-12-01T12:00:00", "r-20261201-120003-ab03",
                   "overrides random-input-len=2048"):
        assert needle in text, needle


def test_the_power_panel_runs_from_zero_to_the_power_limit() -> None:
    top, limit = power_axis(points(), [210.0, 235.0, 250.0, 255.0])
    assert limit == 600.0 and top == 600.0  # a 45 W spread on a 600 W scale, not a panel-filling trend
    top, limit = power_axis([SweepPoint(value=1, bench=points()[0].bench)], [100.0, 104.0])
    assert limit is None and top == pytest.approx(104.0 * 1.15)
