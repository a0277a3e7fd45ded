"""The SGLang unit: render, validate flags with the container's sglang, install as a release, (re)start.

Restart happens only when the rendered files differ from what is installed (body hashes), so a second `up`
restarts nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orchestrator.errors import RemoteError
from orchestrator.flags import FlagSchema, FlagSet, canonicalize, diff_flags
from orchestrator.render.bundle import Bundle, render_bundle
from orchestrator.render.service import launch_argv
from orchestrator.runlog import StepRecord
from orchestrator.state.releases import (
    ReleaseBundle,
    activate_script,
    current_release,
    find_by_sha,
    in_container_script,
    journal_offset,
    new_release_id,
    parse_release_ids,
    write_release_script,
)
from orchestrator.steps.base import StepContext, mark_change, step
from orchestrator.steps.session import ensure_facts
from orchestrator.steps.software import require_valid_flags


@dataclass(frozen=True)
class InstalledState:
    unit_sha: str | None
    env_sha: str | None
    active: str
    release: str | None
    releases: list[str]


def installed_state(ctx: StepContext) -> InstalledState:
    shas: dict[str, str] = {}
    out = ctx.facts.c("unit_sha")
    if out is not None and out.rc == 0:
        for line in out.stdout.splitlines():
            digest, _, path = line.partition(" ")
            shas[path.strip()] = digest
    active = ctx.facts.c("active")
    link = ctx.facts.c("current_release")
    rels = ctx.facts.c("releases")
    return InstalledState(
        unit_sha=shas.get("/etc/systemd/system/sglang.service"),
        env_sha=shas.get("/etc/sglang/sglang.env"),
        active=active.stdout.strip() if active is not None else "unknown",
        release=current_release(link.stdout) if link is not None and link.rc == 0 else None,
        releases=parse_release_ids(rels.stdout) if rels is not None and rels.rc == 0 else [],
    )


def installed_flags(ctx: StepContext) -> dict[str, Any] | None:
    """The current release's flags as stored on the target (None before the first release)."""
    import json

    out = ctx.facts.c("current_flags")
    if out is None or out.rc != 0 or not out.stdout.strip():
        return None
    try:
        data = json.loads(out.stdout)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def profile_flags(ctx: StepContext, schema: FlagSchema | None = None) -> FlagSet:
    return canonicalize(ctx.profile.flags, schema or FlagSchema.load(ctx.profile.sglang_version))


def api_key_value(ctx: StepContext) -> str | None:
    return ctx.profile.api_key.read() if ctx.profile.api_key is not None else None


def bundle_for(ctx: StepContext, flags: FlagSet) -> Bundle:
    return render_bundle(ctx.host, ctx.profile, flags=flags, api_key=api_key_value(ctx))


def install_release(ctx: StepContext, bundle: Bundle, *, source: str, restart: bool,
                    previous: str | None, existing: list[str], extra_meta: dict[str, Any] | None = None) -> str:
    """Write (or reuse) the release for this bundle and activate it: one round trip."""
    rid = find_by_sha(existing, bundle.sha256) or new_release_id(bundle.sha256)
    files = tuple(bundle.files)
    meta = {"id": rid, "created_at": datetime.now(UTC).isoformat(timespec="seconds"), "source": source,
            "bundle_sha256": bundle.sha256, "previous": previous, "profile": ctx.host.profile,
            "sglang_version": bundle.flags.version, "argv": launch_argv(ctx.profile, bundle.flags),
            **(extra_meta or {})}
    rb = ReleaseBundle(rid, files, bundle.flags.as_dict(), meta)
    # A reused release directory must not carry an old verdict: until this run writes one it is unverified.
    script = (write_release_script(rb) + f"rm -f /var/lib/deploy/releases/{rid}/verdict.json\n"
              + activate_script(rid, restart=restart, keep=ctx.profile.keep_releases))
    res = ctx.ssh.script(in_container_script(ctx.vmid, script), check=False, timeout=300,
                         what=f"install release {rid}")
    ctx.shared["journal_offset"] = journal_offset(res.stdout)
    if res.rc != 0:
        raise RemoteError(f"installing release {rid} in CT {ctx.vmid} failed: "
                          f"{(res.stderr or res.stdout).strip()[-500:]}",
                          fix="re-run; the previous release stays in place until the switch succeeds",
                          host=ctx.host.name)
    return rid


@step("server_unit", ct_facts=("unit_sha", "active", "current_release", "releases", "main_pid", "current_meta",
                               "current_verdict", "current_flags"))
def server_unit(ctx: StepContext, record: StepRecord) -> None:
    """Render sglang.service + sglang.env; install and restart only when they changed."""
    from orchestrator.steps.release import desired_flags, profile_flags_sha, restore_interrupted

    ensure_facts(ctx)
    if not ctx.options.dry_run:
        restore_interrupted(ctx, record)
    flags = desired_flags(ctx)
    bundle = bundle_for(ctx, flags)
    state = installed_state(ctx)
    unit = bundle.file("sglang.service")
    env = bundle.file("sglang.env")
    same = state.unit_sha == unit.sha256 and state.env_sha == env.sha256
    record.details.update({"bundle_sha256": bundle.sha256, "release": state.release, "active": state.active,
                           "flags": flags.argv()})
    ctx.shared["bundle"] = bundle
    ctx.shared["release"] = state.release
    if same and state.active == "active":
        record.summary = f"unit unchanged (release {state.release}), server active"
        ctx.shared["restarted"] = False
        return
    installed = installed_flags(ctx)
    changes = [] if installed is None else [
        f"--{k}: {'(unset)' if a is None else a} → {'(unset)' if b is None else b}"
        for k, a, b in diff_flags(installed, flags.as_dict())]
    record.details["flag_changes"] = changes
    what = ("start sglang (unit unchanged)" if same else
            f"install new unit ({len(flags)} flags, sglang {flags.version}"
            + (f"; {', '.join(changes)}" if changes else "") + ") and "
            f"{'restart' if state.active == 'active' else 'start'} sglang")
    if not mark_change(record, ctx, what):
        record.summary = what
        return
    if not same:
        check = require_valid_flags(ctx, launch_argv(ctx.profile, flags, api_key="validation-placeholder")[3:])
        record.details["validated_with"] = f"sglang {check.version} in CT {ctx.vmid}"
    ctx.say(what)
    rid = install_release(ctx, bundle, source="up", restart=state.active == "active",
                          previous=state.release, existing=state.releases,
                          extra_meta={"profile_flags_sha": profile_flags_sha(ctx), "command": ctx.options.command})
    ctx.shared["release"] = rid
    ctx.shared["restarted"] = True
    record.summary = f"release {rid} installed and sglang {'restarted' if state.active == 'active' else 'started'}"
