"""Read every YAML file of an inventory directory (or a ':'-separated list of them) into one Inventory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from orchestrator.errors import ConfigError
from orchestrator.inventory.models import Inventory

SECTIONS = ("hosts", "profiles", "presets", "groups")
#: Sections that are one mapping (not name → entry), defined in at most one file.
SINGLE_SECTIONS = ("router",)


def _key_path(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}", fix="fix the YAML syntax") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping with keys {', '.join(SECTIONS)}")
    unknown = sorted(set(data) - set(SECTIONS) - set(SINGLE_SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key(s) {', '.join(unknown)}",
                          fix=f"use only {', '.join((*SECTIONS, *SINGLE_SECTIONS))}")
    return data


def load_inventory(dirs: str | Path | list[Path]) -> Inventory:
    """Merge all *.yaml / *.yml files; a name defined twice is an error naming both files."""
    if isinstance(dirs, str):
        dir_list = [Path(p) for p in dirs.split(":") if p]
    elif isinstance(dirs, Path):
        dir_list = [dirs]
    else:
        dir_list = dirs
    merged: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    origin: dict[tuple[str, str], Path] = {}
    single: dict[str, Any] = {}
    for d in dir_list:
        if not d.is_dir():
            raise ConfigError(f"inventory directory {d} does not exist",
                              fix="pass --inventory DIR or set $DEPLOY_INVENTORY")
        for path in sorted([*d.glob("*.yaml"), *d.glob("*.yml")]):
            data = _read_yaml(path)
            for section in SECTIONS:
                entries = data.get(section) or {}
                if not isinstance(entries, dict):
                    raise ConfigError(f"{path}: '{section}' must be a mapping of name → entry")
                for name, body in entries.items():
                    if (section, name) in origin:
                        raise ConfigError(f"{path}: {section}.{name} is already defined in "
                                          f"{origin[(section, name)]}", fix="keep one definition")
                    origin[(section, name)] = path
                    if section == "hosts" and isinstance(body, dict):
                        body = {"name": name, **body}
                    merged[section][name] = body
            for section in SINGLE_SECTIONS:
                if data.get(section) is None:
                    continue
                if section in single:
                    raise ConfigError(f"{path}: '{section}' is already defined in {origin[(section, '')]}",
                                      fix="keep one definition")
                single[section] = data[section]
                origin[(section, "")] = path
    try:
        return Inventory.model_validate({**merged, **single})
    except ValidationError as exc:
        problems = []
        where = ""
        for err in exc.errors()[:5]:
            loc = err["loc"]
            file = origin.get((str(loc[0]), str(loc[1]))) if len(loc) >= 2 else None
            where = where or (f"{file}: " if file else f"{', '.join(str(d) for d in dir_list)}: ")
            msg = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key (not allowed here)"
            problems.append(f"{_key_path(loc)}: {msg}" if loc else msg)
        more = f" (and {len(exc.errors()) - 5} more)" if len(exc.errors()) > 5 else ""
        raise ConfigError(f"{where}{'; '.join(problems)}{more}",
                          fix="correct the inventory entry; unknown keys are not allowed") from None
