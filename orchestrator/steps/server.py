"""The SGLang unit under `up`: render, validate flags with the container's sglang, install as a release, (re)start.

Restart happens only when the rendered files differ from what is installed (body hashes), so a second `up`
restarts nothing. Writing and activating the release is the release lifecycle's (orchestrator.steps.release).
"""

from __future__ import annotations

import shlex

from orchestrator.engine.step import StepContext, mark_change, step
from orchestrator.errors import ConfigError, RemoteError
from orchestrator.facts import CT
from orchestrator.flags import diff_flags, masked_diff
from orchestrator.render.service import launch_argv, secret_flags
from orchestrator.runlog import StepRecord
from orchestrator.steps.release import (
    abandon_interrupted_up,
    arm_rollback,
    bundle_for,
    current_meta,
    current_verdict,
    desired_flags,
    drift_line,
    flag_drift,
    install_bundle,
    installed_flags,
    installed_state,
    make_current,
    profile_flags_sha,
    restore_interrupted,
    unverified_up_release,
)
from orchestrator.steps.session import ensure_facts, unknown_until_started
from orchestrator.steps.software import release_stack, require_complete_weights, require_valid_flags, server_stack


def unit_enabled(ctx: StepContext) -> bool:
    """`systemctl is-enabled` says `enabled`: the container's systemd starts sglang when the container boots."""
    return ctx.facts.get(CT.enabled) == "enabled"


def enable_unit(ctx: StepContext, record: StepRecord) -> None:
    """Enable the running, unchanged unit so it comes back after a container reboot (one round trip)."""
    unit = ctx.ct.paths.unit_name
    what = f"enable {unit}.service so the container starts it at boot"
    if not mark_change(record, ctx, what):
        record.summary = what
        return
    ctx.say(what)
    res = ctx.ct.run(f"systemctl enable --quiet {shlex.quote(unit)} && systemctl is-enabled {shlex.quote(unit)}",
                     check=False, timeout=60, what=f"enable {unit}")
    if res.rc != 0 or res.last_line != "enabled":
        raise RemoteError(f"systemctl enable {unit} failed in CT {ctx.vmid}: "
                          f"{res.said(300)}",
                          fix=f"check {ctx.ct.paths.unit_path} in the container (its [Install] section)",
                          host=ctx.host.name)
    record.summary = f"{unit}.service enabled at boot (unit unchanged, server active)"


@step("server_unit", ct_facts=(CT.unit_sha, CT.active, CT.enabled, CT.current_release, CT.releases, CT.main_pid,
                               CT.current_meta, CT.current_verdict, CT.current_flags, CT.weights))
def server_unit(ctx: StepContext, record: StepRecord) -> None:
    """Render sglang.service + sglang.env; install and restart only when they changed."""
    ensure_facts(ctx)
    if unknown_until_started(ctx, record, "the installed unit (sglang is started then if its boot did not)"):
        return
    # A plan only says what `up` would do with a never-verified release (a roll's or an up's), and does nothing.
    restore_interrupted(ctx, record)
    abandoned = unverified_up_release(ctx) if ctx.options.dry_run else abandon_interrupted_up(ctx, record)
    flags = desired_flags(ctx)
    bundle = bundle_for(ctx, flags)
    state = installed_state(ctx)
    unit = bundle.file("sglang.service")
    env = bundle.file("sglang.env")
    same = state.unit_sha == unit.sha256 and state.env_sha == env.sha256
    record.details.update({"bundle_sha256": bundle.sha256, "release": state.release, "active": state.active,
                           "flags": flags.argv(without=secret_flags(ctx.profile, flags))})
    server = ctx.state.server
    server.bundle, server.release = bundle, state.release
    enabled = unit_enabled(ctx)
    record.details["enabled"] = enabled
    if same and state.active == "active" and abandoned is None:
        server.restarted = False
        drift = flag_drift(ctx)
        record.details["drift"] = [d.to_dict() for d in drift]
        if enabled:
            record.summary = (f"unit unchanged (release {state.release}), server active, enabled at boot"
                              + (f"; {drift_line(drift, ctx.host.profile)}" if drift else ""))
            return
        enable_unit(ctx, record)
        return
    try:
        installed = installed_flags(ctx)
    except ConfigError:  # a secret an older deploy stored redacted: no diff to show (desired_flags said so)
        installed = None
    changes = [] if installed is None else [
        f"--{k}: {'(unset)' if a is None else a} → {'(unset)' if b is None else b}"
        for k, a, b in masked_diff(diff_flags(installed, flags.as_dict()), secret_flags(ctx.profile, flags))]
    record.details["flag_changes"] = changes
    what = ((f"install the same files as a new release (no restart: unchanged; {abandoned} was never verified)"
             if state.active == "active" else "start sglang (unit unchanged)") if same else
            f"install new unit ({len(flags)} flags, sglang {flags.version}"
            + (f"; {', '.join(changes)}" if changes else "") + ") and "
            f"{'restart' if state.active == 'active' else 'start'} sglang")
    if not mark_change(record, ctx, what):
        record.summary = what
        return
    require_complete_weights(ctx)
    if not same:
        check = require_valid_flags(ctx, launch_argv(ctx.profile, flags, api_key="validation-placeholder")[3:])
        record.details["validated_with"] = f"sglang {check.version} in CT {ctx.vmid}"
    ctx.say(what)
    if same and abandoned is None and state.release is not None:
        # Stopped with the right files: start the current release again; no new release.
        make_current(ctx, state.release, what="start sglang", restart=False)
        server.restarted = True
        record.summary = f"sglang started (release {state.release}, unit unchanged)"
        return
    previous_meta, verdict = current_meta(ctx), current_verdict(ctx)
    verified = verdict is not None and verdict.kept
    # Restart only when the files changed: the body hashes decide, never the release id in the header.
    restart = state.active == "active" and not same
    rid = install_bundle(ctx, bundle, source="up", restart=restart,
                         previous=state.release, existing=state.releases,
                         extra_meta={"profile_flags_sha": profile_flags_sha(ctx), "command": ctx.options.command})
    server.release, server.installed, server.previous = rid, True, state.release
    if state.release is not None and verified and release_stack(ctx, previous_meta).venv != server_stack(ctx).venv:
        # A stack change is a roll: never leave the host down while a verified release exists.
        arm_rollback(ctx, rid, state.release)
        record.details["rollback_armed"] = state.release
    server.restarted = restart or state.active != "active"
    done = "restarted" if restart else "started" if server.restarted else "left running (files unchanged)"
    record.summary = f"release {rid} installed and sglang {done}"
