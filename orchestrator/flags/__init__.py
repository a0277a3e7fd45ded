"""sglang server flags: schemas of real releases, canonical flag sets, diffs and `--set` changes."""

from __future__ import annotations

from orchestrator.flags.flagset import (
    RESERVED_DESTS,
    CanonValue,
    FlagProblem,
    FlagSet,
    apply_changes,
    canonicalize,
    diff_flags,
    parse_set,
    rename_hint,
)
from orchestrator.flags.schema import FlagSchema, FlagSpec

__all__ = [
    "RESERVED_DESTS",
    "CanonValue",
    "FlagProblem",
    "FlagSchema",
    "FlagSet",
    "FlagSpec",
    "apply_changes",
    "canonicalize",
    "diff_flags",
    "parse_set",
    "rename_hint",
]
