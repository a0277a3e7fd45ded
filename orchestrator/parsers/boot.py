"""The boot ledger: one start of sglang broken into phases, from the journal lines of that start (pure).

The phases, in the order the server goes through them, each from its first line to the next phase's first line:

    weights   `Load weight begin` … `Load weight end`
    autotune  `Running FlashInfer autotune with cache:` … the next phase's line (absent: autotune did not run)
    jit       the stand-in's `JIT-compiling kernels` line … the next phase's line (absent: the kernel cache was warm)
    capture   `Capture cuda graph begin` … `Capture cuda graph end` (absent with --disable-cuda-graph)
    warmup    after the last phase … `The server is fired up and ready to roll!` (the first healthy)

Timestamps: a journal prefix (`journalctl -o short-iso-precise`: `2026-12-04T13:20:01.123456+00:00 host unit[pid]:`)
when present, else sglang's own `[YYYY-mm-dd HH:MM:SS …]` stamp (whole seconds). A line without either takes the
time of the line before it. A start that autotuned or JIT-compiled is cold; any other start is warm. A start cut
off before its ready line has `complete=False` and no total.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from orchestrator.caches import CacheCheck

PhaseName = Literal["startup", "weights", "autotune", "jit", "capture", "warmup"]

#: Bound on the starts kept per release (boot.jsonl), newest last.
KEEP_STARTS = 20

_JOURNAL_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{2}:?\d{2}|Z)?)\s")
_SGLANG_STAMP = re.compile(r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:[ \]])")

#: (marker text, the phase that begins there); "end" markers close the open phase.
_BEGINS: tuple[tuple[str, PhaseName], ...] = (
    ("Load weight begin", "weights"),
    ("Running FlashInfer autotune with cache:", "autotune"),
    ("JIT-compiling kernels", "jit"),
    ("Capture cuda graph begin", "capture"),
)
_ENDS: tuple[tuple[str, PhaseName], ...] = (("Load weight end", "weights"), ("Capture cuda graph end", "capture"))
READY = "The server is fired up and ready to roll!"
#: Phases that end where the next phase begins.
_OPEN_ENDED: frozenset[PhaseName] = frozenset({"autotune", "jit"})
#: Lines of the server after its model runner is ready (the KV pool sized, the HTTP listener up): an open-ended
#: phase ends there at the latest.
_SERVING = ("max_total_num_tokens=", "Uvicorn running on", "Application startup complete")


class BootPhase(BaseModel):
    name: PhaseName
    seconds: float | None = None  # None: the phase began and the lines end before it did


class BootStart(BaseModel):
    """One start of the server, as its journal tells it."""

    started_at: str | None = None  # ISO time of the start's first timestamped line
    complete: bool = False  # the ready line was seen
    cold: bool = False  # it autotuned or JIT-compiled
    total_s: float | None = None  # first line → ready line; None when cut off
    phases: list[BootPhase] = Field(default_factory=list)
    #: What the kernel cache check before this start found (orchestrator/caches.py); None: no managed cache.
    kernel_cache: CacheCheck | None = None

    def with_cache(self, check: CacheCheck | None) -> BootStart:
        """This start with its cache check, which then decides cold or warm: a start on a new (or set-aside) cache
        is cold, and so is one that JIT-compiled all the same; autotune's line alone no longer counts (sglang prints
        it when it reads a warm autotune cache too)."""
        if check is None:
            return self
        return self.model_copy(update={"kernel_cache": check,
                                       "cold": check.cold or self.phase("jit") is not None})

    def phase(self, name: PhaseName) -> BootPhase | None:
        return next((p for p in self.phases if p.name == name), None)

    def longest(self) -> BootPhase | None:
        timed = [p for p in self.phases if p.seconds is not None]
        return max(timed, key=lambda p: p.seconds or 0.0) if timed else None

    def summary(self) -> str:
        """`cold start 412 s (longest: capture 208 s)` — one line for `deploy status`."""
        kind = "cold" if self.cold else "warm"
        total = f"{self.total_s:.0f} s" if self.total_s is not None else "not finished"
        longest = self.longest()
        tail = f" (longest: {longest.name} {longest.seconds:.0f} s)" if longest and longest.seconds is not None else ""
        cache = f", kernel cache {self.kernel_cache.state}" if self.kernel_cache is not None else ""
        return f"{kind} start {total}{tail}{cache}"


def line_time(line: str) -> datetime | None:
    """A line's time: the journal's prefix, else sglang's own stamp; None when it has neither."""
    m = _JOURNAL_STAMP.match(line)
    if m:
        try:
            return datetime.fromisoformat(m.group(1))
        except ValueError:
            pass
    m = _SGLANG_STAMP.search(line)
    if m:
        try:
            return datetime.fromisoformat(m.group(1))
        except ValueError:
            return None
    return None


def _naive(t: datetime) -> datetime:
    return t.replace(tzinfo=None)


def parse_boot(lines: list[str], *, healthy: bool = False) -> BootStart | None:
    """The phases of one start from its journal lines (this start's only). None: no line of a start in them.

    Weights and capture are bracketed (begin … end); autotune and JIT end where the next phase line comes, and may
    run inside capture (the stand-in compiles while capturing): a phase's seconds exclude those nested in it, so
    the phases add up to the total. `healthy`: the server answered /health 200 before the ready line was read (the
    health wait stops at the first 200): the start is complete at its last line read.
    """
    first: datetime | None = None
    now: datetime | None = None
    stack: list[tuple[PhaseName, datetime, float]] = []  # (phase, since, seconds of phases nested in it)
    durations: dict[PhaseName, float | None] = {}
    ready_at: datetime | None = None
    last_mark: datetime | None = None

    def close(at: datetime) -> None:
        name, since, nested = stack.pop()
        spent = max(0.0, (at - since).total_seconds())
        durations[name] = max(0.0, spent - nested)
        if stack:
            parent, psince, pnested = stack[-1]
            stack[-1] = (parent, psince, pnested + spent)

    for line in lines:
        t = line_time(line)
        if t is not None:
            now = _naive(t)
        if now is None:
            continue
        if first is None:
            first = now
        begin = next((name for text, name in _BEGINS if text in line), None)
        end = next((name for text, name in _ENDS if text in line), None)
        if begin is not None:
            last_mark = now
            if begin in durations:
                continue  # another rank's line of a phase already begun
            while stack and stack[-1][0] in _OPEN_ENDED:
                close(now)
            if begin == "weights":
                durations["startup"] = max(0.0, (now - first).total_seconds())
            durations[begin] = None
            stack.append((begin, now, 0.0))
        elif end is not None:
            last_mark = now
            if any(n == end for n, _, _ in stack):
                while stack and stack[-1][0] != end:
                    close(now)
                close(now)
        elif READY in line:
            ready_at = now
            break
        elif any(text in line for text in _SERVING):
            while stack and stack[-1][0] in _OPEN_ENDED:
                close(now)
                last_mark = now
    if first is None or (not durations and ready_at is None):
        return None
    if ready_at is None and healthy and now is not None:
        ready_at = now
    if ready_at is not None:
        while stack:
            close(ready_at)
    order: list[PhaseName] = ["startup", "weights", "autotune", "jit", "capture"]
    phases = [BootPhase(name=n, seconds=durations[n]) for n in order if n in durations]
    if ready_at is not None:
        phases.append(BootPhase(name="warmup", seconds=max(0.0, (ready_at - (last_mark or first)).total_seconds())))
    return BootStart(started_at=first.isoformat(), complete=ready_at is not None,
                     cold="autotune" in durations or "jit" in durations,
                     total_s=(ready_at - first).total_seconds() if ready_at is not None else None, phases=phases)


def parse_boot_lines(text: str) -> list[BootStart]:
    """boot.jsonl: one BootStart per line, newest last; a line that does not parse is skipped."""
    out: list[BootStart] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(BootStart.model_validate_json(line))
        except ValueError:
            continue
    return out[-KEEP_STARTS:]
