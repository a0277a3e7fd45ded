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
    masked_diff,
    parse_set,
    refuse_secret_dimension,
    rename_hint,
    secret_names,
    stored_flags,
    with_secret_values,
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
    "masked_diff",
    "parse_set",
    "refuse_secret_dimension",
    "rename_hint",
    "secret_names",
    "stored_flags",
    "with_secret_values",
]
