"""Output in text or JSON: a command prints its human view through `Output`, and one JSON document with --json."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from orchestrator.envelope import envelope
from orchestrator.redact import redact
from orchestrator.ui.tables import TableSpec, print_table


@dataclass
class Output:
    """Human output goes to stderr-free stdout via rich; JSON mode prints one document at the end."""

    as_json: bool
    console: Console = field(default_factory=lambda: Console(highlight=False, soft_wrap=True))
    #: Set by the CLI's run_command: emit keeps the payload, and `finish` prints it once the exit code is known.
    hold: bool = False
    held: dict[str, Any] | None = None

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if not self.as_json:
            self.console.print(*objects, **kwargs)

    def line(self, text: str, style: str | None = None) -> None:
        if not self.as_json:
            self.console.print(text, style=style, markup=False, highlight=False)

    def table(self, t: TableSpec) -> None:
        if not self.as_json:
            print_table(self.console, t)

    def emit(self, payload: dict[str, Any]) -> None:
        """The one JSON document; secrets redacted by key (server_info's api_key) and by value/shape."""
        if self.as_json and self.hold:
            self.held = payload
        elif self.as_json:
            self.write(payload)

    def finish(self, exit_code: int) -> None:
        """Print the held payload as the command's document (docs/json.md): the envelope with `exit_code`."""
        if self.as_json:
            self.write(envelope(self.held or {}, exit_code=exit_code))

    def write(self, payload: dict[str, Any]) -> None:
        if self.as_json:
            safe = redact(json.loads(json.dumps(finite(payload), default=str)))
            sys.stdout.write(json.dumps(safe, indent=2, sort_keys=False) + "\n")


def finite(obj: Any) -> Any:
    """`obj` with every non-finite float as the string pydantic writes for it ("NaN", "Infinity"): json.dumps
    would write bare NaN/Infinity, which is not JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj
