"""Pure parsers for the text that remote commands print (nvidia-smi, /proc, lspci, ls, pveversion...).

Nothing in this package does I/O: every function takes text and returns typed, frozen values. That keeps the
parsers testable on real captured output and lets the same code run on live hosts, the simulator and saved files.

`ParseError` is a `ValueError`, not a `DeployError`: a parser does not know the host or the step. The caller wraps
it (`RemoteError(what=..., host=..., step=...)`) when it turns into a user-facing failure.
"""

from __future__ import annotations

import re

__all__ = ["ANSI_RE", "ParseError", "excerpt", "strip_ansi"]

#: SGR escape sequences (colour, underline). nvidia-smi wraps `topo` headers in `ESC[4m ... ESC[0m` on a TTY.
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def strip_ansi(text: str) -> str:
    """Remove SGR escape sequences so captures from a TTY, `script` or a plain pipe parse the same."""
    return ANSI_RE.sub("", text)


def excerpt(text: str, limit: int = 160) -> str:
    """A short, single-line view of `text` for error messages (the first non-blank lines, ANSI removed)."""
    lines = [ln.strip() for ln in strip_ansi(text).splitlines() if ln.strip()]
    short = " | ".join(lines)
    return short if len(short) <= limit else short[: limit - 1] + "…"


class ParseError(ValueError):
    """The text is not what the parser expects (wrong command, an error message instead of output, truncation).

    `what` says what was expected; `excerpt` shows the start of the text that was received, so a message like
    "not an nvidia-smi topo -m matrix: NVIDIA-SMI has failed because it couldn't communicate..." explains itself.
    """

    def __init__(self, what: str, text: str = "") -> None:
        self.what = what
        self.excerpt = excerpt(text) if text else ""
        super().__init__(f"{what}: {self.excerpt!r}" if self.excerpt else what)
