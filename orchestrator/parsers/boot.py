"""The boot ledger: one start of sglang broken into phases, from the journal lines of that start (pure).

The phases, in the order the server goes through them, each from its first line to the next phase's first line:

    imports   the unit's start (systemd's ExecMainStartTimestamp) … the first stamped line: sglang's imports,
              about 15 s on sglang 0.5.12 before it prints anything (absent when the start time is not known)
    startup   the first stamped line … `Load weight begin`
    weights   `Load weight begin` … `Load weight end`
    autotune  `Running FlashInfer autotune with cache:` … the next phase's line (absent: autotune did not run)
    capture   the decode graphs: `Capture cuda graph begin` … `end` (0.5.12.post1), `Capture target decode CUDA
              graph begin` … `end` (0.5.23); absent with --disable-cuda-graph
    piecewise the prefill-side graphs: `Capture piecewise CUDA graph begin` … `end` (0.5.12's piecewise graphs, on
              by default, after the decode graphs), `Capture target prefill CUDA graph begin` … `end` (0.5.23's
              prefill graphs, before the decode graphs)
    warmup    after the last phase … `The server is fired up and ready to roll!` (the first healthy)

The lines are the released wheels' (orchestrator/parsers/sglang_lines.py). (`jit`, a line only the old stand-in
printed, is read from ledgers written before; no real server prints one: flashinfer 0.7.2's `Building JIT module
NAME; …` lines are kept as `jit_built`, inside whatever phase they come.)

Timestamps: a journal prefix (`journalctl -o short-iso-precise`: `2026-12-04T13:20:01.123456+00:00 host unit[pid]:`)
when present, else sglang's own `[YYYY-mm-dd HH:MM:SS …]` stamp (whole seconds). A line without either takes the
time of the line before it. A start cut off before its ready line has `complete=False` and no total.

Cold or warm is mostly not in the lines: the JIT time hides inside capture (58 s cold against 1.7 s warm for the
same 36 graphs on an H100) and warmup. `judged` decides it from the kernel-cache check before the start, else from
flashinfer 0.7.2's `Building JIT module` lines (printed only for a module it compiles), else from the capture time
against the release's earlier starts; with none of them it stays unknown.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from orchestrator.parsers.sglang_lines import (
    AUTOTUNE_BEGIN,
    DECODE_CAPTURE_BEGIN,
    DECODE_CAPTURE_END,
    JIT_BUILD,
    PREFILL_CAPTURE_BEGIN,
    PREFILL_CAPTURE_END,
    READY,
)
from orchestrator.stacks.kernel_caches import CacheCheck

PhaseName = Literal["imports", "startup", "weights", "autotune", "jit", "capture", "piecewise", "warmup"]

#: Bound on the starts kept per release (boot.jsonl), newest last.
KEEP_STARTS = 20

_JOURNAL_STAMP = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{2}:?\d{2}|Z)?)\s")
_SGLANG_STAMP = re.compile(r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:[ \]])")

#: (marker, the phase that begins there); "end" markers close the open phase.
_BEGINS: tuple[tuple[re.Pattern[str], PhaseName], ...] = (
    (re.compile(r"Load weight begin"), "weights"),
    (AUTOTUNE_BEGIN, "autotune"),
    (DECODE_CAPTURE_BEGIN, "capture"),
    (PREFILL_CAPTURE_BEGIN, "piecewise"),
)
_ENDS: tuple[tuple[re.Pattern[str], PhaseName], ...] = (
    (re.compile(r"Load weight end"), "weights"), (DECODE_CAPTURE_END, "capture"), (PREFILL_CAPTURE_END, "piecewise"))
#: Phases that end where the next phase begins.
_OPEN_ENDED: frozenset[PhaseName] = frozenset({"autotune", "jit"})
#: Lines of the server after its model runner is ready (the KV pool sized, the HTTP listener up): an open-ended
#: phase ends there at the latest.
_SERVING = ("max_total_num_tokens=", "Uvicorn running on", "Application startup complete")
#: sglang's fused-MoE warning; printed mid-line after a tqdm fragment (`Capturing batches (…) 0%| …[stamp] Using…`).
MOE_DEFAULT_CONFIG = re.compile(r"Using default MoE kernel config\. Performance might be sub-optimal! "
                                r"Config file not found at (?P<path>\S+?\.json)")
#: A start is cold when its capture took this many times the fastest earlier capture of the release, and at least
#: COLD_MIN_S longer (real H100, tiny model: 63 s cold against 3.8 s warm).
COLD_FACTOR = 3.0
COLD_MIN_S = 10.0


class BootPhase(BaseModel):
    name: PhaseName
    seconds: float | None = None  # None: the phase began and the lines end before it did


class BootStart(BaseModel):
    """One start of the server, as its journal tells it."""

    started_at: str | None = None  # ISO time of the start's first timestamped line
    complete: bool = False  # the ready line was seen
    cold: bool | None = None  # compiled its kernels (True), reused them (False), or not known (None): see `judged`
    cold_basis: str = ""  # what decided `cold`, in words
    total_s: float | None = None  # the unit's start (else the first line) → ready line; None when cut off
    phases: list[BootPhase] = Field(default_factory=list)
    #: What the kernel cache check before this start found (orchestrator/caches.py); None: no managed cache.
    kernel_cache: CacheCheck | None = None
    #: The tuned MoE kernel configs sglang looked for and did not find (`Using default MoE kernel config. …
    #: Config file not found at <path>`): keyed by the Triton version and the exact device name.
    moe_config_missing: list[str] = Field(default_factory=list)
    #: flashinfer JIT modules this start compiled (0.7.2's `Building JIT module NAME; …`, printed only on a cold
    #: build of that module): a start that built one is cold whatever its capture took.
    jit_built: list[str] = Field(default_factory=list)

    def capture_s(self) -> float | None:
        """Seconds of CUDA-graph capture (decode and piecewise): where a real server's JIT time goes."""
        timed = [p.seconds for p in self.phases if p.name in ("capture", "piecewise") and p.seconds is not None]
        return sum(timed) if timed else None

    def judged(self, check: CacheCheck | None, earlier: list[BootStart] | None = None) -> BootStart:
        """This start, cold or warm: the kernel-cache check before it decides (a new or set-aside cache is cold, its
        own warm cache is warm); without a check (an operator's own SGLANG_CACHE_DIR, a release of an earlier
        deploy, a check that could not run) the capture time against the release's `earlier` starts does."""
        update: dict[str, object] = {"kernel_cache": check} if check is not None else {}
        if check is not None and check.state != "unchecked":
            update |= {"cold": check.cold, "cold_basis": f"kernel cache {check.state}"}
        elif self.jit_built:
            update |= {"cold": True, "cold_basis": f"flashinfer built {len(self.jit_built)} JIT module(s): "
                                                   + ", ".join(self.jit_built[:3])}
        else:
            update |= dict(zip(("cold", "cold_basis"), self._by_capture(earlier or []), strict=True))
        return self.model_copy(update=update)

    def _by_capture(self, earlier: list[BootStart]) -> tuple[bool | None, str]:
        mine = self.capture_s()
        prior = [(b, c) for b in earlier if b.complete and (c := b.capture_s()) is not None]
        if mine is None or not prior:
            return None, "no kernel-cache check and no earlier start to compare capture with"
        fastest = min(c for _, c in prior)
        slowest = max(c for _, c in prior)
        if mine >= COLD_FACTOR * fastest and mine - fastest >= COLD_MIN_S:
            return True, f"capture {mine:.1f} s against {fastest:.1f} s of an earlier start"
        if slowest >= COLD_FACTOR * mine and slowest - mine >= COLD_MIN_S:
            return False, f"capture {mine:.1f} s against {slowest:.1f} s of an earlier (cold) start"
        for b, _ in reversed(prior):  # as long as the last start whose kind is known
            # a short capture as long as a cold one's: too short to tell a compile from none
            if b.cold is False or (b.cold is True and mine >= COLD_MIN_S):
                return b.cold, f"capture {mine:.1f} s, as long as an earlier {'cold' if b.cold else 'warm'} start's"
        return None, f"capture {mine:.1f} s, as long as every earlier start's (none of known kind)"

    def phase(self, name: PhaseName) -> BootPhase | None:
        return next((p for p in self.phases if p.name == name), None)

    def longest(self) -> BootPhase | None:
        timed = [p for p in self.phases if p.seconds is not None]
        return max(timed, key=lambda p: p.seconds or 0.0) if timed else None

    def summary(self) -> str:
        """`cold start 412 s (longest: capture 208 s)` — one line for `deploy status`."""
        kind = {True: "cold start", False: "warm start", None: "start"}[self.cold]
        total = f"{self.total_s:.0f} s" if self.total_s is not None else "not finished"
        longest = self.longest()
        tail = f" (longest: {longest.name} {longest.seconds:.0f} s)" if longest and longest.seconds is not None else ""
        cache = f", kernel cache {self.kernel_cache.state}" if self.kernel_cache is not None else ""
        return f"{kind} {total}{tail}{cache}"


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


def parse_boot(lines: list[str], *, healthy: bool = False, launched_at: datetime | None = None) -> BootStart | None:
    """The phases of one start from its journal lines (this start's only). None: no line of a start in them.

    Weights and capture are bracketed (begin … end); autotune and JIT end where the next phase line comes, and may
    run inside capture (the stand-in compiles while capturing): a phase's seconds exclude those nested in it, so
    the phases add up to the total. `healthy`: the server answered /health 200 before the ready line was read (the
    health wait stops at the first 200): the start is complete at its last line read. `launched_at`: when systemd
    started the unit's main process (naive local time, as sglang stamps): the imports before the first line count,
    and lines stamped before it (the previous process's drain, read after a restart's cursor) do not.
    """
    first: datetime | None = None
    now: datetime | None = None
    stack: list[tuple[PhaseName, datetime, float]] = []  # (phase, since, seconds of phases nested in it)
    durations: dict[PhaseName, float | None] = {}
    ready_at: datetime | None = None
    last_mark: datetime | None = None
    moe_missing: list[str] = []
    jit_built: list[str] = []
    launch = _naive(launched_at) if launched_at is not None else None

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
        if now is None or (launch is not None and now < launch):
            continue  # before this process began: the previous one's last lines (a restart's drain)
        if first is None:
            first = now
        moe = MOE_DEFAULT_CONFIG.search(line)
        if moe is not None and moe.group("path") not in moe_missing:
            moe_missing.append(moe.group("path"))
        jit = JIT_BUILD.search(line)
        if jit is not None and jit.group("module") not in jit_built:
            jit_built.append(jit.group("module"))
        begin = next((name for pat, name in _BEGINS if pat.search(line)), None)
        end = next((name for pat, name in _ENDS if pat.search(line)), None)
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
    order: list[PhaseName] = ["startup", "weights", "autotune", "jit", "capture", "piecewise"]
    phases = [BootPhase(name=n, seconds=durations[n]) for n in order if n in durations]
    if ready_at is not None:
        phases.append(BootPhase(name="warmup", seconds=max(0.0, (ready_at - (last_mark or first)).total_seconds())))
    if launch is not None and launch <= first:
        phases.insert(0, BootPhase(name="imports", seconds=(first - launch).total_seconds()))
        first = launch
    return BootStart(started_at=first.isoformat(), complete=ready_at is not None,
                     total_s=(ready_at - first).total_seconds() if ready_at is not None else None, phases=phases,
                     moe_config_missing=moe_missing, jit_built=jit_built)


def parse_systemd_time(value: str) -> datetime | None:
    """systemd's `ExecMainStartTimestamp` (`Mon 2026-12-07 15:12:38 UTC`) as a naive local time; None when empty
    or unreadable (the unit never started)."""
    m = re.search(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)", value)
    if m is None:
        return None
    try:
        return datetime.fromisoformat(m.group(1))
    except ValueError:
        return None


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
