"""A stack build's progress, read from pip's own lines: packages and bytes as they go.

Why: a real sglang stack is ~180 distributions and ~4 GB of wheels (torch alone 530 MB), ~10 GB installed; pip
without a terminal prints one line per package and then nothing for minutes while it unpacks. An operator needs
to see that it moves and how far it is. Pure: lines in, the line to show out (None: show pip's line as it is).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: pip's sizes: `Downloading URL-or-name (530.6 MB)`, `Using cached NAME (530.6 MB)` (pip 23–25, no terminal).
FETCH = re.compile(r"^\s*(?P<how>Downloading|Using cached)\s+(?P<what>\S+)\s+\((?P<n>[\d.]+)\s*(?P<unit>[kMG]?B)\)")
COLLECTING = re.compile(r"^\s*(Collecting|Processing|Obtaining)\s+\S")
INSTALLING = re.compile(r"^\s*Installing collected packages:\s*(?P<names>.+)$")
#: What the build script prints while pip unpacks (stacks.py's PROGRESS_MARK lines): the venv's bytes so far.
VENV_BYTES = re.compile(r"^deploy-progress: venv (?P<n>\d+) bytes$")
UNITS = {"B": 1, "kB": 1000, "MB": 1000 ** 2, "GB": 1000 ** 3}


def human(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


@dataclass
class PipProgress:
    """What pip did so far in one install: packages collected, wheels fetched and their bytes."""

    total: int | None = None  # the lock's distributions, when the build is locked
    collected: int = 0
    fetched_bytes: int = 0
    cached_bytes: int = 0
    installing: int = 0
    seen: set[str] = field(default_factory=set)

    def line(self, raw: str) -> str:
        """The line to show for pip's line `raw` (shown now and then): pip's own, with the counts so far in front.
        The counts come from `observe`, which sees every line."""
        if m := VENV_BYTES.match(raw.strip()):
            return f"[{self.where()}] the venv holds {human(int(m['n']))} so far"
        return f"[{self.where()}] {raw.strip()}"

    def observe(self, raw: str) -> None:
        """Count one of pip's lines (every line, not the sampled ones shown)."""
        if COLLECTING.match(raw):
            self.collected += 1
        elif (m := FETCH.match(raw)) and m["what"] not in self.seen:
            self.seen.add(m["what"])
            n = int(float(m["n"]) * UNITS[m["unit"]])
            if m["how"] == "Downloading":
                self.fetched_bytes += n
            else:
                self.cached_bytes += n
        elif m := INSTALLING.match(raw):
            self.installing = len([x for x in m["names"].split(",") if x.strip()])

    def where(self) -> str:
        of = f"/{self.total}" if self.total else ""
        parts = [f"{self.collected}{of} packages", f"{human(self.fetched_bytes)} downloaded"]
        if self.cached_bytes:
            parts.append(f"{human(self.cached_bytes)} from pip's cache")
        if self.installing:
            parts.append(f"installing {self.installing}")
        return ", ".join(parts)
