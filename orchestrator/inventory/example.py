"""The shipped example inventory, written into a directory of the user's.

`deploy init` writes all of it for a new site; `deploy sim up` writes its profiles and presets next to the
simulated hosts' entries when the directory has no inventory of its own, so the demo needs nothing from a checkout.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.inventory.loader import inventory_files
from orchestrator.localfile import write_file
from orchestrator.resources import example_inventory_dir

#: Every file of the example, in the order `deploy init` reports them.
EXAMPLE_FILES = ("hosts.yaml", "profiles.yaml", "presets.yaml")
#: What a simulated host's entry needs besides itself: the profile it names and that profile's bench preset.
SERVER_FILES = ("profiles.yaml", "presets.yaml")


def write_example(directory: Path, names: Sequence[str] = EXAMPLE_FILES) -> list[Path]:
    """Copy the named example files into `directory` (made if missing), replacing files of the same name; a
    symbolic link of that name is replaced itself, the file it points to (maybe outside `directory`) stays."""
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"{directory} is not a directory", fix="name a new or existing directory")
    written = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name in names:
            target = directory / name
            write_file(target, (example_inventory_dir() / name).read_text())
            written.append(target)
    except OSError as exc:
        raise ConfigError(f"cannot write the example inventory into {directory}: {exc.strerror or exc}",
                          fix="choose a directory you can write to") from exc
    return written


def seed_server_files(directory: Path, own: Path) -> list[Path]:
    """The example's profiles and presets, when `directory` holds no inventory file but `own` (sim.yaml)."""
    if any(p != own for p in inventory_files(directory)):
        return []
    return write_example(directory, SERVER_FILES)



def seeded_files(directory: Path, own: Path) -> tuple[list[Path], list[Path]]:
    """What `seed_server_files` wrote, for `deploy sim down` to remove with `own`: (unchanged since, edited since).
    Nothing when the directory holds anything else: an inventory of the user's (from `deploy init`) keeps its
    files."""
    files = [p for p in inventory_files(directory) if p != own]
    if any(p.name not in SERVER_FILES for p in files):
        return [], []
    same = [p for p in files if p.read_text() == (example_inventory_dir() / p.name).read_text()]
    return same, [p for p in files if p not in same]
