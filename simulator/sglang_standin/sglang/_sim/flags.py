"""Build a real argparse parser from the installed release's flag schema (orchestrator/flags/schemas/sglang-<v>.json).

The schema is a dump of the real parser's actions, so option strings, dests, nargs, choices, types and
defaults are the real ones; argparse itself then produces the real error messages (unrecognized
arguments, invalid choice, abbreviations accepted because allow_abbrev stays True).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from sglang._sim.env import installed_version, schema_path

PROG = "sglang serve"


def loads(value: str) -> Any:
    return json.loads(value)


def json_list_type(value: str) -> Any:
    return json.loads(value)


def nullable_str(value: str) -> str | None:
    return None if value.lower() in ("none", "null", "") else value


def human_readable_int(value: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*", value)
    if not m:
        raise ValueError(value)
    mult = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


TYPES: dict[str, Callable[[str], Any]] = {
    "int": int, "float": float, "str": str, "loads": loads, "json_list_type": json_list_type,
    "nullable_str": nullable_str, "human_readable_int": human_readable_int,
}


class DeprecatedAction(argparse.Action):
    """A removed flag that is still accepted with a warning (nargs=0)."""

    def __init__(self, option_strings: Sequence[str], dest: str, nargs: Any = 0, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"WARNING: {self.help}", file=sys.stderr)


class DeprecatedStoreTrueAction(argparse._StoreTrueAction):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"WARNING: {option_string} is deprecated. {self.help}", file=sys.stderr)
        super().__call__(parser, namespace, values, option_string)


@cache
def load_schema(version: str) -> list[dict[str, Any]]:
    path = schema_path(version)
    if not path.exists():
        raise RuntimeError(f"sglang (sim): no flag schema for version {version} at {path}")
    data: list[dict[str, Any]] = json.loads(path.read_text())
    return data


def add_cli_args(parser: argparse.ArgumentParser, version: str | None = None) -> None:
    """Add every action of the schema to `parser` (the -h action is argparse's own)."""
    for spec in load_schema(version or installed_version()):
        kind = spec["action"]
        if kind == "_HelpAction":
            continue
        opts = list(spec["option_strings"])
        kw: dict[str, Any] = {"dest": spec["dest"], "help": (spec.get("help") or "").replace("%", "%%")}
        if spec.get("required"):
            kw["required"] = True
        if kind in ("_StoreTrueAction", "_StoreFalseAction"):
            kw.update(action="store_true" if kind == "_StoreTrueAction" else "store_false", default=spec["default"])
        elif kind == "DeprecatedStoreTrueAction":
            kw.update(action=DeprecatedStoreTrueAction, default=spec["default"])
        elif kind == "DeprecatedAction":
            kw.update(action=DeprecatedAction, default=spec["default"])
        elif kind == "BooleanOptionalAction":
            opts = [o for o in opts if not o.startswith("--no-")]
            kw.update(action=argparse.BooleanOptionalAction, default=spec["default"])
        else:  # _StoreAction, LoRAPathAction, DeprecatedStoreConstAction: plain stores with the real shape
            kw["default"] = spec["default"]
            if spec.get("type"):
                kw["type"] = TYPES.get(spec["type"], str)
            if spec.get("nargs") not in (None, 0):
                kw["nargs"] = spec["nargs"]
            if spec.get("choices") is not None:
                kw["choices"] = spec["choices"]
        parser.add_argument(*opts, **kw)


def make_parser(version: str | None = None, allow_abbrev: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, allow_abbrev=allow_abbrev)
    add_cli_args(parser, version)
    return parser


def parser_defaults(version: str | None = None) -> dict[str, Any]:
    parser = make_parser(version)
    return {a.dest: a.default for a in parser._actions if a.dest != "help"}
