"""`deploy check host X`: the correctness gate against the running server, changing nothing (docs/gates.md)."""

from __future__ import annotations

import click

from orchestrator.cli.common import AppContext, common_options, tofu_option
from orchestrator.cli.run import run_with_progress
from orchestrator.engine.step import RunOptions


@click.command("check")
@click.argument("target", nargs=-1)
@tofu_option
@common_options
def check(app: AppContext, target: tuple[str, ...], tofu: bool) -> int:
    """The correctness gate: golden prompts at temperature 0 against the current release's own record.

    Exit 1 when an answer diverges or a detector fires (NaN logprobs, empty output, repeated tokens, control
    characters, one token only); the report names the prompt and the token position. Nothing is changed.
    """
    report = run_with_progress(app, target, "check", RunOptions(tofu=tofu, command="deploy check"), quiet=True)
    rec = report.steps[-1]
    gate = report.state.correctness
    app.out.emit({"ok": True, "host": report.host, "correctness": gate.to_dict() if gate is not None else {},
                  "totals": report.to_dict()["totals"]})
    app.out.line(f"correctness ok on {report.host}: {rec.summary}")
    for result in gate.verdict.results if gate is not None else ():
        app.out.line(f"  {result.prompt:<16} agreed {result.agreed:>3} tokens, ended: {result.ended}, "
                     f"max Δlogprob {round(result.max_delta, 4):.3f}")
    return 0
