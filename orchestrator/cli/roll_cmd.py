"""`deploy roll`, `deploy rollback`, `deploy status`, `deploy history`."""

from __future__ import annotations

import shlex
import sys
import textwrap
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.common import AppContext, all_inventories_option, common_options, resolve_host, tofu_option
from orchestrator.cli.progress import totals_line
from orchestrator.cli.tables import Column, spec
from orchestrator.errors import ConfigError, DeployError
from orchestrator.fleet.command import fleet_options
from orchestrator.fleet.details import history_detail, status_detail
from orchestrator.fleet.router import router_view
from orchestrator.runner import RunReport, run_playbook
from orchestrator.steps.base import RunOptions
from orchestrator.yamlfile import load_yaml


def _command_line() -> str:
    return "deploy " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def run_with_progress(app: AppContext, target: tuple[str, ...], playbook: str, options: RunOptions,
                      shared: dict[str, Any] | None = None, *, quiet: bool = False) -> RunReport:
    host = resolve_host(app, target)
    printer = app.step_printer(quiet=quiet)
    try:
        return run_playbook(playbook, host, app.inventory, options, progress=printer, say=printer.say,
                            shared=shared)
    finally:
        printer.close()


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
    shared = {"roll": {"set": list(sets), "unset": list(unsets), "flags_file": replacement,
                       "accept_regression": accept_regression, "threshold": threshold,
                       "gate": list(gate_metrics)}}
    options = RunOptions(dry_run=dry_run, skip_bench=skip_bench, preset=preset, tofu=tofu, command=_command_line())
    report: RunReport | None = None
    error: DeployError | None = None
    try:
        report = run_with_progress(app, target, "roll-plan" if dry_run else "roll", options, shared)
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
    gate = report.shared.get("gate")
    payload["release"] = report.shared.get("release")
    payload["previous"] = report.shared.get("previous")
    payload["diff"] = [{"flag": k, "old": a, "new": b} for k, a, b in report.shared.get("flag_diff", [])]
    if gate is not None:
        payload["gate"] = gate.model_dump(mode="json")
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
    options = RunOptions(tofu=tofu, command=_command_line())
    report = run_with_progress(app, target, "rollback", options, {"rollback_to": to_release})
    app.out.emit({**report.to_dict(), "release": report.shared.get("release")})
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
    info = report.shared.get("status", {})
    healthy = info.get("health") == "200"
    app.out.emit({"ok": healthy, "host": report.host, **info, "totals": report.to_dict()["totals"]})
    app.out.line(f"host {report.host}: release {info.get('release') or 'none'} "
                 f"({info.get('verdict') or 'unverified'}, {info.get('release_source') or '-'}, "
                 f"{info.get('release_created') or '-'}), sglang {info.get('active')}, /health {info.get('health')}")
    gpu_rows = []
    for g in info.get("gpus", []):
        pct = (100 * g["power_w"] / g["limit_w"]) if g.get("power_w") and g.get("limit_w") else None
        gpu_rows.append((str(g["gpu"]), f"{g['power_w']:.0f}" if g.get("power_w") is not None else "-",
                         f"{g['limit_w']:.0f}" if g.get("limit_w") is not None else "-",
                         f"{pct:.0f}" if pct is not None else "-",
                         f"{g['util_pct']:.0f}" if g.get("util_pct") is not None else "-"))
    headers = [Column(h, "right") for h in ("gpu", "power W", "limit W", "% of limit", "util %")]
    app.out.table(spec("GPU power now", headers, gpu_rows))
    if not healthy:
        app.out.line(f"not healthy (/health {info.get('health')}, sglang {info.get('active')}): see "
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
        from orchestrator.cli.bench_cmd import print_ledger_runs

        return print_ledger_runs(app, target, limit, all_inventories)
    if all_inventories:
        raise ConfigError("--all-inventories applies to the local bench ledger",
                          fix="use it with --bench: deploy history --bench --all-inventories")
    report = run_with_progress(app, target, "history", RunOptions(tofu=tofu, command="deploy history"),
                               {"limit": limit}, quiet=True)
    rows = report.shared.get("history", [])
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
