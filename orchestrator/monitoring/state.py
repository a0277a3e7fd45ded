"""What the metrics say, as typed values: one run's observation, and the state carried from publish to publish.

Why carried state: a counter (rollbacks, watchdog restarts) and "the last verified release's figures" outlive the
run that saw them, and the host is the only place every operator's machine shares. The state is a small JSON file
beside the host lock (`/var/lib/deploy/metrics-state.json`), read with the run's first round trip and written with
its last one, together with the `.prom` file. `advance` is pure: previous state + this run → next state.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from orchestrator.releases.documents import ReleaseVerdict

HEALTH_STATES = ("ok", "warn", "fail")
WATCHDOG_STATES = ("ok", "waiting", "suspect", "restarted", "exhausted", "absent", "unreadable")
#: How many releases' records the state keeps (a rollback to an older one publishes it as "unknown").
KEEP_RELEASES = 16


@dataclass(frozen=True)
class BenchFigures:
    """The bench figures of a release, in base units (seconds, watts, joules)."""

    preset: str
    output_tokens_per_s: float
    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None
    tokens_per_s_per_w: float | None = None
    j_per_output_token: float | None = None
    at: float | None = None  # when it was measured (unix seconds), None when unknown

    @classmethod
    def from_verdict(cls, verdict: ReleaseVerdict, at: float | None = None) -> BenchFigures | None:
        """A verdict.json's candidate figures and telemetry (what `up` and the gate recorded), or None."""
        cand, tele = verdict.candidate, verdict.telemetry
        if cand is None or cand.output_throughput is None:
            return None

        def s(ms: float | None) -> float | None:
            return ms / 1000 if ms is not None else None

        return cls(preset=str(verdict.preset or "unknown"), output_tokens_per_s=cand.output_throughput,
                   ttft_p99_s=s(cand.p99_ttft_ms), tpot_p99_s=s(cand.p99_tpot_ms),
                   tokens_per_s_per_w=tele.tokens_per_s_per_w if tele is not None else None,
                   j_per_output_token=tele.j_per_output_token if tele is not None else None, at=at)


@dataclass(frozen=True)
class GateRun:
    passed: bool
    at: float


@dataclass(frozen=True)
class ReleaseRecord:
    """What the metrics know of one release: its verdict, stack and last figures and gate results."""

    verdict: str | None = None
    sglang_version: str | None = None
    figures: BenchFigures | None = None
    gates: dict[str, GateRun] = field(default_factory=dict)


@dataclass(frozen=True)
class Rollback:
    at: float
    reason: str
    candidate: str  # the release left
    to: str


@dataclass(frozen=True)
class Watchdog:
    state: str
    restarts_in_window: int = 0
    budget: int = 0
    last_check: float | None = None


@dataclass(frozen=True)
class GpuFault:
    """One fault of one GPU as the metrics carry it (hardware/state.py's HardwareFault, without its evidence)."""

    gpu: str  # the index in PCI order, else the bus id
    bus_id: str
    kind: str
    action: str
    severity: str  # warn or fail


@dataclass(frozen=True)
class Hardware:
    """The GPUs' health as the last run that read the host's sensors saw it (`up`, whose host checks read them)."""

    at: float
    gpus: int  # how many GPUs the sensors named
    states: dict[str, int] = field(default_factory=dict)  # ok / warn / fail → GPU count
    faults: tuple[GpuFault, ...] = ()


@dataclass(frozen=True)
class Observation:
    """What one run saw and did, at its end. `release` is the one current now (None: unknown)."""

    at: float
    command: str
    release: str | None
    record: ReleaseRecord = ReleaseRecord()  # the current release as this run saw it (fields None: not seen)
    judged: dict[str, dict[str, GateRun]] = field(default_factory=dict)  # release → gates this run ran on it
    rollbacks: tuple[Rollback, ...] = ()
    watchdog: Watchdog | None = None
    restart_times: tuple[float, ...] = ()  # every restart the watchdog's state file lists
    hardware: Hardware | None = None  # None: this run did not read the GPUs' sensors


@dataclass(frozen=True)
class MetricsState:
    """Carried from one publish to the next (the JSON file on the host)."""

    current: str | None = None
    reference: str | None = None  # the release that was verified and current before `current`
    releases: dict[str, ReleaseRecord] = field(default_factory=dict)
    rollbacks: dict[str, int] = field(default_factory=dict)
    last_rollback: Rollback | None = None
    watchdog: Watchdog | None = None
    watchdog_restarts: int = 0
    watchdog_seen_until: float = 0.0  # the newest restart counted
    published_at: float | None = None
    command: str = ""
    hardware: Hardware | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | None) -> MetricsState:
        """The state file's text; an empty state when it is missing or unreadable (counters then start again,
        which Prometheus' rate() and increase() read as a counter reset)."""
        try:
            data = json.loads(text or "")
            return cls(current=data.get("current"), reference=data.get("reference"),
                       releases={k: _release(v) for k, v in (data.get("releases") or {}).items()},
                       rollbacks={str(k): int(v) for k, v in (data.get("rollbacks") or {}).items()},
                       last_rollback=Rollback(**data["last_rollback"]) if data.get("last_rollback") else None,
                       watchdog=Watchdog(**data["watchdog"]) if data.get("watchdog") else None,
                       watchdog_restarts=int(data.get("watchdog_restarts", 0)),
                       watchdog_seen_until=float(data.get("watchdog_seen_until", 0.0)),
                       published_at=data.get("published_at"), command=str(data.get("command", "")),
                       hardware=_hardware(data.get("hardware")))
        except (ValueError, TypeError, KeyError, AttributeError):
            return cls()


def _hardware(data: dict[str, Any] | None) -> Hardware | None:
    if not data:
        return None
    return Hardware(at=float(data["at"]), gpus=int(data["gpus"]),
                    states={str(k): int(v) for k, v in (data.get("states") or {}).items()},
                    faults=tuple(GpuFault(**f) for f in data.get("faults") or ()))


def _release(data: dict[str, Any]) -> ReleaseRecord:
    fig = data.get("figures")
    return ReleaseRecord(verdict=data.get("verdict"), sglang_version=data.get("sglang_version"),
                         figures=BenchFigures(**fig) if fig else None,
                         gates={k: GateRun(**v) for k, v in (data.get("gates") or {}).items()})


def _merge(old: ReleaseRecord | None, seen: ReleaseRecord, gates: dict[str, GateRun]) -> ReleaseRecord:
    old = old or ReleaseRecord()
    return ReleaseRecord(verdict=seen.verdict or old.verdict, sglang_version=seen.sglang_version or old.sglang_version,
                         figures=seen.figures or old.figures, gates={**old.gates, **seen.gates, **gates})


def advance(prev: MetricsState, obs: Observation, reasons: Sequence[str]) -> MetricsState:
    """The state after this run: its release current, its gates and figures recorded, its rollbacks counted.

    `reasons`: every reason a rollback counts under, "other" among them (the steps' declarations,
    steps.gate_registry): each is carried from the first run on, at 0 until it happens, so a counter's first
    increase is seen by `increase()`."""
    releases = dict(prev.releases)
    for rid, gates in obs.judged.items():
        if rid != obs.release:
            releases[rid] = _merge(releases.get(rid), ReleaseRecord(), gates)
    if obs.release is not None:
        releases[obs.release] = _merge(releases.get(obs.release), obs.record, obs.judged.get(obs.release, {}))
    reference = prev.reference
    if prev.current is not None and obs.release != prev.current:
        if releases.get(prev.current, ReleaseRecord()).verdict == "kept":
            reference = prev.current
    if reference == obs.release:  # back on the reference itself: nothing verified before it is known here
        reference = None
    counts = {reason: prev.rollbacks.get(reason, 0) for reason in reasons}
    for rb in obs.rollbacks:
        key = rb.reason if rb.reason in reasons else "other"
        counts[key] += 1
    new_restarts = [t for t in obs.restart_times if t > prev.watchdog_seen_until]
    keep = [r for r in releases if r in (obs.release, reference)]
    keep += [r for r in reversed(list(releases)) if r not in keep][:KEEP_RELEASES - len(keep)]
    return replace(prev, current=obs.release, reference=reference,
                   releases={r: releases[r] for r in releases if r in keep}, rollbacks=counts,
                   last_rollback=obs.rollbacks[-1] if obs.rollbacks else prev.last_rollback,
                   watchdog=obs.watchdog if obs.watchdog is not None else prev.watchdog,
                   watchdog_restarts=prev.watchdog_restarts + len(new_restarts),
                   watchdog_seen_until=max([prev.watchdog_seen_until, *new_restarts]),
                   published_at=obs.at, command=obs.command,
                   hardware=obs.hardware if obs.hardware is not None else prev.hardware)
