"""Running a playbook from a command, with the step printer: shared by roll, rollback, status, history, bench."""

from __future__ import annotations

import contextlib
import shlex
import sys
from collections.abc import Iterator

from orchestrator.cli.common import AppContext, resolve_host
from orchestrator.commands.filing import file_runs, filed_if_stopped
from orchestrator.engine.progress import StepPrinter
from orchestrator.engine.runner import RunReport, run_playbook_to_end
from orchestrator.engine.state import RunInputs
from orchestrator.engine.step import RunOptions


def command_line() -> str:
    """The command as the user typed it (recorded in release meta and the host lock)."""
    return "deploy " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def run_with_progress(app: AppContext, target: tuple[str, ...], playbook: str, options: RunOptions,
                      inputs: RunInputs | None = None, *, quiet: bool = False) -> RunReport:
    host = resolve_host(app, target)
    with step_progress(app, quiet=quiet) as printer, filed_if_stopped(printer.say):
        report = run_playbook_to_end(playbook, host, app.inventory, options, progress=printer, say=printer.say,
                                     inputs=inputs)
        file_runs(report, printer.say)  # a bench's runs (and a failed one's), after the run: commands/filing.py
    if report.failure is not None:
        raise report.failure
    return report


@contextlib.contextmanager
def step_progress(app: AppContext, *, quiet: bool = False) -> Iterator[StepPrinter]:
    """The command's step printer for one run (a typed single-host function's `progress` and `say`), closed after."""
    printer = app.step_printer(quiet=quiet)
    try:
        yield printer
    finally:
        printer.close()
