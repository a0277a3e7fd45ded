"""Each decode step's time split into kernel classes and GPU idle, per rank (pure).

A step's window is its host annotation widened to its GPU annotation (trace.Step). Inside it every instant is
given to exactly one class: the highest in `OVERLAP_PRIORITY` among the GPU events running then, or `idle` when
none runs (the GPU waits for the host: launch, scheduling, sampling). So the classes of a step add up to the
step's measured time, and `coverage` says how closely they did (a check, not an assumption: overlapping events
counted twice would push it above 1).
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from pydantic import BaseModel, ConfigDict

from orchestrator.profile.kernels import CLASS_ORDER, OVERLAP_PRIORITY, KernelClass, classify, short_name
from orchestrator.profile.trace import GpuEvent, Step, Trace, TraceError

#: The top kernels kept per class in a breakdown (the evidence a verdict names).
TOP_KERNELS = 3


class KernelTime(BaseModel):
    """One kernel name's time inside the steps (after overlap was resolved)."""

    model_config = ConfigDict(frozen=True)
    name: str
    kernel_class: KernelClass
    us: float
    count: int


class StepTimes(BaseModel):
    """One step: its measured window and the microseconds each class took of it."""

    model_config = ConfigDict(frozen=True)
    start_us: float
    step_us: float
    batch_size: int
    by_class_us: dict[KernelClass, float]

    @property
    def accounted_us(self) -> float:
        return sum(self.by_class_us.values())


class RankBreakdown(BaseModel):
    """One rank's decode steps, summed."""

    model_config = ConfigDict(frozen=True)
    rank: int
    source: str
    steps: int
    step_us_total: float
    by_class_us: dict[KernelClass, float]
    top_kernels: list[KernelTime]
    per_step: list[StepTimes]

    @property
    def mean_step_us(self) -> float:
        return self.step_us_total / self.steps if self.steps else 0.0

    def share(self, cls: KernelClass) -> float:
        """The class's share of the measured step time, 0..1."""
        return self.by_class_us.get(cls, 0.0) / self.step_us_total if self.step_us_total else 0.0

    @property
    def coverage(self) -> float:
        """The classes' sum over the measured step time (1.0 when every instant was counted exactly once)."""
        return sum(self.by_class_us.values()) / self.step_us_total if self.step_us_total else 0.0

    @property
    def busy_us(self) -> float:
        """GPU time that is neither idle nor a collective: the rank's own work."""
        return sum(v for c, v in self.by_class_us.items() if c not in (KernelClass.idle, KernelClass.collective))


class Breakdown(BaseModel):
    """Every rank's breakdown of one profiled window."""

    model_config = ConfigDict(frozen=True)
    stage: str
    device: str | None
    world_size: int | None
    ranks: list[RankBreakdown]

    def mean_share(self, cls: KernelClass) -> float:
        return sum(r.share(cls) for r in self.ranks) / len(self.ranks) if self.ranks else 0.0

    def payload(self) -> dict[str, object]:
        """The --json form: shares rounded, per-step times kept."""
        return {
            "stage": self.stage, "device": self.device, "world_size": self.world_size,
            "ranks": [{
                "rank": r.rank, "source": r.source, "steps": r.steps, "mean_step_us": round(r.mean_step_us, 1),
                "coverage": round(r.coverage, 4),
                "shares": {c.value: round(r.share(c), 4) for c in CLASS_ORDER},
                "us": {c.value: round(r.by_class_us.get(c, 0.0), 1) for c in CLASS_ORDER},
                "top_kernels": [{"name": k.name, "class": k.kernel_class.value, "us": round(k.us, 1),
                                 "count": k.count} for k in r.top_kernels],
                "per_step_us": [round(s.step_us, 1) for s in r.per_step],
            } for r in self.ranks],
        }


def step_times(step: Step, events: tuple[GpuEvent, ...], starts: list[float],
               kernel_us: dict[str, float], kernel_n: dict[str, int]) -> StepTimes:
    """Split one step's window; `starts` is the events' start times (sorted) for the window's look-up.

    A sweep over the events' edges: between two edges the running events do not change, and the time goes to the
    highest class among them (or to idle), and to the kernel of that class that started last."""
    lo, hi = step.start_us, step.end_us
    # events are sorted by start; none lasts longer than the longest, so look back from the window's start
    first = bisect.bisect_left(starts, lo - _LONGEST_EVENT_US)
    last = bisect.bisect_right(starts, hi)
    edges: list[tuple[float, int, int]] = []  # (time, +1 start / -1 end, index into inside)
    inside: list[tuple[GpuEvent, KernelClass]] = []
    for e in events[first:last]:
        if e.end_us > lo and e.start_us < hi:
            edges += [(max(e.start_us, lo), 1, len(inside)), (min(e.end_us, hi), -1, len(inside))]
            inside.append((e, classify(e.name)))
    edges.sort(key=lambda x: (x[0], x[1]))
    by_class: dict[KernelClass, float] = defaultdict(float)
    running: dict[KernelClass, list[int]] = {c: [] for c in OVERLAP_PRIORITY}
    t = lo
    for when, kind, idx in edges:
        if when > t:
            _credit(t, when, running, inside, by_class, kernel_us)
            t = when
        cls = inside[idx][1]
        if kind > 0:
            running[cls].append(idx)
            kernel_n[inside[idx][0].name] += 1
        else:
            running[cls].remove(idx)
    if hi > t:
        _credit(t, hi, running, inside, by_class, kernel_us)
    return StepTimes(start_us=lo, step_us=hi - lo, batch_size=step.batch_size, by_class_us=dict(by_class))


def _credit(a: float, b: float, running: dict[KernelClass, list[int]], inside: list[tuple[GpuEvent, KernelClass]],
            by_class: dict[KernelClass, float], kernel_us: dict[str, float]) -> None:
    for cls in OVERLAP_PRIORITY:
        if running[cls]:
            by_class[cls] += b - a
            kernel_us[inside[running[cls][-1]][0].name] += b - a
            return
    by_class[KernelClass.idle] += b - a


#: How far before a step's window an event may start and still reach into it (microseconds). Decode kernels
#: last microseconds to milliseconds; a spinning all-reduce can last a whole step.
_LONGEST_EVENT_US = 1_000_000.0


def rank_breakdown(trace: Trace, stage: str = "DECODE") -> RankBreakdown:
    """One rank's breakdown over every step of `stage` in its trace."""
    steps = [s for s in trace.steps if s.mode == stage]
    if not steps:
        seen = sorted({s.mode for s in trace.steps})
        raise TraceError(
            f"{trace.source} has no step[{stage} …] annotation"
            + (f" (it has {', '.join(seen)} steps)" if seen else " (no step annotations at all)"),
            fix="profile during decode: POST /start_profile with num_steps while a bench runs; with "
                "profile_by_stage the …-DECODE.trace.json.gz file holds the decode steps")
    starts = [e.start_us for e in trace.events]
    kernel_us: dict[str, float] = defaultdict(float)
    kernel_n: dict[str, int] = defaultdict(int)
    per_step = [step_times(s, trace.events, starts, kernel_us, kernel_n) for s in steps]
    totals: dict[KernelClass, float] = defaultdict(float)
    for st in per_step:
        for c, v in st.by_class_us.items():
            totals[c] += v
    top = sorted((KernelTime(name=short_name(n), kernel_class=classify(n), us=us, count=kernel_n[n])
                  for n, us in kernel_us.items()), key=lambda k: -k.us)
    per_class: dict[KernelClass, int] = defaultdict(int)
    kept: list[KernelTime] = []
    for k in top:
        if per_class[k.kernel_class] < TOP_KERNELS:
            per_class[k.kernel_class] += 1
            kept.append(k)
    return RankBreakdown(rank=trace.rank, source=trace.source, steps=len(per_step),
                         step_us_total=sum(s.step_us for s in per_step),
                         by_class_us={c: totals.get(c, 0.0) for c in CLASS_ORDER}, top_kernels=kept,
                         per_step=per_step)


def breakdown(traces: list[Trace], stage: str = "DECODE") -> Breakdown:
    """Every rank's breakdown; two files of one rank are refused (the same window given twice)."""
    ranks = [rank_breakdown(t, stage) for t in traces]
    seen: dict[int, str] = {}
    for r in ranks:
        if r.rank in seen:
            raise TraceError(f"{r.source} and {seen[r.rank]} are both rank {r.rank}",
                             fix="give one trace per rank of one profiled window")
        seen[r.rank] = r.source
    devices = {t.device for t in traces if t.device}
    sizes = {t.world_size for t in traces if t.world_size}
    return Breakdown(stage=stage, device=", ".join(sorted(devices)) or None,
                     world_size=max(sizes) if sizes else None,
                     ranks=sorted(ranks, key=lambda r: r.rank))
