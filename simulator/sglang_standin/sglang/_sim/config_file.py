"""`--config FILE` (simulated): how sglang 0.5.12.post1 and 0.5.23 merge a YAML file of server options into argv.

Behaviour of the real releases (sglang/srt/server_args_config_parser.py in 0.5.12.post1,
sglang/srt/utils/server_args_config_parser.py in 0.5.23, called from `prepare_server_args`):
- only the bare token `--config` triggers the merge (`--config=FILE` is parsed as an ordinary, ignored option);
  more than one `--config`, or none after it, is a ValueError;
- the file must end in .yaml/.yml and exist; an empty file is {}; a non-mapping root is a ValueError;
- each key becomes `--KEY` verbatim (so `api-key`, not `api_key`); store_true options appear only when true,
  other booleans as `true`/`false`, lists as several values, 0.5.23 also dicts as JSON text;
- options with other actions (append, store_const, BooleanOptionalAction, …) are refused with a ValueError;
- the converted options are placed BEFORE the remaining command line, so argparse's last-one-wins makes the
  command line override the file.
An error escapes as an uncaught ValueError (traceback, exit 1), as with the real server.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

NEWER = "0.5.23"  # aliases as keys, dict values, any single-value action


def _keys(action: argparse.Action, version: str) -> set[str]:
    keys = {action.dest}
    if version == NEWER:
        keys |= {o[2:].replace("-", "_") for o in action.option_strings if o.startswith("--")}
    return keys


def _classify(parser: argparse.ArgumentParser, version: str) -> tuple[set[str], dict[str, argparse.Action]]:
    """(store_true keys, refused keys → action) for this release's rules."""
    store_true = {k for a in parser._actions if isinstance(a, argparse._StoreTrueAction) for k in _keys(a, version)}

    def supported(a: argparse.Action) -> bool:
        if isinstance(a, argparse._StoreTrueAction | argparse._StoreAction):
            return True
        return version == NEWER and a.nargs is None

    ok_keys = {k for a in parser._actions if supported(a) for k in _keys(a, version)}
    refused: dict[str, argparse.Action] = {}
    for a in parser._actions:
        if not a.option_strings or supported(a) or {"--config", "--help", "-h"} & set(a.option_strings):
            continue
        for k in _keys(a, version):
            if version != NEWER or k not in ok_keys:
                refused[k] = a
    return store_true, refused


def _config_path(argv: list[str]) -> int | None:
    where = [i for i, a in enumerate(argv) if a == "--config"]
    if len(where) > 1:
        raise ValueError("Multiple config files specified! Only one allowed.")
    if not where:
        return None
    if where[0] == len(argv) - 1:
        raise ValueError("No config file specified after --config flag!")
    return where[0]


def _load(path: str) -> dict[str, Any]:
    p = Path(path)
    if p.suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"Config file must be YAML format, got: {p.suffix}")
    if not p.exists():
        raise ValueError(f"Config file not found: {path}")
    import yaml  # here, not at the top: only a --config run pays for it (sglang.srt.server_args imports this module)

    with open(p) as fh:
        data = yaml.safe_load(fh)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError("Config file must contain a dictionary at root level")
    return data


def to_args(data: dict[str, Any], parser: argparse.ArgumentParser, version: str) -> list[str]:
    store_true, refused = _classify(parser, version)
    out: list[str] = []
    for key, value in data.items():
        norm = str(key).replace("-", "_")
        if norm in refused:
            raise ValueError(f"Unsupported config option '{norm}' with action '{type(refused[norm]).__name__}'")
        if isinstance(value, bool):
            if norm in store_true:
                out += [f"--{key}"] if value else []
            else:
                out += [f"--{key}", str(value).lower()]
        elif isinstance(value, list):
            out += [f"--{key}", *(str(v) for v in value)] if value else []
        elif isinstance(value, dict) and version == NEWER:
            out += [f"--{key}", json.dumps(value)]
        else:
            out += [f"--{key}", str(value)]
    return out


def merge_config(argv: list[str], parser: argparse.ArgumentParser, version: str) -> list[str]:
    """argv with the file's options first and `--config FILE` removed (unchanged without a bare --config)."""
    if "--config" not in argv:
        return argv
    i = _config_path(argv)
    assert i is not None
    return to_args(_load(argv[i + 1]), parser, version) + argv[:i] + argv[i + 2:]
