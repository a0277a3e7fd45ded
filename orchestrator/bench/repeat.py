"""`deploy bench --repeat N`: each figure of a point's N runs as mean ± 95 % CI and spread. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.bench.run import BenchRun
from orchestrator.bench.stats import Estimate, estimate
from orchestrator.ui.tables import Column, TableSpec, spec

#: The figures a repeat reports: (label, BenchResult field).
FIGURES = (("out tok/s", "output_throughput"), ("TTFT p99 ms", "p99_ttft_ms"), ("TPOT p99 ms", "p99_tpot_ms"))


@dataclass(frozen=True)
class RepeatStats:
    figures: tuple[tuple[str, Estimate | None], ...]

    def to_dict(self) -> dict[str, Any]:
        return {field: est.to_dict() if est else None
                for (_, field), (_, est) in zip(FIGURES, self.figures, strict=True)}


def repeat_stats(runs: Sequence[BenchRun]) -> RepeatStats:
    out = []
    for label, field in FIGURES:
        vals = [float(v) for r in runs if (v := getattr(r.result, field)) is not None]
        out.append((label, estimate(vals) if vals else None))
    return RepeatStats(tuple(out))


def repeat_table(labels: Sequence[str], stats: Sequence[RepeatStats], title: str) -> TableSpec:
    headers: list[str | Column] = ["point", Column("n", "right")]
    for label, _ in FIGURES:
        headers += [Column(f"{label} (95 % CI)", "right"), Column("spread", "right")]
    rows = []
    for label, st in zip(labels, stats, strict=True):
        n = next((e.n for _, e in st.figures if e is not None), 0)
        row: list[str] = [label, str(n)]
        for _, est in st.figures:
            row += [est.text(".1f"), f"{est.low:.1f}..{est.high:.1f}"] if est else ["-", "-"]
        rows.append(tuple(row))
    return spec(title, headers, rows)
