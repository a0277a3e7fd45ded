"""`deploy up host ADDR` and `deploy plan host ADDR`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from orchestrator.cli.common import (
    AppContext,
    common_options,
    inventory_names,
    is_router_worker,
    resolve_host,
    tofu_option,
)
from orchestrator.cli.fleet import fleet_options
from orchestrator.cli.run import command_line
from orchestrator.commands.up import UpRequest, UpResult, up_host
from orchestrator.commands.up import preflight as check_host
from orchestrator.engine.progress import StepPrinter, totals_line
from orchestrator.engine.step import RunOptions
from orchestrator.errors import ConfigError
from orchestrator.fleet.engine import HostOutcome
from orchestrator.fleet.targets import parse_targets
from orchestrator.inventory.models import Host, Inventory


def preflight(app: AppContext, words: tuple[str, ...]) -> None:
    """Refuse a bad inventory or flag set before any remote change (every host of a fleet, before any starts)."""
    check_host(app.inventory, resolve_host(app, words))


def router_preflight(app: AppContext, hosts: list[Host]) -> None:
    """Fleet `up`/`plan`: a bad router section refuses the whole command before any host starts."""
    from orchestrator.router.converge import preflight_router

    preflight_router(app.inventory)


def converge_router_after(app: AppContext, outcomes: list[HostOutcome], options: dict[str, Any]) -> dict[str, Any]:
    """After the hosts: converge the managed router with the hosts that came out healthy as its workers."""
    from orchestrator.router.converge import converge_router

    healthy = [o.host for o in outcomes if o.exit_code == 0 and o.result != "skipped"]
    dry_run = bool(options.get("dry_run", True))
    report = converge_router(app.inventory, [o.host for o in outcomes], healthy, dry_run=dry_run,
                             tofu=bool(options.get("tofu")), say=lambda m: app.out.line(f"router: {m}"))
    if report is None:
        return {}
    return {"router": report.to_dict(), "text": report.text(), "exit_code": report.exit_code}


def up_options(*, dry_run: bool, allow_no_p2p: bool, skip_weights: bool, skip_bench: bool, preset: str | None,
               tofu: bool, bench: bool = False) -> RunOptions:
    if bench and skip_bench:
        raise ConfigError("--bench and --skip-bench contradict each other", fix="give one of them")
    return RunOptions(dry_run=dry_run, allow_no_p2p=allow_no_p2p, skip_weights=skip_weights,
                      skip_bench=skip_bench, bench=bench, tofu=tofu, preset=preset, command=command_line())


def plan_options(*, tofu: bool) -> RunOptions:
    return RunOptions(dry_run=True, allow_no_p2p=True, skip_weights=True, skip_bench=True, tofu=tofu,
                      command="deploy plan")


#: `up`'s options that only `up host` (one host) takes: a fleet `up` never drains (a change rolls with `roll group`).
_ONE_HOST_OPTIONS = ("no_drain", "drain_timeout")


def up_on(inventory: Inventory, name: str, options: dict[str, Any], printer: StepPrinter) -> UpResult:
    """One host of a fleet `up`: the typed single-host run the command itself makes."""
    run = up_options(**{k: v for k, v in options.items() if k not in ("playbook", *_ONE_HOST_OPTIONS)})
    return up_host(inventory, UpRequest(inventory.find_host(name), options["playbook"], run),
                   progress=printer, say=printer.say)


def plan_on(inventory: Inventory, name: str, options: dict[str, Any], printer: StepPrinter) -> UpResult:
    """One host of a fleet `plan`."""
    return up_host(inventory, UpRequest(inventory.find_host(name), options["playbook"],
                                        plan_options(tofu=options["tofu"])), progress=printer, say=printer.say)


def run_and_report(app: AppContext, words: tuple[str, ...], playbook: str, options: RunOptions,
                   drain_timeout_s: float | None = None) -> int:
    """`playbook` is a shipped name (orchestrator/playbooks/NAME.yaml) or the path of a copied, edited one. A
    router worker's run that restarts its server is drained first (fleet/rotation.py) unless `drain_timeout_s` is
    None (--no-drain, `plan`) or a dry run."""
    host = resolve_host(app, words)
    out = app.out
    printer = app.step_printer()
    request = UpRequest(host, playbook, options)
    try:
        if drain_timeout_s is not None and not options.dry_run and is_router_worker(app.inventory, host.name):
            from orchestrator.commands.rotation import up_out_of_rotation

            result = up_out_of_rotation(app.inventory, request, drain_timeout_s=drain_timeout_s, progress=printer,
                                        say=printer.say)
        else:
            result = up_host(app.inventory, request, progress=printer, say=printer.say)
    finally:
        printer.close()
    out.emit(result.payload())  # a failed run's document keeps the steps and totals it ran, with the error's code
    if result.error is not None:
        if not app.as_json:
            click.echo(f"error: {result.error}", err=True)
        return result.exit_code
    out.line(totals_line(result.report))
    if result.note is not None:
        out.line(f"note: {result.note}")
    return 0


def one_host_drain(body: Callable[..., int]) -> Callable[..., int]:
    """--no-drain and --drain-timeout name `up host`'s drain: a fleet `up` never drains (a fleet-wide change rolls
    with `roll group`), so either given there is refused before any host starts."""

    @functools.wraps(body)
    def wrapper(app: AppContext, *args: Any, **kwargs: Any) -> int:
        given = [f"--{name.replace('_', '-')}" for name in _ONE_HOST_OPTIONS
                 if click.get_current_context().get_parameter_source(name) == ParameterSource.COMMANDLINE]
        if given and parse_targets(kwargs["target"], all_hosts=kwargs["all_hosts"]).fleet:
            raise ConfigError(f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} for one host (`up host`): "
                              "a fleet up does not drain its workers",
                              fix="drop them; to restart a fleet's servers with drains, `deploy roll group`")
        return body(app, *args, **kwargs)

    return wrapper


@click.command("up")
@click.argument("target", nargs=-1)
@click.option("--dry-run", is_flag=True, help="Show what would change; change nothing (same as `deploy plan`).")
@click.option("--allow-no-p2p", is_flag=True, help="Continue when the P2P check fails.")
@click.option("--skip-weights", is_flag=True, help="Do not download missing model weights; say what would be fetched.")
@click.option("--skip-bench", is_flag=True, help="Skip the throughput check.")
@click.option("--bench", "bench", is_flag=True,
              help="Run the throughput check even when nothing changed (by default a converged host is not loaded).")
@click.option("--preset", default=None, help="Bench preset for the throughput check (default: the profile's).")
@tofu_option
@click.option("--playbook", default="up", show_default=True, metavar="NAME|FILE",
              help="Playbook to run: a shipped name or your copied and edited YAML file.")
@click.option("--drain-timeout", type=float, default=120.0, show_default=True,
              help="`up host` of a router worker whose server restarts: seconds to wait for its requests to finish.")
@click.option("--no-drain", is_flag=True,
              help="`up host` of a router worker: restart it in place, in the router (its clients see the restart).")
@common_options
@inventory_names(preset="preset")
@one_host_drain
@fleet_options(up_on, preflight=preflight, required=True, fleet_preflight=router_preflight,
               annotate=converge_router_after, claims=lambda options: not options.get("dry_run"))
def up(app: AppContext, target: tuple[str, ...], dry_run: bool, allow_no_p2p: bool, skip_weights: bool,
       skip_bench: bool, bench: bool, preset: str | None, tofu: bool, playbook: str, drain_timeout: float,
       no_drain: bool) -> int:
    """Converge one host: `deploy up host 10.1.230.174`; or a fleet: `deploy up group prod` (see --parallel).

    Container with every GPU passed in, userspace driver = host kernel module, sglang at the pinned version,
    P2P verified, unit rendered and running, health, smoke and throughput checks. A second run changes nothing,
    and loads nothing: its throughput check runs only after a change, or with --bench.
    """
    options = up_options(dry_run=dry_run, allow_no_p2p=allow_no_p2p, skip_weights=skip_weights,
                         skip_bench=skip_bench, bench=bench, preset=preset, tofu=tofu)
    return run_and_report(app, target, playbook, options, drain_timeout_s=None if no_drain else drain_timeout)


@click.command("plan")
@click.argument("target", nargs=-1)
@tofu_option
@click.option("--playbook", default="up", show_default=True, metavar="NAME|FILE",
              help="Playbook to plan: a shipped name or your copied and edited YAML file.")
@common_options
@fleet_options(plan_on, preflight=preflight, required=True, fleet_preflight=router_preflight,
               annotate=converge_router_after)
def plan(app: AppContext, target: tuple[str, ...], tofu: bool, playbook: str) -> int:
    """What `deploy up` would change on this host; changes nothing."""
    return run_and_report(app, target, playbook, plan_options(tofu=tofu))


