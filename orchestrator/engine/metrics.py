"""The run's end as metrics: what `up`, `roll` and `rollback` saw and did, published on the PVE host.

No round trip of its own: the carried state and the container's watchdog state come with the run's first round
trip (the facts), and the files are written in its last one (the lock's release, `HostLease.on_release`), also
when the run failed or rolled back. docs/monitoring.md lists what is published.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from orchestrator.engine.step import StepContext, gate_registry
from orchestrator.facts import CT, HOST, CtFact, HostFact
from orchestrator.hardware.state import HardwareState
from orchestrator.monitoring.events import events_of
from orchestrator.monitoring.publish import publish_script
from orchestrator.monitoring.render import render
from orchestrator.monitoring.state import (
    HEALTH_STATES,
    BenchFigures,
    GateRun,
    GpuFault,
    Hardware,
    MetricsState,
    Observation,
    ReleaseRecord,
    Rollback,
    Watchdog,
    advance,
)

#: The steps whose playbooks change which release runs, and the command each stands for.
PUBLISHING = {"server_unit": "up", "install_release": "roll", "rollback_release": "rollback"}
HOST_FACTS: tuple[HostFact[Any], ...] = (HOST.metrics_state,)
CT_FACTS: tuple[CtFact[Any], ...] = (CT.watchdog_state, CT.current_release, CT.current_meta, CT.current_verdict)


def publishing_command(steps: list[str]) -> str | None:
    """The command a playbook publishes metrics as (None: it changes no release, so it publishes nothing)."""
    return next((PUBLISHING[s] for s in steps if s in PUBLISHING), None)


def _iso_ts(text: object) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp() if text else None
    except ValueError:
        return None


def _record(ctx: StepContext, release: str | None) -> ReleaseRecord:
    """The current release as this run knows it: the verdict it wrote, else the facts' (when they describe it)."""
    if release is None:
        return ReleaseRecord()
    fact_release = ctx.facts.find(CT.current_release)
    meta = ctx.facts.find(CT.current_meta) if fact_release == release else None
    verdict = ctx.state.verdicts.get(release) or (ctx.facts.find(CT.current_verdict) if fact_release == release
                                                  else None)
    bundle = ctx.state.server.bundle
    version = (bundle.flags.version if bundle is not None and ctx.state.server.release == release
               else meta.sglang_version if meta is not None else None)
    return ReleaseRecord(verdict=verdict.verdict if verdict else None, sglang_version=version,
                         figures=BenchFigures.from_verdict(verdict, at=_iso_ts(verdict.at)) if verdict else None)


def _judged(ctx: StepContext, now: float) -> dict[str, dict[str, GateRun]]:
    """The gates this run ran, on the release they judged (a roll's candidate, up's release, a rollback's
    target): passed when the step ended ok or changed, failed when it failed; a skipped gate keeps its last result."""
    judged = ctx.state.server.release
    if judged is None:
        return {}
    gates: dict[str, GateRun] = {}
    published = gate_registry().published  # step name → the gate it publishes as (its @step's GateSpec)
    for rec in ctx.records:
        gate = published.get(rec.name)
        if gate is not None and rec.status in ("ok", "changed", "failed"):
            gates[gate] = GateRun(passed=rec.status != "failed", at=now)
    return {judged: gates} if gates else {}


def _hardware(hw: HardwareState | None, now: float) -> Hardware | None:
    """The sensors' reading as the metrics carry it (None: this run read none)."""
    if hw is None or not hw.gpus:
        return None
    states = {name: sum(1 for g in hw.gpus if g.state == name) for name in HEALTH_STATES}
    faults = tuple(GpuFault(gpu=str(g.index) if g.index is not None else g.bus_id, bus_id=g.bus_id, kind=f.kind,
                            action=f.action.value, severity=f.severity) for g in hw.gpus for f in g.faults)
    return Hardware(at=now, gpus=len(hw.gpus), states=states, faults=faults)


def observe(ctx: StepContext, command: str, now: float | None = None) -> Observation:
    """This run as an Observation, at its end."""
    now = time.time() if now is None else now
    state = ctx.state
    release = state.rollback.to if state.rollback is not None else state.server.release
    if release is None:
        release = ctx.facts.find(CT.current_release)
    wd = ctx.facts.find(CT.watchdog_state)
    watchdog = None
    restarts: tuple[float, ...] = ()
    if wd is not None:  # None: the container was not running, so nothing was read
        watchdog = Watchdog(state=wd.state, restarts_in_window=wd.restarts_in_window, budget=wd.budget,
                            last_check=wd.last_check)
        restarts = tuple(a.at for a in wd.actions if a.action == "restart")
    return Observation(at=now, command=command, release=release, record=_record(ctx, release),
                       hardware=_hardware(state.hardware, now),
                       judged=_judged(ctx, now),
                       rollbacks=tuple(Rollback(at=now, reason=rb.reason or "other", candidate=rb.candidate, to=rb.to)
                                       for rb in state.rolled_back),
                       watchdog=watchdog, restart_times=restarts)


def metrics_script(ctx: StepContext, command: str) -> str:
    """The host-side lines that publish this run's metrics (run with the lock's release)."""
    prev = ctx.facts.find(HOST.metrics_state)
    if prev is None:  # not read: a fresh state
        prev = MetricsState.from_json(None)
    obs = observe(ctx, command)
    nxt = advance(prev, obs, gate_registry().rollback_reasons)
    ctx.state.events = events_of(ctx.host.name, prev, obs)  # posted once the run ends (runner.py)
    return publish_script(render(ctx.host.name, nxt), nxt.to_json())
