"""`deploy init DIR`: a commented example inventory for a new site, to edit before the first `deploy` run."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import click

from orchestrator.cli.common import AppContext, common_options
from orchestrator.errors import ConfigError
from orchestrator.inventory.example import EXAMPLE_FILES, write_example
from orchestrator.inventory.loader import inventory_files, load_inventory
from orchestrator.local.paths import default_inventory_dir
from orchestrator.resources import example_inventory_dir

HELP = """Write an example inventory (hosts, profiles, bench presets; groups commented) into DIR.

The host is the worked example (pve-gpu-1): edit hosts.yaml for your PVE node before running anything against it.
A directory that already holds inventory YAML is refused (nothing is written) unless --force, which replaces
hosts.yaml, profiles.yaml and presets.yaml and leaves other files alone. A symbolic link of one of those names is
replaced itself: the file it points to is never written.
"""


def _next_command(directory: Path, host: str) -> str:
    """The command to run next: with --inventory unless DIR is the directory deploy reads by default."""
    if directory.resolve() == default_inventory_dir().resolve():
        return f"deploy doctor host {host}"
    return f"deploy --inventory {shlex.quote(str(directory))} doctor host {host}"


@click.command(name="init", help=HELP)
@click.argument("directory", metavar="DIR", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="Replace the example's files in a directory that has inventory YAML.")
@common_options
def init(app: AppContext, directory: Path, force: bool) -> int:
    existing = inventory_files(directory)
    if existing and not force:
        names = ", ".join(p.name for p in existing)
        raise ConfigError(f"directory {directory} already holds inventory YAML ({names}); nothing written",
                          fix=f"choose a new or empty directory, or add --force to replace "
                              f"{', '.join(EXAMPLE_FILES)} there (other files stay)",
                          step="init", details={"existing": [str(p) for p in existing]})
    links = {p: os.readlink(p) for p in (directory / n for n in EXAMPLE_FILES) if p.is_symlink()}
    written = write_example(directory, EXAMPLE_FILES)
    example = load_inventory(example_inventory_dir())
    host = next(iter(example.hosts))
    follow = _next_command(directory, host)
    contents = {
        "hosts.yaml": f"host {host} ({example.hosts[host].address}): the worked example; replace it with your "
                      "node (address, ssh key, node name, container); groups commented at the end",
        "profiles.yaml": f"server profile(s) {', '.join(example.profiles)}: model, sglang version, flags, env",
        "presets.yaml": f"bench presets {', '.join(example.presets)}",
        "sglang-autotune-flashinfer-cutlass.patch": "an example stack patch (FlashInfer autotune for the "
                                                    "flashinfer_cutlass MoE backend), off until a profile lists it "
                                                    "under `patches:` (docs/stacks.md#patches)",
    }
    app.out.emit({"ok": True, "directory": str(directory), "written": [str(p) for p in written],
                  "replaced": [str(p) for p in existing if p in written], "hosts": list(example.hosts),
                  "profiles": list(example.profiles), "presets": list(example.presets), "next": follow,
                  "links_replaced": {str(p): target for p, target in links.items()}})
    for path in written:
        app.out.line(f"wrote {path}: {contents[path.name]}")
        if path in links:
            app.out.line(f"  it was a symbolic link to {links[path]}: the link was replaced, its target left unchanged")
    app.out.line(f"next: edit {directory / 'hosts.yaml'}, then: {follow}")
    return 0
