"""The breakdown and its verdict as a table and lines (pure: values in, table rows and strings out)."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.profile.breakdown import Breakdown
from orchestrator.profile.kernels import CLASS_ORDER
from orchestrator.profile.verdict import Verdict

_HEADERS = {"collective": "collective", "moe": "MoE", "attention": "attention", "dense_gemm": "dense GEMM",
            "other": "other", "idle": "GPU idle"}


@dataclass(frozen=True)
class BreakdownTable:
    """The table's title, headers (every column right-aligned: figures) and rows; the CLI draws it (this package
    stays below orchestrator.ui, which imports the runner)."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def breakdown_table(b: Breakdown) -> BreakdownTable:
    """One row per rank: its decode steps, mean step time and each class's share of it."""
    headers = ("rank", "steps", "step µs", *(_HEADERS[c.value] for c in CLASS_ORDER), "sum")
    rows = tuple((str(r.rank), str(r.steps), f"{r.mean_step_us:.0f}",
                  *(f"{100 * r.share(c):.1f} %" for c in CLASS_ORDER), f"{100 * r.coverage:.1f} %")
                 for r in b.ranks)
    where = f" on {b.device}" if b.device else ""
    return BreakdownTable(f"{b.stage.lower()} step time by kernel class, per rank{where}", headers, rows)


def verdict_lines(b: Breakdown, v: Verdict) -> list[str]:
    """The verdict, its next action, the power evidence and the top kernels behind it."""
    lines = [f"verdict: {v.code}: {v.message}", f"  next: {v.next_action}"]
    lines += [f"  evidence: {e}" for e in v.evidence]
    worst = max(b.ranks, key=lambda r: r.mean_step_us)
    if worst.top_kernels:
        lines.append(f"  top kernels on rank {worst.rank} (µs over {worst.steps} steps):")
        lines += [f"    {k.us:9.1f}  {k.kernel_class.value:<10}  {k.name}" for k in worst.top_kernels[:6]]
    return lines
