"""`deploy power [host NAME] [--set W] [--gpu 0,1] [--dry-run]`: the GPUs' power limit as a managed setting.

Without --set it applies the inventory's `power_limit_w` (if any); with --dry-run it only shows what it would
change. Each GPU's limit, range and default is printed as read back from the node (docs/power.md)."""

from __future__ import annotations

import click

from orchestrator.cli.common import AppContext, common_options, resolve_host, tofu_option
from orchestrator.engine.progress import totals_line
from orchestrator.engine.runner import run_playbook_to_end
from orchestrator.engine.state import RunInputs
from orchestrator.engine.step import RunOptions
from orchestrator.errors import ConfigError
from orchestrator.render.power_unit import UNIT_NAME, PowerSetting
from orchestrator.ui.tables import spec


def parse_gpus(text: str | None) -> tuple[int, ...] | None:
    """`--gpu 0,3` → (0, 3); refused (exit 2) unless it is a list of GPU indices."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if not parts or not all(p.isdigit() for p in parts):
        raise ConfigError(f"--gpu {text!r} is not a list of GPU indices", fix="e.g. --gpu 0 or --gpu 0,1,2,3")
    return tuple(sorted({int(p) for p in parts}))


def _w(v: float | None) -> str:
    return "N/A" if v is None else f"{v:g} W"


@click.command("power")
@click.argument("target", nargs=-1)
@click.option("--set", "watts", type=int, default=None, help="The power limit in watts (else the inventory's).")
@click.option("--gpu", "gpus", default=None, help="Only these GPU indices (comma-separated); default every GPU.")
@click.option("--dry-run", is_flag=True, help="Show what would change; change nothing.")
@tofu_option
@common_options
def power(app: AppContext, target: tuple[str, ...], watts: int | None, gpus: str | None, dry_run: bool,
          tofu: bool) -> int:
    """Set the GPUs' power limit (nvidia-smi -pl), refused before any change outside a GPU's range, read back,
    and kept by a host unit that re-applies it after a reboot or a driver reload.

    Exit 0 when the limit is in force, 2 for a refused value (nothing changed), 1 when the node refused it.
    """
    indices = parse_gpus(gpus)
    if indices is not None and watts is None:
        raise ConfigError("--gpu needs --set", fix="e.g. deploy power --set 450 --gpu 0,1")
    host = resolve_host(app, target)
    setting = PowerSetting(watts, indices) if watts is not None else None
    printer = app.step_printer()
    try:
        report = run_playbook_to_end("power", host, app.inventory,
                                     RunOptions(dry_run=dry_run, tofu=tofu, command="deploy power"),
                                     progress=printer, say=printer.say, inputs=RunInputs(power_limit=setting))
    finally:
        printer.close()
    app.out.emit({**report.to_dict(),
                  "gpus": [g.to_dict() for g in report.state.power_limits],
                  "recorded": ({"watts": report.state.power_recorded.watts,
                                "indices": list(report.state.power_recorded.indices or []) or None}
                               if report.state.power_recorded else None)})
    if report.failure is not None:
        if not app.as_json:
            click.echo(f"error: {report.failure}", err=True)
        return report.failure.exit_code
    rows = [(str(g.index), g.bus_id, _w(g.limit_w), _w(g.min_w), _w(g.max_w), _w(g.default_w))
            for g in report.state.power_limits]
    app.out.table(spec(f"power: {host.name}", ("gpu", "bus id", "limit", "min", "max", "default"), rows))
    rec = report.state.power_recorded
    app.out.line(f"{UNIT_NAME}: " + (rec.describe() if rec else "none (no limit recorded)"))
    app.out.line(totals_line(report))
    return 0
