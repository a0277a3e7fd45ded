"""Playbooks: YAML lists of step names (with optional per-step options) that the runner executes in order.

```yaml
name: up
description: converge one host
steps:
  - connect
  - {step: health, timeout_s: 600}
  - {step: health, allow_duplicate: true}   # a step may appear twice only when marked
```
The shipped ones are the YAML files of this package (orchestrator/playbooks/); users copy one, edit it and pass
its path, so every mistake is reported with the file, the item and the valid choices.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.local.yamlfile import load_yaml
from orchestrator.resources import playbooks_dir

DUPLICATE_MARK = "allow_duplicate"
_TOP_KEYS = {"name", "description", "steps"}


@dataclass(frozen=True)
class StepRef:
    name: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Playbook:
    name: str
    steps: list[StepRef]
    description: str = ""
    path: Path | None = None

    @property
    def step_names(self) -> list[str]:
        return [s.name for s in self.steps]


def playbook_path(name_or_path: str | Path) -> Path:
    """A bare name is a shipped playbook (this package's <name>.yaml); anything with a '/' or a .yaml/.yml suffix
    is the path of the user's own file."""
    text = str(name_or_path)
    if "/" in text or text.endswith((".yaml", ".yml")):
        return Path(text).expanduser()
    return playbooks_dir() / f"{text}.yaml"


def available_playbooks() -> list[str]:
    return sorted(p.stem for p in playbooks_dir().glob("*.yaml"))


def load_playbook(name_or_path: str | Path, valid_steps: Mapping[str, object]) -> Playbook:
    path = playbook_path(name_or_path)
    if not path.is_file():
        known = ", ".join(available_playbooks()) or "none"
        raise ConfigError(f"playbook {name_or_path} not found at {path} (shipped playbooks: {known})",
                          fix="name a shipped playbook or give the path of a .yaml file")
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"playbook {path}: top level must be a mapping with name, description, steps",
                          fix=f"see {playbooks_dir() / 'up.yaml'} for the shape")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"playbook {path}: unknown key(s) {', '.join(unknown)}",
                          fix=f"use only {', '.join(sorted(_TOP_KEYS))}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"playbook {path}: 'name' must be a non-empty string", fix="add name: <playbook name>")
    description = data.get("description") or ""
    if not isinstance(description, str):
        raise ConfigError(f"playbook {path}: 'description' must be a string", fix="quote the description")
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ConfigError(f"playbook {path}: 'steps' must be a non-empty list", fix="list step names under steps:")

    valid = sorted(valid_steps)
    steps: list[StepRef] = []
    seen: set[str] = set()
    for i, item in enumerate(raw_steps, start=1):
        where = f"playbook {path}: step {i}"
        if isinstance(item, str):
            step_name, options, dup_ok = item, {}, False
        elif isinstance(item, dict):
            if "step" not in item or not isinstance(item["step"], str):
                raise ConfigError(f"{where}: a mapping item needs 'step: <name>' (got keys "
                                  f"{', '.join(map(str, item)) or 'none'})", fix="e.g. {step: health, timeout_s: 600}")
            step_name = item["step"]
            dup_ok = item.get(DUPLICATE_MARK, False)
            if not isinstance(dup_ok, bool):
                raise ConfigError(f"{where}: {DUPLICATE_MARK} must be true or false", fix=f"{DUPLICATE_MARK}: true")
            options = {str(k): v for k, v in item.items() if k not in ("step", DUPLICATE_MARK)}
        else:
            raise ConfigError(f"{where}: expected a step name or a mapping, got {type(item).__name__}",
                              fix="write `- step_name` or `- {step: step_name, option: value}`")
        if step_name not in valid_steps:
            close = difflib.get_close_matches(step_name, valid, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ConfigError(f"{where}: unknown step {step_name!r}",
                              fix=f"{hint}valid steps: {', '.join(valid)}",
                              details={"valid_steps": valid, "suggestion": close[0] if close else None})
        if step_name in seen and not dup_ok:
            raise ConfigError(f"{where}: step {step_name!r} appears twice",
                              fix=f"remove the repeat, or mark it: {{step: {step_name}, {DUPLICATE_MARK}: true}}")
        seen.add(step_name)
        steps.append(StepRef(step_name, options))
    return Playbook(name=name.strip(), steps=steps, description=description.strip(), path=path)
