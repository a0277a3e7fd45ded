"""The shape every `--json` document has, success or failure (docs/json.md).

Pure: `envelope(payload, exit_code=…)` puts `ok`, `exit_code`, `error`, `steps`, `totals` and `changed` first and
keeps whatever else the command adds. The CLI applies it to the one document a command prints; the fleet applies
it to each host's report, so a host's report in a fleet document has the single-host shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.errors import USAGE_ERROR, DeployError, exit_code_error

#: The keys every document has, in this order.
ENVELOPE_KEYS = ("ok", "exit_code", "error", "steps", "totals", "changed")


def envelope(payload: Mapping[str, Any], *, exit_code: int) -> dict[str, Any]:
    """`payload` as a document of a command that exits with `exit_code`.

    `ok` is true only for exit 0 (and a payload that does not say otherwise); `error` is null on exit 0, else the
    payload's code (an error's `to_dict()`) or the code of the exit code; `steps`/`totals` default to empty.
    """
    error = payload.get("error")
    steps = payload.get("steps")
    totals = payload.get("totals")
    head = {
        "ok": exit_code == 0 and bool(payload.get("ok", True)),
        "exit_code": exit_code,
        "error": None if exit_code == 0 else (error if isinstance(error, str) else exit_code_error(exit_code)),
        "steps": steps if isinstance(steps, list) else [],
        "totals": totals if isinstance(totals, dict) else {},
        "changed": bool(payload.get("changed", False)),
    }
    return {**head, **{k: v for k, v in payload.items() if k not in ENVELOPE_KEYS}}


def failure(err: DeployError, payload: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The document of a command that failed with `err`, keeping what `payload` (a run's report) already says."""
    said = {k: v for k, v in err.to_dict().items() if v != "" or not (payload or {}).get(k)}  # keep a report's host
    return envelope({**(payload or {}), **said}, exit_code=err.exit_code)


def usage_failure(what: str, *, fix: str, exit_code: int = 2) -> dict[str, Any]:
    """The document of a command line click refused (`usage-error`, exit 2)."""
    return envelope({"error": USAGE_ERROR, "what": what, "fix": fix, "host": "", "step": ""}, exit_code=exit_code)
