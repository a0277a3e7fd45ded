"""The in-container watchdog under `up` (docs/gates.md, "Watchdog"): install its timer, unit, config and program.

The watchdog itself runs in the container (orchestrator/watchdog/probe.py, fired by a systemd timer), so a
stuck server is restarted with no help from the operator's machine. This step only keeps its files equal to what
the profile renders: unchanged on a converged host, one round trip when they differ.
"""

from __future__ import annotations

import base64

from orchestrator.engine.step import StepContext, mark_change, step
from orchestrator.errors import RemoteError
from orchestrator.facts import CT
from orchestrator.runlog import StepRecord
from orchestrator.scripts import render_script
from orchestrator.steps.release import profile_flags
from orchestrator.steps.session import ensure_facts, unknown_until_started
from orchestrator.watchdog.parse import parse_installed
from orchestrator.watchdog.render import TIMER, watchdog_files


@step("watchdog", ct_facts=(CT.watchdog,))
def watchdog(ctx: StepContext, record: StepRecord) -> None:
    """Install the sglang watchdog (a systemd timer in the container) when its files differ; remove it when off."""
    ensure_facts(ctx)
    if unknown_until_started(ctx, record, "the installed watchdog"):
        return
    installed = ctx.facts.get(CT.watchdog) or parse_installed("")
    settings = ctx.profile.watchdog
    paths = ctx.ct.paths
    if not settings.enabled:
        if not installed.present:
            record.summary = "off in the profile (watchdog.enabled: false)"
            return
        what = "stop and remove the watchdog (watchdog.enabled: false)"
        if not mark_change(record, ctx, what):
            record.summary = what
            return
        ctx.ct.script(render_script("watchdog_remove.sh.j2", timer=TIMER, unit_path=paths.watchdog_unit_path,
                                    timer_path=paths.watchdog_timer_path), check=False, what="remove the watchdog")
        record.summary = "watchdog removed (its state file stays)"
        return
    files = watchdog_files(ctx.profile)
    stale = [f.name for f in files if not installed.matches(f.remote_path, f.mode, f.sha256)]
    timer_ok = installed.timer_active == "active" and installed.timer_enabled == "enabled"
    every = (f"every {settings.interval_s} s, stall after {settings.stall_s} s, "
             f"{settings.restart_budget} restart(s) per {settings.budget_window_s} s")
    counters = bool(profile_flags(ctx).get("enable-metrics"))
    if not counters:  # the watchdog acts only on evidence: without counters a busy queue looks like a stall
        every += ("; enable-metrics off: no token counters, so it restarts only a server that fails with no client "
                  "connected (docs/gates.md, Watchdog)")
    record.details.update({"interval_s": settings.interval_s, "stall_s": settings.stall_s,
                           "restart_budget": settings.restart_budget, "budget_window_s": settings.budget_window_s,
                           "token_counters": counters})
    if not stale and timer_ok:
        record.summary = f"watchdog installed and active ({every})"
        if installed.last_run not in ("", "success"):
            record.summary += (f", but its last check failed (Result={installed.last_run}): see `journalctl -u "
                               "sglang-watchdog` in the container and docs/troubleshooting.md")
            ctx.say(f"  warning: {record.summary}")
        return
    what = (f"install the watchdog ({', '.join(stale)})" if stale else "start the watchdog's timer") + f": {every}"
    if not mark_change(record, ctx, what):
        record.summary = what
        return
    script = render_script("watchdog_install.sh.j2", dir=paths.watchdog_dir, timer=TIMER, files=[
        {"remote_path": f.remote_path, "mode": f.mode_octal, "b64": base64.b64encode(f.content.encode()).decode()}
        for f in files])
    res = ctx.ct.script(script, check=False, timeout=60, what="install the watchdog")
    if res.rc != 0 or res.last_line != "active":
        raise RemoteError(f"the watchdog did not start in CT {ctx.vmid}: {res.said(300)}",
                          fix="look at `systemctl status sglang-watchdog.timer` in the container",
                          host=ctx.host.name)
    record.summary = f"watchdog installed and started ({every})"
