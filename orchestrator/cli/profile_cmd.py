"""`deploy profile import TRACE…`: sglang's own profiler traces read offline into a breakdown and a verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from orchestrator.cli.common import AppContext, SuggestingGroup, common_options

if TYPE_CHECKING:
    from orchestrator.profile.breakdown import Breakdown
    from orchestrator.profile.verdict import Verdict


@click.group("profile", cls=SuggestingGroup)
def profile() -> None:
    """Step-time breakdown from sglang's profiler traces (docs/profile.md)."""


@profile.command("import")
@click.argument("traces", nargs=-1, required=True, metavar="TRACE…")
@click.option("--stage", default="DECODE", show_default=True, type=click.Choice(["DECODE", "EXTEND"]),
              help="Which steps to break down.")
@common_options
def import_traces(app: AppContext, traces: tuple[str, ...], stage: str) -> int:
    """Read torch-profiler traces (one per rank, .json.gz or .json) and print each rank's step-time breakdown
    and the verdict with its next action. Changes nothing, connects nowhere."""
    from orchestrator.profile.breakdown import breakdown
    from orchestrator.profile.trace import read_trace
    from orchestrator.profile.verdict import judge

    b = breakdown([read_trace(t) for t in traces], stage)
    v = judge(b)
    app.out.emit({"ok": True, "breakdown": b.payload(), "verdict": v.model_dump(mode="json")})
    print_breakdown(app, b, v)
    return 0


def print_breakdown(app: AppContext, b: Breakdown, v: Verdict) -> None:
    """The per-rank table and the verdict's lines (profile import and bench --profile print the same)."""
    from orchestrator.profile.render import breakdown_table, verdict_lines
    from orchestrator.ui.tables import Column, spec

    t = breakdown_table(b)
    app.out.table(spec(t.title, [Column(h, "right") for h in t.headers], t.rows))
    for line in verdict_lines(b, v):
        app.out.line(line)
