"""The breakdown and its verdict as a table and lines (pure: values in, table spec and strings out)."""

from __future__ import annotations

from orchestrator.profile.breakdown import Breakdown
from orchestrator.profile.kernels import CLASS_ORDER
from orchestrator.profile.verdict import Verdict
from orchestrator.ui.tables import Column, TableSpec, spec

_HEADERS = {"collective": "collective", "moe": "MoE", "attention": "attention", "dense_gemm": "dense GEMM",
            "other": "other", "idle": "GPU idle"}


def breakdown_table(b: Breakdown) -> TableSpec:
    """One row per rank: its decode steps, mean step time and each class's share of it."""
    headers = [Column("rank", "right"), Column("steps", "right"), Column("step µs", "right"),
               *(Column(_HEADERS[c.value], "right") for c in CLASS_ORDER), Column("sum", "right")]
    rows = [(str(r.rank), str(r.steps), f"{r.mean_step_us:.0f}",
             *(f"{100 * r.share(c):.1f} %" for c in CLASS_ORDER), f"{100 * r.coverage:.1f} %")
            for r in b.ranks]
    where = f" on {b.device}" if b.device else ""
    return spec(f"{b.stage.lower()} step time by kernel class, per rank{where}", headers, rows)


def verdict_lines(b: Breakdown, v: Verdict) -> list[str]:
    """The verdict, its next action, the power evidence and the top kernels behind it."""
    lines = [f"verdict: {v.code}: {v.message}", f"  next: {v.next_action}"]
    lines += [f"  evidence: {e}" for e in v.evidence]
    worst = max(b.ranks, key=lambda r: r.mean_step_us)
    if worst.top_kernels:
        lines.append(f"  top kernels on rank {worst.rank} (µs over {worst.steps} steps):")
        lines += [f"    {k.us:9.1f}  {k.kernel_class.value:<10}  {k.name}" for k in worst.top_kernels[:6]]
    return lines
