"""`deploy profile import TRACE…`: sglang's own profiler traces read offline into a breakdown and a verdict."""

from __future__ import annotations

import click

from orchestrator.cli.common import AppContext, SuggestingGroup, common_options


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
    from orchestrator.cli.profile_view import breakdown_table, verdict_lines
    from orchestrator.profile.breakdown import breakdown
    from orchestrator.profile.trace import read_trace
    from orchestrator.profile.verdict import judge

    b = breakdown([read_trace(t) for t in traces], stage)
    v = judge(b)
    app.out.emit({"ok": True, "breakdown": b.payload(), "verdict": v.model_dump(mode="json")})
    app.out.table(breakdown_table(b))
    for line in verdict_lines(b, v):
        app.out.line(line)
    return 0
