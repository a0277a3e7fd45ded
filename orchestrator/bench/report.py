"""Sweep results as table rows, a 2x2 PNG and a self-contained HTML page; the bench summary rows for the CLI.

Rows are pre-formatted strings (the CLI renders them with rich, the HTML report as a table), so both show the same
digits. The HTML embeds the PNG as base64 and its CSS inline and references no URL: the report is one file that
opens offline and can be attached to a ticket.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.local.files import write_file
from orchestrator.parsers.bench import BenchResult
from orchestrator.redact import redact_text
from orchestrator.telemetry.summary import TelemetrySummary
from orchestrator.verdicts.power import Diagnosis


@dataclass(frozen=True)
class SweepPoint:
    """One sweep step: the swept value (e.g. max-concurrency 512), its bench, telemetry and where files are."""

    value: float | int | str
    bench: BenchResult
    telemetry: TelemetrySummary | None = None
    diagnosis: tuple[Diagnosis, ...] = ()
    result_dir: str | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class SweepResult:
    parameter: str
    points: tuple[SweepPoint, ...]
    host: str | None = None
    preset: str | None = None
    release: str | None = None  # the release the points ran on (a server sweep: each point's own, see run ids)
    started_at: str | None = None  # when the sweep began (ISO)
    overrides: tuple[str, ...] = ()  # other bench overrides every point ran with (KEY=VALUE)

    def context(self) -> list[str]:
        """What a reader needs to trust the figures: preset, release, overrides (for titles and the HTML)."""
        out = [f"preset {self.preset}"] if self.preset else []
        if self.release:
            out.append(f"release {self.release}")
        if self.overrides:
            out.append("overrides " + ", ".join(self.overrides))
        return out

    def title(self) -> str:
        head = f"Sweep over {self.parameter}" + (f" on {self.host}" if self.host else "")
        return head + (f" — {'; '.join(self.context())}" if self.context() else "")


@dataclass(frozen=True)
class TableData:
    """Headers and string rows, ready for rich.Table or HTML."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...] = field(default_factory=tuple)


def fmt(v: float | int | str | None, nd: int = 1) -> str:
    """Numbers as operators read them: fixed decimals, thousands separators, '—' for missing."""
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and nd == 0):
        return f"{int(v):,}"
    return f"{v:,.{nd}f}"


def _per_gpu_power(t: TelemetrySummary | None) -> float | None:
    if t is None or t.total_mean_power_w is None or not t.gpus:
        return None
    return t.total_mean_power_w / len(t.gpus)


SWEEP_HEADERS: tuple[str, ...] = (
    "value", "output tok/s", "total tok/s", "peak out tok/s", "concurrency", "peak conc.", "mean TTFT ms",
    "mean TPOT ms", "P99 TPOT ms", "failed", "W/GPU", "% limit", "SM %", "tok/s/W", "J/tok",
)


def sweep_table(points: Sequence[SweepPoint]) -> TableData:
    rows = []
    for p in points:
        b, t = p.bench, p.telemetry
        rows.append((
            fmt(p.value) if not isinstance(p.value, float) else fmt(p.value, 2),
            fmt(b.output_throughput), fmt(b.total_throughput), fmt(b.peak_output_throughput),
            fmt(b.concurrency), fmt(b.max_concurrent_requests), fmt(b.mean_ttft_ms), fmt(b.mean_tpot_ms, 2),
            fmt(b.p99_tpot_ms, 2), fmt(b.failed),
            fmt(_per_gpu_power(t), 0), fmt(t.mean_power_pct_of_limit if t else None, 0),
            fmt(t.mean_sm_util_pct if t else None, 0), fmt(t.tokens_per_s_per_w if t else None, 2),
            fmt(t.j_per_output_token if t else None, 3),
        ))
    return TableData(headers=SWEEP_HEADERS, rows=tuple(rows))


def bench_summary_table(bench: BenchResult, telemetry: TelemetrySummary | None = None) -> TableData:
    """The figures the operator reads after `deploy bench`, as (metric, value) rows."""
    rows: list[tuple[str, str]] = [
        ("Output token throughput (tok/s)", fmt(bench.output_throughput, 2)),
        ("Total token throughput (tok/s)", fmt(bench.total_throughput, 2)),
        ("Peak output token throughput (tok/s)", fmt(bench.peak_output_throughput, 2)),
        ("Concurrency (mean)", fmt(bench.concurrency, 2)),
        ("Peak concurrent requests", fmt(bench.max_concurrent_requests)),
        ("Successful / failed requests", f"{fmt(bench.completed)} / {fmt(bench.failed)}"),
        ("Mean / P99 TTFT (ms)", f"{fmt(bench.mean_ttft_ms, 2)} / {fmt(bench.p99_ttft_ms, 2)}"),
        ("Mean / P99 TPOT (ms)", f"{fmt(bench.mean_tpot_ms, 2)} / {fmt(bench.p99_tpot_ms, 2)}"),
        ("Mean / P99 ITL (ms)", f"{fmt(bench.mean_itl_ms, 2)} / {fmt(bench.p99_itl_ms, 2)}"),
        ("Mean E2E latency (ms)", fmt(bench.mean_e2e_latency_ms, 2)),
        ("Duration (s)", fmt(bench.duration_s, 2)),
    ]
    if telemetry is not None:
        t = telemetry
        rows += [
            ("Mean power per GPU (W)", fmt(_per_gpu_power(t), 0)),
            ("Mean power, % of limit", fmt(t.mean_power_pct_of_limit, 0)),
            ("Mean SM utilisation (%)", fmt(t.mean_sm_util_pct, 0)),
            ("Energy (kJ)", fmt(t.total_energy_j / 1000 if t.total_energy_j is not None else None, 1)),
            ("J per output token", fmt(t.j_per_output_token, 3)),
            ("Output tokens/s per W", fmt(t.tokens_per_s_per_w, 3)),
        ]
        if t.sampling_overhead_pct is not None:
            rows.append(("Sampling overhead (%)", fmt(t.sampling_overhead_pct, 1)))
    return TableData(headers=("metric", "value"), rows=tuple(rows))


def gpu_table(telemetry: TelemetrySummary) -> TableData:
    """Per-GPU telemetry rows."""
    rows = tuple(
        (str(g.gpu), fmt(g.mean_power_w, 0), fmt(g.p95_power_w, 0), fmt(g.power_limit_w, 0),
         fmt(g.power_pct_of_limit, 0), fmt(g.mean_sm_util_pct, 0), fmt(g.mean_sm_clock_mhz, 0),
         fmt(g.mean_pcie_rx_mbps, 0), fmt(g.mean_pcie_tx_mbps, 0), fmt(g.max_temp_c, 0))
        for g in telemetry.gpus)
    return TableData(headers=("GPU", "mean W", "p95 W", "limit W", "% limit", "SM %", "SM MHz", "PCIe rx MB/s",
                              "PCIe tx MB/s", "max °C"), rows=rows)


def power_axis(points: Sequence[SweepPoint], watts: Sequence[float]) -> tuple[float, float | None]:
    """The power panel's top and the per-GPU limit line: the axis runs from 0 to the limit. On an auto-scaled
    axis a 3 W wobble filled the panel and read as a trend; against the limit the panel shows what matters, how
    much of the GPUs' power the load uses."""
    limits = [g.power_limit_w for p in points if p.telemetry for g in p.telemetry.gpus if g.power_limit_w]
    limit = max(limits) if limits else None
    return max(limit or 0.0, max(watts, default=0.0) * 1.15) or 1.0, limit


def _x(v: float | int | str) -> float:
    if isinstance(v, str):
        raise TypeError("string sweep values are plotted as categories")
    return float(v)


def save_png(fig: Any, path: Path) -> Path:
    """`fig` as a PNG at `path`, written as every report file is (atomically, never through a symbolic link)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return write_file(path, buf.getvalue())


def plot_sweep(points: Sequence[SweepPoint], path: Path | str, *, parameter: str = "swept value",
               title: str | None = None) -> Path:
    """2x2 PNG: output throughput, mean TPOT, mean power per GPU, tokens/s per W against the swept value.

    Numeric sweep values are plotted on a numeric axis (log2 when they span 8x or more, as concurrency sweeps
    do); string values are categories in sweep order.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not points:
        raise ValueError("no sweep points to plot")
    numeric = all(isinstance(p.value, int | float) and not isinstance(p.value, bool) for p in points)
    xs: list[float] = [_x(p.value) if numeric else float(i) for i, p in enumerate(points)]
    panels: tuple[tuple[str, list[float | None]], ...] = (
        ("Output throughput (tok/s)", [p.bench.output_throughput for p in points]),
        ("Mean TPOT (ms)", [p.bench.mean_tpot_ms for p in points]),
        ("Mean power per GPU (W)", [_per_gpu_power(p.telemetry) for p in points]),
        ("Output tokens/s per W", [p.telemetry.tokens_per_s_per_w if p.telemetry else None for p in points]),
    )
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), dpi=100)
    try:
        for ax, (label, ys) in zip(axes.flat, panels, strict=True):
            pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", linewidth=1.8)
            else:
                ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")
            ax.set_title(label, fontsize=10)
            ax.set_xlabel(parameter, fontsize=9)
            ax.grid(True, alpha=0.3)
            if numeric and min(xs) > 0 and max(xs) / min(xs) >= 8:
                ax.set_xscale("log", base=2)
            ax.set_xticks(xs)
            ax.set_xticklabels([str(p.value) for p in points], fontsize=8)
            if label.startswith("Mean power") and pts:
                top, limit = power_axis(points, [y for _, y in pts])
                ax.set_ylim(0, top)
                if limit:
                    ax.axhline(limit, color="grey", linestyle="--", linewidth=1)
                    ax.text(xs[0], limit, " power limit", va="bottom", fontsize=8, color="grey")
        fig.suptitle(title or f"Sweep over {parameter}", fontsize=12)
        fig.tight_layout()
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        save_png(fig, out)
    finally:
        plt.close(fig)
    return out


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#1d2330;}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:24px 0 8px}
.meta{color:#5b6475;font-size:13px}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #d6dae2;padding:4px 8px;text-align:right}
th{background:#f1f3f7}td:first-child,th:first-child{text-align:left}
img{max-width:100%;border:1px solid #d6dae2}
.diag{margin:4px 0;padding:6px 10px;border-left:4px solid #9aa4b5;background:#f7f8fa;font-size:13px}
.diag.warn{border-color:#d4a017}.diag.fail{border-color:#c0392b}.diag.info{border-color:#3b82c4}
.fig{color:#5b6475;font-family:ui-monospace,Menlo,monospace;font-size:12px}
"""


def _html_table(t: TableData) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_report(points: Sequence[SweepPoint], title: str, png_path: Path | str | None, *,
                parameter: str = "swept value", notes: Sequence[str] = ()) -> str:
    """One self-contained HTML page: title, plot (inline base64), the sweep table, diagnosis lines per point."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<div class="meta">{len(points)} points over {html.escape(parameter)}</div>',
    ]
    for n in notes:
        parts.append(f'<div class="meta">{html.escape(n)}</div>')
    if png_path is not None:
        data = base64.b64encode(Path(png_path).read_bytes()).decode("ascii")
        parts.append(f'<h2>Plots</h2><img alt="sweep plots" src="data:image/png;base64,{data}">')
    parts.append("<h2>Results</h2>")
    parts.append(_html_table(sweep_table(points)))
    diag_parts = []
    for p in points:
        for d in p.diagnosis:
            figs = ", ".join(f"{k}={v}" for k, v in d.figures.items())
            diag_parts.append(
                f'<div class="diag {html.escape(d.severity)}"><b>{html.escape(str(p.value))}</b> '
                f"[{html.escape(d.severity)}] {html.escape(d.message)}"
                f'<div class="fig">{html.escape(d.code)}: {html.escape(figs)}</div></div>')
    if diag_parts:
        parts.append("<h2>Diagnosis</h2>")
        parts += diag_parts
    runs = [(p.value, p.run_id, p.result_dir) for p in points if p.run_id or p.result_dir]
    if runs:
        parts.append("<h2>Runs</h2><ul>")
        parts += [f"<li>{html.escape(str(v))}: run <code>{html.escape(r or '-')}</code>"
                  + (f", files <code>{html.escape(d)}</code>" if d else "") + "</li>" for v, r, d in runs]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_sweep_report(result: SweepResult, out_dir: Path | str, *, title: str | None = None) -> tuple[Path, Path]:
    """Write `sweep.png` and `report.html` into `out_dir`; return both paths."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    ttl = title or result.title()
    png = plot_sweep(result.points, d / "sweep.png", parameter=result.parameter, title=ttl)
    notes = [*result.context(), *([f"started {result.started_at}"] if result.started_at else [])]
    page = html_report(result.points, ttl, png, parameter=result.parameter, notes=notes)
    html_path = d / "report.html"
    write_file(html_path, redact_text(page))
    return png, html_path
