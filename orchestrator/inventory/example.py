"""The shipped example inventory, written into a directory of the user's.

`deploy init` writes all of it for a new site; `deploy sim up` writes its profiles and presets next to the
simulated hosts' entries when the directory has no inventory of its own, so the demo needs nothing from a checkout.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.inventory.loader import inventory_files
from orchestrator.local.files import write_file
from orchestrator.resources import example_inventory_dir

#: The documented example patch (docs/stacks.md#patches): shipped beside the profiles that may name it.
AUTOTUNE_PATCH = "patches/sglang-autotune-flashinfer-cutlass.patch"
#: Every file of the example, in the order `deploy init` reports them.
EXAMPLE_FILES = ("hosts.yaml", "profiles.yaml", "presets.yaml", AUTOTUNE_PATCH)
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
            target.parent.mkdir(parents=True, exist_ok=True)
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



def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record_seeded(record: Path, files: Sequence[Path]) -> None:
    """Note what `seed_server_files` wrote (each path with its content's sha256) in `record` (in the sim root), so
    that `deploy sim down` removes those files and no other: files of the same content it did not write (an
    earlier `deploy init`'s) are the user's."""
    write_file(record, json.dumps({str(p.resolve()): _digest(p) for p in files}, indent=1) + "\n")


def seeded_files(record: Path) -> tuple[list[Path], list[Path]]:
    """What `sim up` wrote by `record`, for `deploy sim down` to remove: (unchanged since, edited since). Nothing
    without a record (a root from before it was kept, or nothing was seeded)."""
    try:
        written = json.loads(record.read_text())
    except (OSError, ValueError):
        return [], []
    paths = [(Path(p), digest) for p, digest in written.items() if Path(p).is_file()] \
        if isinstance(written, dict) else []
    same = [p for p, digest in paths if _digest(p) == digest]
    return same, [p for p, _ in paths if p not in same]
