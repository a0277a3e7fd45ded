"""A tune's result as table rows, a PNG (goodput with its interval per point, power share, tok/s per W) and a
self-contained HTML page, reusing the sweep report's formatting and page style. Pure but for the two files."""

from __future__ import annotations

import html
import statistics
from collections.abc import Sequence
from pathlib import Path

from orchestrator.bench.report import _CSS, TableData, _html_table, fmt, save_png
from orchestrator.local.files import write_file
from orchestrator.redact import redact_text
from orchestrator.tune.record import PointRecord, RunEntry, TuneRecord

HEADERS = ("point", "result", "SLO limit (conc.)", "goodput tok/s (95 % CI)", "tok/s per W", "J/token",
           "power % of limit", "runs (search+repeat+confirm)", "why it lost / note")


def _at_limit(p: PointRecord) -> list[RunEntry]:
    return [r for r in p.runs if p.limit is not None and r.concurrency == p.limit]


def _mean(vals: Sequence[float | None]) -> float | None:
    got = [v for v in vals if v is not None]
    return statistics.fmean(got) if got else None


def point_energy(p: PointRecord) -> tuple[float | None, float | None, float | None]:
    """(tok/s per W, J/token, power % of limit) over the runs at the point's SLO limit."""
    runs = _at_limit(p)
    return (_mean([r.tok_s_per_w for r in runs]), _mean([r.j_per_token for r in runs]),
            _mean([r.power_pct_of_limit for r in runs]))


def goodput_text(p: PointRecord) -> str:
    g = p.goodput
    if not g:
        return "—"
    half = (float(g["ci95_high"]) - float(g["ci95_low"])) / 2.0
    return f"{fmt(float(g['mean']))} ± {fmt(half)} (n={int(g['n'])})"


def result_word(p: PointRecord, record: TuneRecord) -> str:
    if p.label == record.winner:
        return "WINNER" if p.label != "current" else "kept (best or not beaten)"
    return {"done": "measured", "lost": "lost", "skipped": "not run", "pending": "not run"}[p.status]


def tune_table(record: TuneRecord, step: int) -> TableData:
    rows = []
    for p in record.points:
        tpw, jpt, pct = point_energy(p)
        confirm = sum(1 for r in p.runs if r.purpose == "confirm")
        limit = "—" if p.limit is None else (f"≥ {p.limit}" if p.at_top else f"{p.limit} (±{step})")
        note = p.reason
        if p.status == "done" and record.winner and p.label != record.winner and not note:
            note = "lower goodput"
        rows.append((p.label, result_word(p, record), limit, goodput_text(p), fmt(tpw, 3), fmt(jpt, 3),
                     fmt(pct, 0), f"{p.search_runs}+{p.repeats}+{confirm}", note))
    return TableData(HEADERS, tuple(rows))


def plot_tune(record: TuneRecord, path: Path) -> Path:
    """Goodput with its 95 % interval per point (winner highlighted, lost points marked), power share of the
    limit and tok/s per W beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [p.label.replace(",", "\n") for p in record.points]
    means = [float(p.goodput["mean"]) if p.goodput else 0.0 for p in record.points]
    errs = [(float(p.goodput["ci95_high"]) - float(p.goodput["ci95_low"])) / 2.0 if p.goodput else 0.0
            for p in record.points]
    colors = ["#2e8b57" if p.label == record.winner else "#9aa4b5" if p.status != "done" else "#3b82c4"
              for p in record.points]
    energy = [point_energy(p) for p in record.points]
    fig, axes = plt.subplots(1, 3, figsize=(14, 5), dpi=100, gridspec_kw={"width_ratios": [2, 1, 1]})
    try:
        ax = axes[0]
        xs = list(range(len(labels)))
        ax.bar(xs, means, yerr=errs, color=colors, capsize=4)
        for x, p in zip(xs, record.points, strict=True):
            if p.status != "done":
                ax.text(x, max(means or [1.0]) * 0.02, "lost: " + (p.reason.split(":")[0] or p.status),
                        ha="center", va="bottom", fontsize=9, color="#c0392b", rotation=90)
            elif p.limit is not None:
                ax.text(x, means[x] + errs[x], f"c≤{p.limit}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(xs)
        ax.set_xticklabels([lbl if p.label == "current" else f"#{i}\n{lbl}"
                            for i, (lbl, p) in enumerate(zip(labels, record.points, strict=True))], fontsize=7)
        ax.set_title(f"Goodput under {record.slo} (output tok/s at the SLO limit, 95 % CI)", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        short = ["current" if p.label == "current" else f"#{i}" for i, p in enumerate(record.points)]
        for ax, idx, title in ((axes[1], 2, "GPU power at the limit, % of power limit"),
                               (axes[2], 0, "Output tok/s per W at the limit")):
            vals = [e[idx] or 0.0 for e in energy]
            ax.bar(xs, vals, color=colors)
            ax.set_xticks(xs)
            ax.set_xticklabels(short, fontsize=8)
            ax.set_title(title, fontsize=10)
            ax.grid(True, axis="y", alpha=0.3)
        fig.suptitle(f"deploy tune {record.tune_id} on {record.host} ({record.preset}): {record.verdict}",
                     fontsize=11)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        save_png(fig, path)
    finally:
        plt.close(fig)
    return path


def write_tune_report(record: TuneRecord, out_dir: Path, step: int, summary: Sequence[str]) -> tuple[Path, Path]:
    """`tune.png` and `report.html` in out_dir."""
    png = plot_tune(record, out_dir / "tune.png")
    title = f"deploy tune {record.tune_id} on {record.host}"
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>",
             f'<div class="meta">SLO {html.escape(record.slo)}; over {html.escape(" ".join(record.over))}; '
             f"concurrency {html.escape(record.range)}; preset {html.escape(record.preset)}</div>"]
    parts += [f'<div class="meta">{html.escape(line)}</div>' for line in summary]
    import base64

    parts.append(f'<h2>Points</h2><img alt="tune" src="data:image/png;base64,'
                 f'{base64.b64encode(png.read_bytes()).decode()}">')
    parts.append(_html_table(tune_table(record, step)))
    parts.append("</body></html>")
    page = out_dir / "report.html"
    write_file(page, redact_text("\n".join(parts)))
    return png, page
