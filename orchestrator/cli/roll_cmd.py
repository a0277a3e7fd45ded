"""`deploy roll`, `deploy rollback`, `deploy status`, `deploy history`."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from orchestrator.cli.common import (
    AppContext,
    all_inventories_option,
    common_options,
    inventory_names,
    is_router_worker,
    resolve_host,
    tofu_option,
)
from orchestrator.cli.fleet import fleet_options
from orchestrator.cli.run import command_line, step_progress
from orchestrator.commands.history import BenchRuns, HistoryRequest, ReleaseHistory, host_bench_runs, release_history
from orchestrator.commands.result import HostRequest
from orchestrator.commands.roll import RollOutcome, refused, roll_host, rollback_host, rollback_payload
from orchestrator.commands.status import StatusResult, status_host
from orchestrator.engine.progress import StepPrinter, totals_line
from orchestrator.engine.state import RollRequest
from orchestrator.engine.step import RunOptions
from orchestrator.errors import ConfigError, DeployError
from orchestrator.fleet.targets import parse_targets
from orchestrator.hardware.state import HardwareState
from orchestrator.inventory.models import Inventory
from orchestrator.local.yamlfile import load_yaml
from orchestrator.parsers.boot import BootStart
from orchestrator.releases.documents import ReleaseMeta, ReleaseVerdict, StackMeta
from orchestrator.releases.store import RELEASE_ID
from orchestrator.steps.release import drift_line
from orchestrator.ui.tables import Column, spec
from orchestrator.watchdog.parse import WatchdogStatus

# The fleet roll, the router's view, the bench ledger and its table load in the commands that use them: every
# single-host `status` imports this module, and they cost it ~0.1 s of CPU (tests/unit/test_lazy_imports.py).
if TYPE_CHECKING:
    from orchestrator.fleet.engine import HostOutcome


def _flags_file(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--flags file {p} does not exist")
    data = load_yaml(p)  # refuses a flag written twice, naming the line
    if isinstance(data, dict) and set(data) == {"flags"}:
        data = data["flags"]
    if not isinstance(data, dict):
        raise ConfigError(f"--flags file {p} must be a mapping of flag name → value",
                          fix="e.g. `max-running-requests: 2048` one per line")
    return data


def _request(app: AppContext, sets: tuple[str, ...], unsets: tuple[str, ...], flags_file: str | None,
             profile_name: str | None, accept_regression: bool, threshold: float | None,
             gate_metrics: tuple[str, ...]) -> RollRequest:
    if flags_file and profile_name:
        raise ConfigError("give either --flags or --profile")
    replacement: dict[str, Any] | None = None
    if flags_file:
        replacement = _flags_file(flags_file)
    elif profile_name:
        replacement = dict(app.inventory.profile(profile_name).flags)
    if replacement is None and not sets and not unsets:
        raise ConfigError("nothing to roll", fix="give --set KEY=VALUE, --unset KEY, --flags FILE or --profile")
    if replacement is not None and (sets or unsets):
        raise ConfigError("--set/--unset cannot be combined with --flags/--profile")
    return RollRequest(set=sets, unset=unsets, replacement=replacement, accept_regression=accept_regression,
                       threshold_pct=threshold, gate_metrics=gate_metrics, stack_profile=profile_name)


@click.command("roll")
@click.argument("target", nargs=-1)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set a server flag (repeatable).")
@click.option("--unset", "unsets", multiple=True, metavar="KEY", help="Remove a server flag (repeatable).")
@click.option("--flags", "flags_file", default=None, metavar="FILE", help="Replace the flag set with a YAML mapping.")
@click.option("--profile", "profile_name", default=None,
              help="Roll to an inventory profile: its flags and its stack (sglang pin, extras, lock).")
@click.option("--accept-regression", is_flag=True, help="Keep the new release even if throughput regressed.")
@click.option("--threshold", type=float, default=None, help="Noise threshold in % (default: the profile's, 5).")
@click.option("--preset", default=None, help="Bench preset for the throughput gate (default: the profile's).")
@click.option("--gate", "gate_metrics", multiple=True,
              type=click.Choice(["output_throughput", "mean_tpot_ms", "mean_ttft_ms"]),
              help="Metric the gate holds (repeatable; default: the profile's gate_metrics, output throughput).")
@click.option("--skip-bench", is_flag=True, help="Gate on health and smoke only.")
@click.option("--dry-run", is_flag=True, help="Show the diff and validate in the container; change nothing.")
@click.option("--all", "all_hosts", is_flag=True, help="Every host in the inventory (a fleet roll).")
@click.option("--canary", type=int, default=None, help="Fleet rolls: hosts rolled first [default: 1].")
@click.option("--batch", default=None, help="Fleet rolls: hosts per wave after the canary, N or P% [default: 25%].")
@click.option("--max-unavailable", type=int, default=None,
              help="Fleet rolls: at most N hosts out of service at once [default: 1].")
@click.option("--stage-only", is_flag=True,
              help="Fleet rolls with --profile: build its stack on every host, in parallel; stop there.")
@click.option("--rollback-all", is_flag=True, help="Fleet rolls: on a failure, roll back the hosts already rolled too.")
@click.option("--resume", is_flag=True, help="Fleet rolls: continue the interrupted fleet roll of these hosts.")
@click.option("--drain-timeout", type=float, default=120.0, show_default=True,
              help="Behind a router: seconds to wait for a drained host's requests to finish.")
@click.option("--no-drain", is_flag=True,
              help="`roll host` of a router worker: restart it in place, in the router (its clients see the restart).")
@tofu_option
@common_options
@inventory_names(preset="preset", profile="profile_name")
def roll(app: AppContext, target: tuple[str, ...], sets: tuple[str, ...], unsets: tuple[str, ...],
         flags_file: str | None, profile_name: str | None, accept_regression: bool, threshold: float | None,
         preset: str | None, gate_metrics: tuple[str, ...], skip_bench: bool, dry_run: bool, all_hosts: bool,
         canary: int | None, batch: str | None, max_unavailable: int | None, rollback_all: bool, resume: bool,
         drain_timeout: float, no_drain: bool, tofu: bool, stage_only: bool) -> int:
    """Roll a new server flag set with a health gate, a throughput gate and automatic rollback.

    e.g. `deploy roll host 10.1.230.174 --set num-continuous-decode-steps=8`;
    a fleet: `deploy roll group prod --set K=V --canary 1 --batch 25% --max-unavailable 1 [--rollback-all]`
    """
    from orchestrator.fleet.fleet_roll import fleet_roll
    from orchestrator.fleet.rollout import RollSpec

    targets = parse_targets(target, all_hosts=all_hosts)
    fleet_only = {"--canary": canary is not None, "--batch": batch is not None,
                  "--max-unavailable": max_unavailable is not None, "--rollback-all": rollback_all,
                  "--resume": resume, "--stage-only": stage_only}
    if not targets.fleet:
        given = [k for k, v in fleet_only.items() if v]
        if given:
            raise ConfigError(f"{', '.join(given)} apply to fleet rolls (a group, several hosts or --all)",
                              fix="e.g. `deploy roll group prod --set K=V --canary 1 --batch 25%`")
    if targets.fleet and resume:
        if sets or unsets or flags_file or profile_name or dry_run:
            raise ConfigError("--resume replays the interrupted fleet roll's own flag change and options",
                              fix=f"drop --set/--unset/--flags/--profile/--dry-run: `deploy roll {targets.describe()} "
                                  "--resume`")
        return fleet_roll(app, targets, None, tofu=tofu, resume=True, drain_timeout_s=drain_timeout)
    request = _request(app, sets, unsets, flags_file, profile_name, accept_regression, threshold, gate_metrics)
    if not targets.fleet:
        return roll_one(app, target, request, preset=preset, skip_bench=skip_bench, dry_run=dry_run, tofu=tofu,
                        drain_timeout_s=None if no_drain else drain_timeout)
    if no_drain:
        raise ConfigError("--no-drain is for one host (`roll host`): a fleet roll always drains through the router",
                          fix="drop --no-drain")
    if dry_run:
        raise ConfigError("--dry-run is for one host", fix="`deploy plan`-like check per host: deploy roll host X "
                                                           "--set K=V --dry-run")
    spec = RollSpec(set=list(sets), unset=list(unsets), replacement=request.replacement,
                    accept_regression=accept_regression, threshold_pct=threshold, gate_metrics=list(gate_metrics),
                    preset=preset, skip_bench=skip_bench, canary=1 if canary is None else canary,
                    batch=batch or "25%", max_unavailable=1 if max_unavailable is None else max_unavailable,
                    rollback_all=rollback_all, stack_profile=profile_name, stage_only=stage_only)
    return fleet_roll(app, targets, spec, tofu=tofu, resume=False, drain_timeout_s=drain_timeout)


def roll_one(app: AppContext, target: tuple[str, ...], request: RollRequest, *, preset: str | None,
             skip_bench: bool, dry_run: bool, tofu: bool, drain_timeout_s: float | None = None) -> int:
    """One host's roll (`deploy roll host X`): run it with the step printer, then print its outcome. A router
    worker is drained for it (fleet/rotation.py) unless `drain_timeout_s` is None (--no-drain) or a dry run."""
    options = RunOptions(dry_run=dry_run, skip_bench=skip_bench, preset=preset, tofu=tofu, command=command_line())
    try:
        host = resolve_host(app, target)
    except DeployError as err:
        return print_roll(app, refused("", err), dry_run=dry_run)
    printer = app.step_printer()
    try:
        if drain_timeout_s is not None and not dry_run and is_router_worker(app.inventory, host.name):
            from orchestrator.commands.rotation import roll_out_of_rotation

            printer.say(f"{host.name} is a router worker: the roll is checked first, then {host.name} is drained "
                        "from the router, rolled and added back (--no-drain: in place)")
            outcome = roll_out_of_rotation(host, app.inventory, request, options, drain_timeout_s=drain_timeout_s,
                                           progress=printer, say=printer.say)
        else:
            outcome = roll_host(host, app.inventory, request, options, progress=printer, say=printer.say)
    finally:
        printer.close()
    return print_roll(app, outcome, dry_run=dry_run)


def print_roll(app: AppContext, outcome: RollOutcome, *, dry_run: bool) -> int:
    """The roll's JSON document, or its error with the journal's last lines, or the releases and totals."""
    error = outcome.error
    if error is not None:
        if app.as_json:
            app.out.emit(outcome.payload())
        else:
            click.echo(f"error: {error}", err=True)
            for line in list((error.details or {}).get("journal") or [])[-8:]:  # type: ignore[call-overload]
                click.echo(f"  journal: {line}", err=True)
        return error.exit_code
    report = outcome.report
    assert report is not None
    app.out.emit(outcome.payload())
    if dry_run:
        for line in report.state.candidate.unit_diff if report.state.candidate is not None else []:
            app.out.line(line)
        app.out.line("dry run: nothing changed")
    else:
        app.out.line(f"release {outcome.release} is current (previous {outcome.previous})")
    app.out.line(totals_line(report))
    return 0


@click.command("rollback")
@click.argument("target", nargs=-1)
@click.option("--to", "to_release", default=None, metavar="RELEASE", help="Release id (default: the previous one).")
@click.option("--all", "all_hosts", is_flag=True, help="Every host in the inventory (reverts its last fleet roll).")
@click.option("--drain-timeout", type=float, default=120.0, show_default=True,
              help="Fleets behind a router: seconds to wait for a drained host's requests to finish.")
@click.option("--force", is_flag=True,
              help="Fleets: revert a host even when releases were installed on it after the fleet roll.")
@click.option("--no-drain", is_flag=True,
              help="`rollback host` of a router worker: restart it in place, in the router.")
@tofu_option
@common_options
def rollback(app: AppContext, target: tuple[str, ...], to_release: str | None, all_hosts: bool,
             drain_timeout: float, force: bool, no_drain: bool, tofu: bool) -> int:
    """Re-install a previous release and wait until it is healthy.

    On a fleet (`deploy rollback group prod`): every host the last fleet roll of those hosts changed goes back
    to the release it had before that roll, drained through the router like a roll. One router worker is drained
    for its restart too (--no-drain: restarted in place).
    """
    if to_release is not None and not RELEASE_ID.match(to_release):  # `--to ''` is no "default"
        raise ConfigError(f"--to {to_release!r} is not a release id (like 20261130T020000-abababab)",
                          fix="`deploy history host X` lists the ids; leave --to out for the previous release")
    targets = parse_targets(target, all_hosts=all_hosts)
    if targets.fleet:
        if to_release:
            raise ConfigError("--to names one host's release", fix="use it with `deploy rollback host X --to ID`")
        if no_drain:
            raise ConfigError("--no-drain is for one host (`rollback host`): a fleet rollback always drains",
                              fix="drop --no-drain")
        from orchestrator.fleet.fleet_roll import fleet_rollback

        return fleet_rollback(app, targets, tofu=tofu, drain_timeout_s=drain_timeout, force=force)
    host = resolve_host(app, target)
    printer = app.step_printer()
    options = RunOptions(tofu=tofu, command=command_line())
    try:
        if not no_drain and is_router_worker(app.inventory, host.name):
            from orchestrator.commands.rotation import rollback_out_of_rotation

            report = rollback_out_of_rotation(host, app.inventory, to_release, options, drain_timeout_s=drain_timeout,
                                              progress=printer, say=printer.say)
        else:
            report = rollback_host(host, app.inventory, to_release, options, progress=printer, say=printer.say)
    finally:
        printer.close()
    app.out.emit(rollback_payload(report))  # a failed one's keeps the steps and totals it ran
    if report.failure is not None:
        if not app.as_json:
            click.echo(f"error: {report.failure}", err=True)
        return report.failure.exit_code
    app.out.line(totals_line(report))
    return 0


def status_on(inventory: Inventory, name: str, options: dict[str, Any], printer: StepPrinter) -> StatusResult:
    """One host of a fleet `status`: the typed single-host read the command itself makes."""
    return status_host(inventory, HostRequest(inventory.find_host(name), options["tofu"]), progress=printer,
                       say=printer.say)


def router_view(app: AppContext, outcomes: list[HostOutcome],
                options: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """A fleet `status`: the router's view beside the hosts (orchestrator.cli.router_view)."""
    from orchestrator.cli.router_view import router_view as view

    return view(app, outcomes, options)


@click.command("status")
@click.argument("target", nargs=-1)
@tofu_option
@common_options
@fleet_options(status_on, annotate=router_view)
def status(app: AppContext, target: tuple[str, ...], tofu: bool) -> int:
    """Current release, health and GPU power now (one SSH round trip). Exit 1 when not healthy."""
    host = resolve_host(app, target)
    with step_progress(app, quiet=True) as printer:
        result = status_host(app.inventory, HostRequest(host, tofu), progress=printer, say=printer.say)
    report, info, hardware = result.report, result.info, result.hardware
    gave_up, blind, healthy = result.gave_up, result.blind, result.healthy
    app.out.emit(result.payload())
    vmid = host.container.vmid
    if not info.container_running:
        app.out.line(f"host {report.host}: CT {vmid} is {info.container}; its release and sglang cannot be read "
                     f"until it runs. `deploy up host {report.host}` "
                     + ("starts it" if info.container != "absent" else "creates and starts it")
                     + (f" (or `pct start {vmid}` on the host)" if info.container != "absent" else ""))
    else:
        app.out.line(f"host {report.host}: {info.release_line()}")
        if info.stack:
            app.out.line(f"stack: {stack_cell(StackMeta.from_data(info.stack))} in {info.stack.get('venv')}")
        if info.last_boot is not None:
            app.out.line(boot_line(info.last_boot, len(info.boots)))
        if info.kernel_cache is not None:
            app.out.line(info.kernel_cache.line())
        if info.stack_drift:
            app.out.line(f"stack drift against the lock: {', '.join(info.stack_drift)}")
        for line in info.patch_drift:
            app.out.line(f"patched file changed: {line} (docs/troubleshooting.md#a-patched-file-changed)")
        if info.drift:
            app.out.line(f"drift: {drift_line(info.drift, host.profile)}")
        if info.tune_trial:
            app.out.line(f"tune: release {info.release} is a trial point of tune {info.tune_trial}, not a release "
                         f"anyone kept; unless that tune runs now, `deploy tune host {report.host} --resume "
                         f"{info.tune_trial}` (on the machine that ran it) finishes it and restores the original, "
                         f"and `deploy up` refuses the host until then")
    gpu_rows = []
    for g in info.gpus:
        power_w, limit_w, util = g.get("power_w"), g.get("limit_w"), g.get("util_pct")
        pct = (100 * power_w / limit_w) if power_w and limit_w else None
        gpu_rows.append((str(g["gpu"]), f"{power_w:.0f}" if power_w is not None else "-",
                         f"{limit_w:.0f}" if limit_w is not None else "-",
                         f"{pct:.0f}" if pct is not None else "-",
                         f"{util:.0f}" if util is not None else "-"))
    headers = [Column(h, "right") for h in ("gpu", "power W", "limit W", "% of limit", "util %")]
    app.out.table(spec("GPU power now", headers, gpu_rows))
    if info.watchdog is not None:
        print_watchdog(app, info.watchdog)
    if hardware is not None and hardware.faulty:
        print_hardware(app, hardware, report.host)
    if hardware is not None and hardware.fatal:
        app.out.line(f"GPU hardware fault: the host cannot serve until it is remedied ({hardware.action.value}); "
                     "the fix of each GPU is above (docs/hardware.md)")
    elif gave_up:
        app.out.line("the watchdog gave up restarting sglang (its restart budget is spent): the server may be stuck; "
                     "see `journalctl -u sglang -u sglang-watchdog` in the container, `deploy doctor`, "
                     "docs/troubleshooting.md")
    elif blind:
        app.out.line(f"the watchdog is not watching: {blind}; nothing restarts a stuck server. See `journalctl -u "
                     "sglang-watchdog` in the container; `deploy up` reinstalls it (docs/troubleshooting.md)")
    elif info.container_running and not healthy:
        app.out.line(f"not healthy (/health {info.health}, sglang {info.active}): see "
                     "`journalctl -u sglang` in the container, `deploy doctor`, or `deploy rollback`")
    return result.exit_code


def boot_line(boot: BootStart, starts: int) -> str:
    """`last start: warm start 19 s (longest: capture 12 s), at T; weights 4 s, capture 12 s, … (2 starts)`."""
    phases = ", ".join(f"{p.name} {p.seconds:.0f} s" if p.seconds is not None else f"{p.name} (not finished)"
                       for p in boot.phases)
    return (f"last start: {boot.summary()}, at {boot.started_at or '-'}; {phases} "
            f"({starts} start(s) of this release recorded)")


def print_hardware(app: AppContext, state: HardwareState, host: str) -> None:
    """The GPUs with a hardware fault: each fault with its evidence line and the catalog's fix."""
    rows = []
    for gpu in state.faulty:
        for f in gpu.faults:
            rows.append((gpu.name, f.severity, f.meaning, f.evidence,
                         f.fix(host, str(gpu.index if gpu.index is not None else gpu.bus_id))))
    app.out.table(spec("GPU hardware", ("gpu", "state", "fault", "evidence", "fix"), rows))


def print_watchdog(app: AppContext, wd: WatchdogStatus, limit: int = 5) -> None:
    """The watchdog's state line and its last actions (restarts, give-ups), newest last."""
    if wd.state == "absent":
        app.out.line("watchdog: not installed (`deploy up` installs it; profile watchdog.enabled)")
        return
    app.out.line(f"watchdog: {wd.state}" + (f" ({wd.reason})" if wd.reason else "")
                 + f"; {wd.restarts_in_window} of {wd.budget} restart(s) used in the last {wd.window_s:.0f} s; "
                 + f"last check {wd.to_dict()['last_check'] or '-'}")
    rows = [(a["at"] or "-", a["action"], a["reason"]) for a in wd.to_dict()["actions"][-limit:]]
    if rows:
        app.out.table(spec("watchdog: last actions", ("at", "action", "reason"), rows))


def _last_start(boot: object) -> str:
    """History's cell of a release's last start: `warm 19 s`, `cold 61 s`, `cold, not finished`, or `-`."""
    if not isinstance(boot, dict):
        return "-"
    try:
        start = BootStart.model_validate(boot)
    except ValueError:
        return "-"
    kind = {True: "cold", False: "warm", None: "start"}[start.cold]
    return f"{kind} {start.total_s:.0f} s" if start.total_s is not None else f"{kind}, not finished"


def _throughput(verdict: ReleaseVerdict | None) -> str:
    tput = verdict.candidate.output_throughput if verdict is not None and verdict.candidate else None
    return f"{tput:.1f}" if tput is not None else "-"


def _preset(verdict: ReleaseVerdict | None) -> str:
    """The preset the release's figures were measured with: tok/s of two presets are not comparable."""
    return (verdict.measured_preset if verdict is not None else None) or "-"


def _power(verdict: ReleaseVerdict | None) -> str:
    watts = verdict.telemetry.total_power_w if verdict is not None and verdict.telemetry is not None else None
    return f"{watts:.0f}" if watts is not None else "-"


def stack_cell(stack: StackMeta | None, sglang_version: str | None = None) -> str:
    """`sglang 0.5.23 @ 50c1fa50a5bb` (the release's stack); a release of an earlier deploy ran the profile venv."""
    if stack is not None and stack.document():
        patched = f" + {len(stack.patches)} patch(es)" if stack.patches else ""
        return f"sglang {stack.sglang_version} @ {stack.sha}{patched}"
    return f"sglang {sglang_version} (profile venv)" if sglang_version else ""


def releases_only(all_inventories: bool) -> None:
    if all_inventories:
        raise ConfigError("--all-inventories applies to the local bench ledger",
                          fix="use it with --bench: deploy history --bench --all-inventories")


def history_on(inventory: Inventory, name: str, options: dict[str, Any], printer: StepPrinter
               ) -> ReleaseHistory | BenchRuns:
    """One host of a fleet `history`: its releases, or (`--bench`) its runs in the local ledger."""
    if options["bench"]:
        from orchestrator.store.store import ledger as store_ledger

        ledger = store_ledger()
        return host_bench_runs(ledger, inventory.find_host(name).name, options["limit"])
    releases_only(options["all_inventories"])
    return release_history(inventory, HistoryRequest(inventory.find_host(name), options["limit"], options["tofu"]),
                           progress=printer, say=printer.say)


@click.command("history")
@click.argument("target", nargs=-1)
@click.option("--bench", "bench", is_flag=True, help="Bench runs from the local ledger instead of releases.")
@click.option("--limit", default=20, show_default=True)
@all_inventories_option
@tofu_option
@common_options
@fleet_options(history_on)
def history(app: AppContext, target: tuple[str, ...], bench: bool, limit: int, all_inventories: bool,
            tofu: bool) -> int:
    """Releases on the target with time, flag diff, verdict, throughput and power; or `--bench` ledger runs.

    `--bench` lists the runs of the inventory's hosts (the ledger on this machine is shared by every
    inventory); `--all-inventories` lists every run in it.
    """
    if bench:
        from orchestrator.cli.bench_cmd import print_ledger_runs

        return print_ledger_runs(app, target, limit, all_inventories)
    releases_only(all_inventories)
    host = resolve_host(app, target)
    with step_progress(app, quiet=True) as printer:
        result = release_history(app.inventory, HistoryRequest(host, limit, tofu), progress=printer, say=printer.say)
    current, releases, wd, events = result.current, result.releases, result.watchdog, result.events
    app.out.emit(result.payload())
    table_rows = []
    for r in releases:
        meta, verdict = r.meta or ReleaseMeta(), r.verdict
        diff = meta.flag_diff or []
        profile = "(profile)" if r.meta is not None and r.meta.document() else ""
        changes = ", ".join(f"{k}: {a}→{b}" for k, a, b in diff) if diff else profile
        word = verdict.verdict if verdict is not None and "verdict" in verdict.model_fields_set else "unverified"
        table_rows.append(("*" if r.id == current else "", str(r.id), meta.source or "", str(word),
                           stack_cell(meta.stack, meta.sglang_version), changes,
                           _preset(verdict), _throughput(verdict), _power(verdict), _last_start(r.boot),
                           textwrap.shorten(str((verdict.reason if verdict is not None else None) or ""), 160,
                                            placeholder=" …")))
    headers: list[str | Column] = ["", "release", "source", "verdict", "stack", "flag changes", "preset",
                                   Column("out tok/s", "right"), Column("GPU W (sum)", "right"), "last start", "reason"]
    app.out.table(spec(f"releases on {result.host}", headers, table_rows))
    if wd is not None and wd.actions:
        wd_rows = [(a["at"] or "-", a["action"], a["reason"]) for a in wd.to_dict()["actions"][-limit:]]
        app.out.table(spec(f"watchdog actions on {result.host}", ("at", "action", "reason"), wd_rows))
    if events:
        app.out.table(spec(f"GPU fault events of {result.host} (deploy watch)", ("at", "event", "detail"),
                           [(e.at, e.kind, e.detail) for e in events]))
    return 0
