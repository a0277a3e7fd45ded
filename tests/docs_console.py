"""The `console` blocks of the docs as runnable examples: commands, the output the page shows, and a shape match.

A page's fenced ```console block holds `$ command` lines, each followed by the output the page shows for it.
Run against a simulated host, the real output must have the same shape: the same lines in the same order, once
numbers, ids, times and addresses are set aside (`normalize`). A line `...` (or `…`) on the page stands for
lines left out; the streamed chatter of the tools a step runs (`apt:`, `pip:`, `download:`, `journal:` lines) and
the bench's `diagnosis:` lines (they depend on the figures measured) are never compared.
Pure: text in, typed values out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FENCE = re.compile(r"^```(\w*)\s*$")
GAPS = {"...", "…"}
CHATTER = re.compile(r"^\s+(apt|pip|download|journal|diagnosis): ")
_PATTERNS = (
    (re.compile(r"\b\d{8}T\d{6}-[0-9a-f]{8}\b"), "<release>"),
    (re.compile(r"\br-\d{8}-\d{6}-[0-9a-f]{4}\b"), "<run>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?"), "<time>"),
    (re.compile(r"\b[0-9a-f]{12,40}\b"), "<hex>"),
    (re.compile(r"\d+(\.\d+)?"), "N"),
    (re.compile(r"\s+"), " "),
)


@dataclass
class ConsoleCommand:
    command: str
    shown: list[str] = field(default_factory=list)  # the output lines the page shows, as written


@dataclass
class ConsoleBlock:
    page: str
    line: int  # 1-based line of the opening fence
    commands: list[ConsoleCommand]


def console_blocks(text: str, page: str) -> list[ConsoleBlock]:
    """Every ```console block of a page, split into commands and their shown output."""
    blocks: list[ConsoleBlock] = []
    current: ConsoleBlock | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        fence = FENCE.match(raw)
        if fence and current is None and fence.group(1) == "console":
            current = ConsoleBlock(page, number, [])
        elif fence and current is not None:
            blocks.append(current)
            current = None
        elif current is not None:
            if raw.startswith("$ "):
                current.commands.append(ConsoleCommand(raw[2:].strip()))
            elif current.commands:
                current.commands[-1].shown.append(raw)
            elif raw.strip():
                raise ValueError(f"{page}:{number}: output before the first `$ ` command of its block")
    if current is not None:
        raise ValueError(f"{page}:{current.line}: console block never closed")
    return blocks


def normalize(line: str) -> str:
    out = line
    for pattern, repl in _PATTERNS:
        out = pattern.sub(repl, out)
    return out.strip()


def _segments(shown: list[str]) -> list[list[str]]:
    """The shown lines between gaps, normalized, chatter left out."""
    segments: list[list[str]] = [[]]
    for raw in shown:
        if raw.strip() in GAPS:
            segments.append([])
        elif not CHATTER.match(raw) and raw.strip():
            segments[-1].append(normalize(raw))
    return [s for s in segments if s]


def shape_mismatch(shown: list[str], actual: str) -> str | None:
    """None when the real output has the page's shape: each run of shown lines between gaps appears there as
    consecutive lines (chatter left out), in the page's order. Otherwise the first shown line that was not found
    where it should be, and the real lines at that place."""
    real = [normalize(raw) for raw in actual.splitlines() if raw.strip() and not CHATTER.match(raw)]
    at = 0
    for segment in _segments(shown):
        found = next((i for i in range(at, len(real) - len(segment) + 1) if real[i:i + len(segment)] == segment),
                     None)
        if found is None:
            # Name the first line of the segment that breaks, with what is really there.
            start = next((i for i in range(at, len(real)) if real[i] == segment[0]), None)
            if start is None:
                return f"not in the output (after line {at}): {segment[0]!r}"
            for k, want in enumerate(segment):
                got = real[start + k] if start + k < len(real) else "(end of output)"
                if got != want:
                    return f"expected {want!r}, got {got!r}"
            return f"segment not found: {segment!r}"  # pragma: no cover - the loop above always names a line
        at = found + len(segment)
    return None
