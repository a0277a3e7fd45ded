"""Reading the target without changing it: `deploy status` (one round trip) and `deploy history`."""

from __future__ import annotations

from orchestrator.engine.state import ServerStatus
from orchestrator.engine.step import StepContext, step
from orchestrator.errors import CheckFailed
from orchestrator.facts import CT, HOST
from orchestrator.facts.reads import WATCHDOG_MARK, history_report
from orchestrator.layout import PATHS
from orchestrator.parsers.boot import BootStart
from orchestrator.parsers.netaddr import net0_static_ip
from orchestrator.releases.documents import ReleaseMeta, ReleaseVerdict
from orchestrator.releases.store import read_releases_script
from orchestrator.runlog import StepRecord
from orchestrator.steps.host import HARDWARE_FACTS, hardware_state
from orchestrator.steps.release import (
    RELEASE_FACTS,
    current_meta,
    current_verdict,
    drift_line,
    flag_drift,
    installed_state,
    tune_trial,
)
from orchestrator.steps.session import ensure_facts
from orchestrator.steps.software import patched_files_drift, stack_drift
from orchestrator.watchdog.parse import parse_watchdog_fact


def gpu_power(ctx: StepContext) -> list[dict[str, float | int | None]]:
    return ctx.facts.find(HOST.gpu_power) or []


def container_state(ctx: StepContext) -> str:
    """"running", "absent", or what `pct status` says ("stopped", …)."""
    if ctx.facts.ct_running:
        return "running"
    return ctx.facts.ct_state or "absent"


def read_watchdog(ctx: StepContext) -> None:
    """The state file from the facts; "absent" when the watchdog never ran (not installed, or an older deploy)."""
    read = ctx.facts.get(CT.watchdog_state)
    ctx_status = ctx.state.status
    if ctx_status is not None:
        ctx_status.watchdog = read if read is not None else parse_watchdog_fact(None)


@step("status", host_facts=(HOST.gpu_power, HOST.ct_status, *HARDWARE_FACTS),
      ct_facts=(*RELEASE_FACTS, CT.current_boot, CT.kernel_cache, CT.ct_address, CT.watchdog_state, CT.stack_dists,
                CT.stack_patched))
def status(ctx: StepContext, record: StepRecord) -> None:
    """Current release, server state and health, GPU power now: one round trip."""
    ensure_facts(ctx)
    gpus = gpu_power(ctx)
    info = ServerStatus(container=container_state(ctx), gpus=gpus,
                        power_w=round(sum(float(g["power_w"] or 0) for g in gpus), 1),
                        power_limit_w=round(sum(float(g["limit_w"] or 0) for g in gpus), 1))
    ctx.state.status = info
    hardware = ctx.state.hardware = hardware_state(ctx.facts)
    info.hardware = hardware.to_dict(ctx.host.name)
    power = f"GPUs {info.power_w:.0f} W of {info.power_limit_w:.0f} W" + (
        f"; hardware: {len(hardware.faulty)} GPU(s) with a fault ({hardware.action.value})" if hardware.faulty
        else "")
    if not info.container_running:
        # Nothing inside a stopped container can be read: say so instead of "release none, sglang unknown".
        record.details.update(info.to_dict())
        record.summary = f"CT {ctx.vmid} is {info.container}; {power}"
        return
    state = installed_state(ctx)
    health = ctx.facts.get(CT.health)
    meta = current_meta(ctx) or ReleaseMeta()
    verdict = current_verdict(ctx) or ReleaseVerdict()
    info.release, info.active = state.release, state.active
    info.health = health
    info.release_created, info.release_source = meta.created_at, meta.source
    info.verdict, info.sglang_version = verdict.verdict, meta.sglang_version
    info.stack = meta.stack.document() if meta.stack is not None else None
    running = meta.stack.sha if meta.stack is not None else None
    info.stack_drift = stack_drift(ctx, running)
    info.patch_drift = patched_files_drift(ctx, running, [str(n) for n in (info.stack or {}).get("patches") or ()])
    info.drift = flag_drift(ctx)
    trial = tune_trial(ctx)
    info.tune_trial = trial.id if trial else None
    addr = ctx.facts.get(CT.ct_address)
    info.address = net0_static_ip(ctx.host.container.net0) or addr
    boots: list[BootStart] = ctx.facts.get(CT.current_boot) or []
    info.boots = boots
    info.kernel_cache = ctx.facts.get(CT.kernel_cache)
    read_watchdog(ctx)
    record.details.update(info.to_dict())
    record.summary = (f"release {state.release or 'none'} ({info.verdict or 'unverified'}"
                      f"{'' if info.serving else ', NOT SERVING'}), sglang "
                      f"{state.active}, /health {info.health}, {power}, watchdog "
                      f"{info.watchdog.state if info.watchdog else 'unknown'}"
                      + (f"; {drift_line(info.drift, ctx.host.profile)}" if info.drift else "")
                      + (f"; patched file changed: {'; '.join(info.patch_drift)}" if info.patch_drift else "")
                      + (f"; a trial point of tune {info.tune_trial}, not a release the operator kept (unless the "
                         f"tune runs now: `deploy tune host {ctx.host.name} --resume {info.tune_trial}` finishes "
                         "it)" if info.tune_trial else ""))


@step("history")
def history(ctx: StepContext, record: StepRecord) -> None:
    """Every release on the target with its verdict and figures (one round trip)."""
    script = (f"{read_releases_script(ctx.inputs.history_limit)}\necho {WATCHDOG_MARK}\n"
              f"cat {PATHS.watchdog_state} 2>/dev/null || true\n")
    read = ctx.ct.read_script(script, history_report, what="read releases")
    if read is None:
        raise CheckFailed(f"CT {ctx.vmid} is not running", host=ctx.host.name, fix="deploy up")
    rows = read.releases
    ctx.state.history = rows
    ctx.state.watchdog = read.watchdog
    restarts = [a for a in ctx.state.watchdog.actions if a.action == "restart"]
    record.summary = f"{len(rows)} release(s), {len(restarts)} watchdog restart(s)"
