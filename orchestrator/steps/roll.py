"""Planning a roll: resolve the new flag set from the current release and the request, validate it in the container.

Nothing here changes the host (the `roll-plan` playbook is these two steps); the release lifecycle that follows
(install_release, gate) lives in orchestrator.steps.release.
"""

from __future__ import annotations

import difflib

from orchestrator.engine.state import Candidate, CurrentFlags, RollRequest
from orchestrator.engine.step import StepContext, step
from orchestrator.errors import CheckFailed, ConfigError
from orchestrator.facts import CT, HOST
from orchestrator.flags import (
    FlagSchema,
    apply_changes,
    canonicalize,
    diff_flags,
    masked_diff,
    parse_set,
    stored_flags,
)
from orchestrator.flags.schema import ResolveError
from orchestrator.render.service import launch_argv, secret_flags
from orchestrator.runlog import StepRecord
from orchestrator.steps.release import (
    RELEASE_FACTS,
    bundle_for,
    candidate,
    installed_flags,
    installed_state,
    release_flags,
    restore_interrupted,
    usable_baseline,
)
from orchestrator.steps.session import ensure_facts
from orchestrator.steps.software import (
    container_flag_check,
    installed_schema,
    profile_stack,
    refuse_import_failure,
    release_stack,
    sglang_install,
)


def requested_names(request: RollRequest, schema: FlagSchema) -> set[str]:
    """Canonical names of the flags a roll request gives anew (a replacement gives them all)."""
    if request.replacement is not None:
        written = list(request.replacement)
    else:
        written = [item.partition("=")[0] for item in request.set] + list(request.unset)
    names = set()
    for name in written:
        try:
            names.add(schema.resolve(name.strip()).spec.canonical)
        except ResolveError:
            continue  # reported by canonicalize with its hints
    return names


def stack_change(ctx: StepContext) -> bool:
    """Whether this run's stack (roll_stack's) is another than the current release's."""
    return ctx.state.stack is not None and (
        ctx.state.stack.venv != release_stack(ctx, ctx.facts.get(CT.current_meta)).venv)


@step("roll_stack", ct_facts=(*RELEASE_FACTS, CT.sglang_version, CT.stacks, CT.python_target, CT.venv_dists,
                              CT.stack_usage),
      host_facts=(HOST.driver_version,))
def roll_stack(ctx: StepContext, record: StepRecord) -> None:
    """`roll --profile P`: P's stack, built (or found) beside the running server when it differs from the current
    release's; the flags are then validated by its parser and the release runs on it. A flag roll keeps the stack."""
    ensure_facts(ctx)
    request = ctx.inputs.roll
    if request is None or request.stack_profile is None:
        record.summary = "the current release's stack (a flag roll)"
        return
    if not ctx.facts.ct_running:
        raise CheckFailed(f"CT {ctx.vmid} is not running", fix="run deploy up first", host=ctx.host.name)
    current = release_stack(ctx, ctx.facts.get(CT.current_meta))
    wanted = profile_stack(ctx)
    if current.sha == wanted.sha or (not current.sha and wanted.lock is None
                                     and current.sglang_version == wanted.sglang_version):
        record.summary = f"stack {current.sha or current.venv} (sglang {current.sglang_version}) unchanged"
        return
    sglang_install(ctx, record)
    if ctx.state.stack is not None and ctx.state.stack.venv == current.venv:
        ctx.state.stack = None  # the profile's stack is the one the server runs: a flag roll
        return
    record.details["from_stack"] = current.to_meta()
    ctx.say(f"  stack: sglang {current.sglang_version} @ {current.sha or current.venv} → "
            f"sglang {wanted.sglang_version} @ {wanted.sha}")


@step("resolve_release", ct_facts=RELEASE_FACTS)
def resolve_release(ctx: StepContext, record: StepRecord) -> None:
    """The new flag set: current release's flags + --set/--unset (or --flags FILE); shows the diff."""
    ensure_facts(ctx)
    if not ctx.facts.ct_running:
        raise CheckFailed(f"CT {ctx.vmid} is not running", fix="run deploy up first", host=ctx.host.name)
    request = ctx.inputs.roll
    if request is None:
        raise ConfigError("resolve_release needs a roll request (deploy roll --set/--unset/--flags)",
                          fix="run it through `deploy roll`", host=ctx.host.name)
    interrupted = restore_interrupted(ctx, record)
    state = installed_state(ctx)
    if state.release is None:
        raise CheckFailed("no release is installed yet: nothing to roll from", fix="run deploy up first",
                          host=ctx.host.name)
    version, schema = installed_schema(ctx)
    restack = stack_change(ctx)
    # A stack roll: the current release's flags are read with its own sglang's schema, the new ones with the new's.
    base_version, base_schema = installed_schema(ctx, current=True) if restack else (version, schema)
    # A plan over an interrupted roll's candidate: the real run restores that candidate's predecessor first and
    # rolls from it, so the plan does too (else a fleet preflight would call the host "already on" the candidate's
    # flags and skip it, leaving the never-verified candidate current).
    restoring = interrupted is not None and not interrupted.restored
    from_release = interrupted.previous if interrupted is not None and restoring else state.release
    given = requested_names(request, base_schema)
    stored = release_flags(ctx, from_release, given) if restoring else installed_flags(ctx, given=given)
    try:
        base = canonicalize(stored or {}, base_schema)
    except ConfigError as exc:
        # The installed sglang no longer accepts the current release's flags (an upgrade renamed some).
        raise ConfigError(f"the current release's flags do not parse with sglang {base_version}: {exc.what}",
                          fix="pass the renamed flags with --set/--unset (see the suggestions above)",
                          host=ctx.host.name) from exc
    if request.replacement is not None:
        new = canonicalize(request.replacement, schema)
    else:
        new = apply_changes(base, parse_set(list(request.set), schema), list(request.unset))
    secret = secret_flags(ctx.profile, base) | secret_flags(ctx.profile, new)
    diff = masked_diff(diff_flags(base, new), secret)  # a secret's values never reach output, meta or history
    if not diff and not restack:
        ctx.state.already_on = CurrentFlags(from_release, stored_flags(base, secret))
        raise ConfigError("the new flag set equals the current release's: nothing to roll",
                          fix="change at least one flag", host=ctx.host.name,
                          details={"unchanged": True, "release": from_release,
                                   "flags": stored_flags(base, secret)})
    preset = ctx.options.preset or ctx.profile.bench_preset
    baseline, evidence, missing = usable_baseline(ctx, preset, from_release)
    ctx.state.candidate = Candidate(previous=from_release, base_flags=base, new_flags=new, flag_diff=diff,
                                    baseline=baseline, secret=secret, baseline_evidence=evidence,
                                    baseline_missing=missing)
    record.details["diff"] = [{"flag": k, "old": a, "new": b} for k, a, b in diff]
    for k, a, b in diff:
        ctx.say(f"  --{k}: {a if a is not None else '(unset)'} → {b if b is not None else '(unset)'}")
    old_unit = bundle_for(ctx, base).file("sglang.service").content.splitlines()
    new_unit = bundle_for(ctx, new).file("sglang.service").content.splitlines()
    ctx.state.candidate.unit_diff = list(difflib.unified_diff(old_unit, new_unit, "sglang.service (current)",
                                                              "sglang.service (new)", lineterm="", n=0))
    record.details["unit_diff"] = ctx.state.candidate.unit_diff
    record.summary = f"{len(diff)} flag change(s) from release {from_release}"
    if restack and ctx.state.stack is not None:
        record.summary += f", onto stack {ctx.state.stack.sha} (sglang {ctx.state.stack.sglang_version})"
    if ctx.options.dry_run:
        record.status = "would-change"  # the plan's totals say "would change", not "no changes"


@step("validate_flags")
def validate_flags(ctx: StepContext, record: StepRecord) -> None:
    """Validate with the installed sglang's own parser before anything changes (one round trip)."""
    cand = candidate(ctx)
    if ctx.options.dry_run and stack_change(ctx) and ctx.state.stack is not None and (
            ctx.state.stack.sha not in (ctx.facts.get(CT.stacks) or {})):
        record.summary = (f"validated by stack {ctx.state.stack.sha}'s parser once it is built "
                          "(a dry run builds nothing)")
        return
    check = container_flag_check(ctx, launch_argv(ctx.profile, cand.new_flags, api_key="validation-placeholder")[3:])
    if not check.ok:
        refuse_import_failure(ctx, check)
        raise ConfigError(f"sglang {check.version} in CT {ctx.vmid} rejects the new flags: {check.error}",
                          fix="nothing was changed; fix the flag and roll again", host=ctx.host.name)
    record.summary = f"accepted by sglang {check.version}'s parser in CT {ctx.vmid}"
    cand.baseline_needed = cand.baseline is None
