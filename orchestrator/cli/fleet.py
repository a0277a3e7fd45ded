"""Fleet forms of a command: `@fleet_options(host_run)` under `@common_options` makes a single-host command
fleet-capable.

With one host (`host X`, a bare `X`, or none) the command body runs exactly as before. With a group, several hosts
or --all, the command's typed single-host function (orchestrator/commands/, the one its body calls and prints)
runs once per host on the engine's bounded pool, with a step printer that forwards its progress to the live view;
each typed result is judged (fleet/outcome.py), then one summary table (or one JSON document holding every host's
report, its single-host document as is) is printed. No fleet code reads what a command prints.
The engine, the live view and the judging of each host's result live in orchestrator/fleet; this is the CLI side.
"""

from __future__ import annotations

import contextlib
import functools
import shlex
import sys
from collections.abc import Callable
from typing import Any

import click

from orchestrator.cli.common import AppContext
from orchestrator.engine.progress import StepPrinter
from orchestrator.errors import DeployError, UsageError
from orchestrator.fleet.engine import DEFAULT_PARALLEL, HostEvents, HostOutcome, run_fleet
from orchestrator.fleet.outcome import HostResult, Refused, host_outcome
from orchestrator.fleet.targets import TargetSpec, parse_targets, resolve_targets
from orchestrator.inventory.models import Host, Inventory
from orchestrator.locks.claims import claim_fleet
from orchestrator.runlog import StepRecord

Payload = dict[str, Any]
#: One host of a fleet run: the command's typed single-host function, given the inventory, the host's name, the
#: body's options (its keyword arguments) and the host's step printer (its progress goes to the live view).
HostRun = Callable[[Inventory, str, dict[str, Any], StepPrinter], HostResult]
Preflight = Callable[[AppContext, tuple[str, ...]], None]
#: Adds fleet-level facts or work after the runs (the router's view of each worker; `up` converging the router),
#: given the body's options; returns payload sections, "text" (a line after the table) and optionally "exit_code"
#: (folded into the run's: the worst wins).
Annotate = Callable[[AppContext, list[HostOutcome], dict[str, Any]], Payload | None]
#: Checks that concern the whole fleet (e.g. the router section), before any host starts.
FleetPreflight = Callable[[AppContext, list[Host]], None]
#: Given the body's options, whether this fleet run may change the router (`up`, not `up --dry-run`): it then
#: claims its hosts and the router as a fleet roll does (locks/claims.py), before any host starts.
Claims = Callable[[dict[str, Any]], bool]


def fleet_options(host_run: HostRun, *, preflight: Preflight | None = None, required: bool = False,
                  annotate: Annotate | None = None, fleet_preflight: FleetPreflight | None = None,
                  claims: Claims | None = None) -> Callable[[Any], Any]:
    """Add --all/--parallel/--fail-fast; when the target words name a fleet, run `host_run` per host instead of
    the body.

    `host_run` is the command's typed single-host function (the one its body calls); its result's `detail()` is
    the summary column. `preflight(app, ("host", NAME))` runs for every host before any host starts: a bad
    inventory or flag set on one host refuses the whole command (exit 2) and changes nothing.
    `required`: the command needs target words (`deploy up` alone is refused; status may default to the only host).
    """

    def decorate(body: Callable[..., int]) -> Callable[..., int]:
        @click.option("--all", "all_hosts", is_flag=True, help="Every host in the inventory (a fleet run).")
        @click.option("--parallel", type=click.IntRange(min=1), default=DEFAULT_PARALLEL, show_default=True,
                      help="Fleet runs: at most N hosts at once.")
        @click.option("--fail-fast", is_flag=True,
                      help="Fleet runs: start no further host after a failure (those are reported as skipped).")
        @functools.wraps(body)
        def wrapper(app: AppContext, *args: Any, target: tuple[str, ...], all_hosts: bool, parallel: int,
                    fail_fast: bool, **kwargs: Any) -> int:
            spec = parse_targets(target, all_hosts=all_hosts)
            if required and spec.empty:
                raise UsageError("no host given", fix="e.g. `deploy up host 10.1.230.174`, `deploy up host a b`, "
                                                      "`deploy up group prod` or `deploy up --all`")
            if not spec.fleet:
                return body(app, *args, target=target, **kwargs)
            return run_fleet_command(app, spec, host_run, kwargs, parallel=parallel, fail_fast=fail_fast,
                                     preflight=preflight, annotate=annotate, fleet_preflight=fleet_preflight,
                                     claims=claims)

        return wrapper

    return decorate


def run_fleet_command(app: AppContext, spec: TargetSpec, host_run: HostRun, kwargs: dict[str, Any], *,
                      parallel: int, fail_fast: bool, preflight: Preflight | None = None,
                      annotate: Annotate | None = None, fleet_preflight: FleetPreflight | None = None,
                      claims: Claims | None = None) -> int:
    from orchestrator.fleet.progress import EventPrinter  # the live view's side: loaded by fleet runs only

    hosts = resolve_targets(app.inventory, spec)
    if preflight is not None:
        for host in hosts:
            preflight(app, ("host", host.name))
    if fleet_preflight is not None:
        fleet_preflight(app, hosts)
    inventory = app.inventory

    def job(name: str, events: HostEvents) -> HostOutcome:
        """The host's typed single-host run, judged; its step progress goes to the live view."""
        records: list[StepRecord] = []
        result: HostResult
        try:
            result = host_run(inventory, name, kwargs, EventPrinter(events, records))
        except DeployError as err:
            result = Refused(err)
        return host_outcome(name, result, records)

    command = "deploy " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    # A run that may change the router claims its hosts and the router first, as a fleet roll does.
    claimed = (claim_fleet([h.name for h in hosts], command, router=inventory.router is not None)
               if claims is not None and claims(kwargs) else contextlib.nullcontext())
    with claimed:
        return _run_and_print(app, spec, hosts, job, command, parallel=parallel, fail_fast=fail_fast,
                              annotate=annotate, kwargs=kwargs)


def _run_and_print(app: AppContext, spec: TargetSpec, hosts: list[Host], job: Callable[[str, HostEvents], HostOutcome],
                   command: str, *, parallel: int, fail_fast: bool, annotate: Annotate | None,
                   kwargs: dict[str, Any]) -> int:
    """The hosts' runs on the engine's pool, then the fleet annotation (the router), one report."""
    from orchestrator.fleet.view import FleetView, fleet_summary, summary_table, totals_text  # rich's live view

    view = FleetView(app.out.console, [h.name for h in hosts], enabled=not app.as_json, tty=sys.stdout.isatty())
    with view:
        run = run_fleet([h.name for h in hosts], job, parallel=parallel, fail_fast=fail_fast, on_event=view,
                        on_tick=view.tick)
    extra = (dict(annotate(app, run.outcomes, {**kwargs, "target_groups": spec.groups}) or {})
             if annotate is not None else {})
    extra_text = extra.pop("text", None)
    exit_code = max(run.exit_code, int(extra.pop("exit_code", 0) or 0))
    app.out.emit({"ok": exit_code == 0, "command": command, "targets": spec.describe(),
                  "changed": any(o.changed_steps for o in run.outcomes),
                  "fleet": fleet_summary(run, exit_code), **(extra or {}), "hosts": [o.to_dict() for o in run.outcomes],
                  **({"exit_code": exit_code} if exit_code != run.exit_code else {})})
    app.out.table(summary_table(run, f"{command}: {len(hosts)} host(s)"))
    app.out.line(totals_text(run, exit_code))
    if extra_text:
        app.out.line(str(extra_text))
    return exit_code


__all__ = ["fleet_options", "parse_targets", "run_fleet_command"]
