"""The bench presets in `deploy bench --help`: a newcomer should not have to open presets.yaml to pick one."""

from __future__ import annotations

import click

from orchestrator.cli.common import AppContext
from orchestrator.errors import ConfigError
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import BenchPreset, Inventory
from orchestrator.local.paths import default_inventory_dir
from orchestrator.resources import example_inventory_dir


def describe_preset(p: BenchPreset) -> str:
    """One line: the token lengths, prompts, rate and concurrency that make a run of this preset what it is."""
    rate = "inf" if p.request_rate == "inf" else f"{p.request_rate:g}/s"
    parts = [f"{p.random_input_len} in / {p.random_output_len} out tokens", f"{p.num_prompts} prompts",
             f"rate {rate}"]
    if p.max_concurrency is not None:
        parts.append(f"max concurrency {p.max_concurrency}")
    parts.append(p.dataset_name + (f" {p.dataset_path}" if p.dataset_path else ""))
    return ", ".join(parts)


def preset_rows(inv: Inventory) -> list[tuple[str, str]]:
    defaults: dict[str, list[str]] = {}
    for name, prof in inv.profiles.items():
        defaults.setdefault(prof.bench_preset, []).append(name)
    rows = []
    for name, preset in inv.presets.items():
        line = describe_preset(preset)
        if name in defaults:
            line += f" (default of profile {', '.join(defaults[name])})"
        rows.append((name, line))
    return rows


def presets_section(ctx: click.Context) -> tuple[str, list[tuple[str, str]]]:
    """(section title, rows): the inventory's presets, or the shipped ones when the inventory cannot be read."""
    app = ctx.find_object(AppContext) or AppContext(str(default_inventory_dir()), as_json=False)
    dirs = app.inventory_paths
    try:
        return f"Presets (inventory {dirs})", preset_rows(load_inventory(app.inventory_dirs))
    except ConfigError as err:
        reason = err.what.splitlines()[0]
    example = example_inventory_dir()
    try:
        shipped = preset_rows(load_inventory(example))
    except ConfigError:
        shipped = []
    return f"Presets shipped with deploy, in {example} (not your inventory: {reason})", shipped


class BenchCommand(click.Command):
    """`deploy bench --help` ends with the presets it can run."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        title, rows = presets_section(ctx)
        with formatter.section(title):
            if rows:
                formatter.write_dl(rows)
            else:
                formatter.write_text("none found")
