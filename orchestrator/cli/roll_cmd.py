"""`deploy roll`, `deploy rollback`, `deploy status`, `deploy history`."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.bench_cmd import print_ledger_runs
from orchestrator.cli.common import AppContext, all_inventories_option, common_options, resolve_host, tofu_option
from orchestrator.cli.progress import totals_line
from orchestrator.cli.run import command_line, run_with_progress
from orchestrator.cli.tables import Column, spec
from orchestrator.errors import ConfigError, DeployError
from orchestrator.fleet.command import fleet_options
from orchestrator.fleet.details import history_detail, status_detail
from orchestrator.fleet.router import router_view
from orchestrator.runner import RunReport
from orchestrator.steps.base import RunOptions
from orchestrator.steps.state import RollRequest, RunInputs
from orchestrator.yamlfile import load_yaml


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


@click.command("roll")
@click.argument("target", nargs=-1)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Set a server flag (repeatable).")
@click.option("--unset", "unsets", multiple=True, metavar="KEY", help="Remove a server flag (repeatable).")
@click.option("--flags", "flags_file", default=None, metavar="FILE", help="Replace the flag set with a YAML mapping.")
@click.option("--profile", "profile_name", default=None, help="Roll to another inventory profile's flags.")
@click.option("--accept-regression", is_flag=True, help="Keep the new release even if throughput regressed.")
@click.option("--threshold", type=float, default=None, help="Noise threshold in %% (default: the profile's, 5).")
@click.option("--preset", default=None, help="Bench preset for the throughput gate (default: the profile's).")
@click.option("--gate", "gate_metrics", multiple=True,
              type=click.Choice(["output_throughput", "mean_tpot_ms", "mean_ttft_ms"]),
              help="Metric the gate holds (repeatable; default: the profile's gate_metrics, output throughput).")
@click.option("--skip-bench", is_flag=True, help="Gate on health and smoke only.")
@click.option("--dry-run", is_flag=True, help="Show the diff and validate in the container; change nothing.")
@tofu_option
@common_options
def roll(app: AppContext, target: tuple[str, ...], sets: tuple[str, ...], unsets: tuple[str, ...],
         flags_file: str | None, profile_name: str | None, accept_regression: bool, threshold: float | None,
         preset: str | None, gate_metrics: tuple[str, ...], skip_bench: bool, dry_run: bool, tofu: bool) -> int:
    """Roll a new server flag set with a health gate, a throughput gate and automatic rollback.

    e.g. `deploy roll host 10.1.230.174 --set num-continuous-decode-steps=8`
    """
    if flags_file and profile_name:
        raise ConfigError("give either --flags or --profile")
    replacement: dict[str, Any] | None = None
    if flags_file:
        replacement = _flags_file(flags_file)
    elif profile_name:
        if profile_name not in app.inventory.profiles:
            raise ConfigError(f"no profile {profile_name!r}", fix=f"known: {', '.join(app.inventory.profiles)}")
        replacement = dict(app.inventory.profiles[profile_name].flags)
    if replacement is None and not sets and not unsets:
        raise ConfigError("nothing to roll", fix="give --set KEY=VALUE, --unset KEY, --flags FILE or --profile")
    if replacement is not None and (sets or unsets):
        raise ConfigError("--set/--unset cannot be combined with --flags/--profile")
    if preset:
        app.inventory.preset(preset)
    request = RollRequest(set=sets, unset=unsets, replacement=replacement, accept_regression=accept_regression,
                          threshold_pct=threshold, gate_metrics=gate_metrics)
    options = RunOptions(dry_run=dry_run, skip_bench=skip_bench, preset=preset, tofu=tofu, command=command_line())
    report: RunReport | None = None
    error: DeployError | None = None
    try:
        report = run_with_progress(app, target, "roll-plan" if dry_run else "roll", options,
                                   RunInputs(roll=request))
    except DeployError as err:
        error = err
    if error is not None:
        if app.as_json:
            app.out.emit({"ok": False, **error.to_dict()})
        else:
            click.echo(f"error: {error}", err=True)
            for line in list((error.details or {}).get("journal") or [])[-8:]:  # type: ignore[call-overload]
                click.echo(f"  journal: {line}", err=True)
        return error.exit_code
    assert report is not None
    payload = report.to_dict()
    cand = report.state.candidate
    payload["release"] = report.state.server.release
    payload["previous"] = cand.previous if cand else None
    payload["diff"] = [{"flag": k, "old": a, "new": b} for k, a, b in (cand.flag_diff if cand else [])]
    if report.state.gate is not None:
        payload["gate"] = report.state.gate.model_dump(mode="json")
    app.out.emit(payload)
    if dry_run:
        for rec in report.steps:
            for line in rec.details.get("unit_diff", []):
                app.out.line(line)
        app.out.line("dry run: nothing changed")
    else:
        app.out.line(f"release {payload['release']} is current (previous {payload['previous']})")
    app.out.line(totals_line(report))
    return 0


@click.command("rollback")
@click.argument("target", nargs=-1)
@click.option("--to", "to_release", default=None, metavar="RELEASE", help="Release id (default: the previous one).")
@tofu_option
@common_options
def rollback(app: AppContext, target: tuple[str, ...], to_release: str | None, tofu: bool) -> int:
    """Re-install a previous release and wait until it is healthy."""
    options = RunOptions(tofu=tofu, command=command_line())
    report = run_with_progress(app, target, "rollback", options, RunInputs(rollback_to=to_release))
    app.out.emit({**report.to_dict(), "release": report.state.server.release})
    app.out.line(totals_line(report))
    return 0


@click.command("status")
@click.argument("target", nargs=-1)
@tofu_option
@common_options
@fleet_options(detail=status_detail, annotate=router_view)
def status(app: AppContext, target: tuple[str, ...], tofu: bool) -> int:
    """Current release, health and GPU power now (one SSH round trip). Exit 1 when not healthy."""
    report = run_with_progress(app, target, "status", RunOptions(tofu=tofu, command="deploy status"), quiet=True)
    info = report.state.status
    if info is None:
        raise DeployError("the status playbook reported nothing", fix="check that it runs the status step",
                          host=report.host, step="status")
    healthy = info.health == "200"
    app.out.emit({"ok": healthy, "host": report.host, **info.to_dict(), "totals": report.to_dict()["totals"]})
    vmid = resolve_host(app, target).container.vmid
    if not info.container_running:
        app.out.line(f"host {report.host}: CT {vmid} is {info.container}; its release and sglang cannot be read "
                     f"until it runs. `deploy up host {report.host}` "
                     + ("starts it" if info.container != "absent" else "creates and starts it")
                     + (f" (or `pct start {vmid}` on the host)" if info.container != "absent" else ""))
    else:
        app.out.line(f"host {report.host}: release {info.release or 'none'} "
                     f"({info.verdict or 'unverified'}, {info.release_source or '-'}, "
                     f"{info.release_created or '-'}), sglang {info.active}, /health {info.health}")
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
    if info.container_running and not healthy:
        app.out.line(f"not healthy (/health {info.health}, sglang {info.active}): see "
                     "`journalctl -u sglang` in the container, `deploy doctor`, or `deploy rollback`")
    return 0 if healthy else 1


def _figure(verdict: dict[str, Any] | None, key: str) -> str:
    cand = (verdict or {}).get("candidate") or {}
    v = cand.get(key)
    return f"{v:.1f}" if isinstance(v, int | float) else "-"


def _power(verdict: dict[str, Any] | None) -> str:
    tel = (verdict or {}).get("telemetry") or {}
    gpus = tel.get("gpus") or []
    vals = [g.get("mean_power_w") for g in gpus if isinstance(g.get("mean_power_w"), int | float)]
    return f"{sum(vals):.0f}" if vals else "-"


@click.command("history")
@click.argument("target", nargs=-1)
@click.option("--bench", "bench", is_flag=True, help="Bench runs from the local ledger instead of releases.")
@click.option("--limit", default=20, show_default=True)
@all_inventories_option
@tofu_option
@common_options
@fleet_options(detail=history_detail)
def history(app: AppContext, target: tuple[str, ...], bench: bool, limit: int, all_inventories: bool,
            tofu: bool) -> int:
    """Releases on the target with time, flag diff, verdict, throughput and power; or `--bench` ledger runs.

    `--bench` lists the runs of the inventory's hosts (the ledger on this machine is shared by every
    inventory); `--all-inventories` lists every run in it.
    """
    if bench:
        return print_ledger_runs(app, target, limit, all_inventories)
    if all_inventories:
        raise ConfigError("--all-inventories applies to the local bench ledger",
                          fix="use it with --bench: deploy history --bench --all-inventories")
    report = run_with_progress(app, target, "history", RunOptions(tofu=tofu, command="deploy history"),
                               RunInputs(history_limit=limit), quiet=True)
    rows = report.state.history
    current = next((r.get("current") for r in rows if "current" in r), None)
    releases = [r for r in rows if "id" in r]
    app.out.emit({"ok": True, "host": report.host, "current": current, "releases": releases})
    table_rows = []
    for r in releases:
        meta = r.get("meta") or {}
        verdict = r.get("verdict")
        diff = meta.get("flag_diff") or []
        changes = ", ".join(f"{k}: {a}→{b}" for k, a, b in diff) if diff else ("(profile)" if meta else "")
        table_rows.append(("*" if r["id"] == current else "", r["id"], str(meta.get("source", "")),
                           str((verdict or {}).get("verdict", "unverified")), changes,
                           _figure(verdict, "output_throughput"), _power(verdict),
                           textwrap.shorten(str((verdict or {}).get("reason", "")), 160, placeholder=" …")))
    headers: list[str | Column] = ["", "release", "source", "verdict", "flag changes", Column("out tok/s", "right"),
               Column("GPU W (sum)", "right"), "reason"]
    app.out.table(spec(f"releases on {report.host}", headers, table_rows))
    return 0
