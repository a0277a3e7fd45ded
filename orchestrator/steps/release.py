"""Rolling a new flag set: resolve → validate in the container → install → health/smoke/throughput → gate.

Any failure after the install rolls back to the previous release, which must come back healthy; the verdict
and its evidence (journal excerpt, bench figures side by side) are written into the failed release and shown.
A release without a verdict.json is an unverified candidate (a roll was interrupted): `up` and `roll` restore
the previous release first, so the host always ends with exactly one healthy release current.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from datetime import UTC, datetime
from typing import Any

from orchestrator.errors import CheckFailed, ConfigError, DeployError, LockLost, RemoteError
from orchestrator.facts import CURRENT_LINK
from orchestrator.flags import FlagSchema, FlagSet, apply_changes, canonicalize, diff_flags, parse_set
from orchestrator.parsers.bench import BenchParseError, BenchResult, parse_bench_jsonl
from orchestrator.render.service import launch_argv
from orchestrator.runlog import StepRecord
from orchestrator.state.releases import activate_script, in_container_script, journal_offset, record_file_script
from orchestrator.steps.base import StepContext, step
from orchestrator.steps.checks import bench_for_release, wait_healthy
from orchestrator.steps.server import bundle_for, install_release, installed_state, profile_flags
from orchestrator.steps.session import ensure_facts
from orchestrator.steps.software import container_flag_check
from orchestrator.verdicts.regression import gate as regression_gate

RELEASE_FACTS = ("current_meta", "current_verdict", "current_flags", "current_bench", "unit_sha", "active",
                 "current_release", "releases", "main_pid", "health", "sglang_version")


def profile_flags_sha(ctx: StepContext) -> str:
    return hashlib.sha256(json.dumps(ctx.profile.flags, sort_keys=True, default=str).encode()).hexdigest()


def _json_fact(ctx: StepContext, name: str) -> Any:
    out = ctx.facts.c(name)
    if out is None or out.rc != 0 or not out.stdout.strip():
        return None
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        return None


def current_meta(ctx: StepContext) -> dict[str, Any] | None:
    meta = _json_fact(ctx, "current_meta")
    return meta if isinstance(meta, dict) else None


def current_verdict(ctx: StepContext) -> dict[str, Any] | None:
    v = _json_fact(ctx, "current_verdict")
    return v if isinstance(v, dict) else None


def is_unverified_candidate(ctx: StepContext) -> bool:
    """A roll that installed a release and died before its gate wrote a verdict."""
    meta = current_meta(ctx)
    return bool(meta and meta.get("source", "").startswith("roll") and current_verdict(ctx) is None
                and meta.get("previous"))


def baseline_bench(ctx: StepContext, preset: str) -> BenchResult | None:
    """The newest plain run of the same preset on the current release: the only fair baseline."""
    out = ctx.facts.c("current_bench")
    if out is None or out.rc != 0:
        return None
    for line in reversed(out.stdout.splitlines()):
        name, _, record = line.partition("\t")
        if name.startswith(f"bench-{preset}--") and record.strip():
            try:
                return parse_bench_jsonl(record)
            except BenchParseError:
                continue
    return None


def bench_dict(result: BenchResult) -> dict[str, Any]:
    """Bench figures for verdict.json; the resolved server args are stored once, in server_info.json."""
    return result.model_dump(mode="json", exclude={"server_info"})


def write_verdict(ctx: StepContext, release: str, verdict: dict[str, Any]) -> None:
    body = json.dumps({"at": datetime.now(UTC).isoformat(timespec="seconds"), **verdict}, sort_keys=True,
                      default=str)
    ctx.ssh.script(in_container_script(ctx.vmid, record_file_script(release, "verdict.json", body + "\n")),
                   check=False, what="record verdict")


def activate(ctx: StepContext, release: str, *, what: str) -> None:
    res = ctx.ssh.script(in_container_script(ctx.vmid, activate_script(release, restart=True,
                                                                       keep=ctx.profile.keep_releases)),
                         check=False, timeout=300, what=what)
    ctx.shared["journal_offset"] = journal_offset(res.stdout)
    if res.rc != 0:
        raise RemoteError(f"{what}: activating release {release} failed: "
                          f"{(res.stderr or res.stdout).strip()[-400:]}", host=ctx.host.name,
                          fix="check /var/lib/deploy/releases in the container")


def read_back_current(ctx: StepContext, release: str) -> str:
    """After a rollback, report only what the host says: the current release and /health, read together."""
    p = ctx.profile
    inner = (f"readlink {shlex.quote(CURRENT_LINK)}; curl -s -o /dev/null -m 5 -w '%{{http_code}}\\n' "
             f"http://{shlex.quote(p.host)}:{p.port}/health")
    res = ctx.ssh.run(f"pct exec {ctx.vmid} -- bash -c {shlex.quote(inner)}", check=False, timeout=60,
                      what="read back the current release")
    lines = res.stdout.strip().splitlines()
    current = lines[0].rsplit("/", 1)[-1] if lines else ""
    code = lines[-1].strip() if len(lines) > 1 else "000"
    if current != release or code != "200":
        raise CheckFailed(f"rolled back to {release}, but the host now reports current release "
                          f"{current or 'unknown'} with /health {code}",
                          fix="check the host (deploy status, deploy history) before anything else",
                          host=ctx.host.name)
    return f"current release read back: {current}, /health {code}"


def rollback_to(ctx: StepContext, release: str, record: StepRecord, *, reason: str) -> float:
    """Re-install `release` and wait until it is healthy again. Returns seconds to healthy."""
    ctx.say(f"rolling back to {release}: {reason}")
    activate(ctx, release, what=f"rollback to {release}")
    try:
        seconds = wait_healthy(ctx, record)
    except CheckFailed as exc:
        raise CheckFailed(f"rolled back to {release}, but it did not come back healthy: {exc.what}",
                          fix="the host needs attention: check the journal and GPUs (deploy status, doctor)",
                          host=ctx.host.name, details=exc.details) from exc
    record.details["rollback_verified"] = read_back_current(ctx, release)
    return seconds


def restore_interrupted(ctx: StepContext, record: StepRecord) -> str | None:
    """If the current release is an interrupted roll's candidate, bring back its predecessor."""
    if not is_unverified_candidate(ctx):
        return None
    meta = current_meta(ctx) or {}
    cand, prev = str(meta.get("id")), str(meta.get("previous"))
    record.changes.append(f"restored {prev} (release {cand} was an interrupted roll's unverified candidate)")
    record.status = "changed"
    write_verdict(ctx, cand, {"verdict": "abandoned", "reason": "the roll was interrupted before its gate",
                              "rolled_back_to": prev})
    rollback_to(ctx, prev, record, reason=f"{cand} was never verified (interrupted roll)")
    ctx.facts.gather((), RELEASE_FACTS, what="re-reading release facts")
    return prev


# ----------------------------------------------------------------------------------------------------- roll
@step("resolve_release", ct_facts=RELEASE_FACTS)
def resolve_release(ctx: StepContext, record: StepRecord) -> None:
    """The new flag set: current release's flags + --set/--unset (or --flags FILE); shows the diff."""
    ensure_facts(ctx)
    if not ctx.facts.ct_running:
        raise CheckFailed(f"CT {ctx.vmid} is not running", fix="run deploy up first", host=ctx.host.name)
    restore_interrupted(ctx, record)
    state = installed_state(ctx)
    if state.release is None:
        raise CheckFailed("no release is installed yet: nothing to roll from", fix="run deploy up first",
                          host=ctx.host.name)
    out = ctx.facts.c("sglang_version")
    installed_version = out.stdout.strip() if out is not None and out.rc == 0 else ctx.profile.sglang_version
    if installed_version in FlagSchema.known_versions():
        schema = FlagSchema.load(installed_version)
    else:
        probe = container_flag_check(ctx, [])
        if probe.schema is None:
            raise RemoteError(f"cannot read sglang's flags in CT {ctx.vmid}: {probe.error}", host=ctx.host.name)
        schema = probe.schema
    current_flags = _json_fact(ctx, "current_flags") or {}
    try:
        base = canonicalize(current_flags, schema)
    except ConfigError as exc:
        # The installed sglang no longer accepts the current release's flags (an upgrade renamed some).
        raise ConfigError(f"the current release's flags do not parse with sglang {installed_version}: {exc.what}",
                          fix="pass the renamed flags with --set/--unset (see the suggestions above)",
                          host=ctx.host.name) from exc
    opts = ctx.shared.get("roll", {})
    if opts.get("flags_file"):
        new = canonicalize(opts["flags_file"], schema)
    else:
        new = apply_changes(base, parse_set(opts.get("set", []), schema), opts.get("unset", []))
    diff = diff_flags(base, new)
    if not diff:
        raise ConfigError("the new flag set equals the current release's: nothing to roll",
                          fix="change at least one flag", host=ctx.host.name)
    preset = ctx.options.preset or ctx.profile.bench_preset
    ctx.shared.update({"base_flags": base, "new_flags": new, "previous": state.release,
                       "baseline": baseline_bench(ctx, preset), "flag_diff": diff})
    record.details["diff"] = [{"flag": k, "old": a, "new": b} for k, a, b in diff]
    for k, a, b in diff:
        ctx.say(f"  --{k}: {a if a is not None else '(unset)'} → {b if b is not None else '(unset)'}")
    old_unit = bundle_for(ctx, base).file("sglang.service").content.splitlines()
    new_unit = bundle_for(ctx, new).file("sglang.service").content.splitlines()
    import difflib

    unit_diff = [ln for ln in difflib.unified_diff(old_unit, new_unit, "sglang.service (current)",
                                                     "sglang.service (new)", lineterm="", n=0)]
    record.details["unit_diff"] = unit_diff
    record.summary = f"{len(diff)} flag change(s) from release {state.release}"


@step("validate_flags")
def validate_flags(ctx: StepContext, record: StepRecord) -> None:
    """Validate with the installed sglang's own parser before anything changes (one round trip)."""
    new: FlagSet = ctx.shared["new_flags"]
    check = container_flag_check(ctx, launch_argv(ctx.profile, new, api_key="validation-placeholder")[3:])
    if not check.ok:
        raise ConfigError(f"sglang {check.version} in CT {ctx.vmid} rejects the new flags: {check.error}",
                          fix="nothing was changed; fix the flag and roll again", host=ctx.host.name)
    record.summary = f"accepted by sglang {check.version}'s parser in CT {ctx.vmid}"
    ctx.shared["baseline_needed"] = ctx.shared.get("baseline") is None


@step("install_release")
def install_candidate(ctx: StepContext, record: StepRecord) -> None:
    """Install the candidate as a new release and restart; from here on a failure rolls back."""
    previous: str = ctx.shared["previous"]
    if ctx.shared.get("baseline_needed") and not ctx.options.skip_bench:
        preset = ctx.options.preset or ctx.profile.bench_preset
        ctx.say(f"no baseline bench for {previous}: measuring it first ({preset})")
        ctx.shared["baseline"] = bench_for_release(ctx, preset, previous).result
    new: FlagSet = ctx.shared["new_flags"]
    bundle = bundle_for(ctx, new)
    state = installed_state(ctx)
    rid = install_release(ctx, bundle, source="roll", restart=True, previous=previous, existing=state.releases,
                          extra_meta={"profile_flags_sha": profile_flags_sha(ctx),
                                      "flag_diff": [[k, a, b] for k, a, b in ctx.shared["flag_diff"]]})
    ctx.shared.update({"release": rid, "bundle": bundle, "restarted": True})
    record.changes.append(f"release {rid} installed, sglang restarted")
    record.status = "changed"
    record.summary = f"candidate {rid} (previous {previous})"

    def on_failure(err: DeployError, failed: StepRecord) -> None:
        evidence = {"verdict": "rolled-back", "failed_step": failed.name, "reason": err.what,
                    "journal": list((err.details or {}).get("journal") or [])[-20:],  # type: ignore[call-overload]
                    "rolled_back_to": previous}
        bench = ctx.shared.get("bench_run")
        if bench is not None:
            evidence["candidate"] = bench_dict(bench.result)
        base = ctx.shared.get("baseline")
        if base is not None:
            evidence["baseline"] = bench_dict(base)
        if isinstance(err, LockLost):  # another run owns the host now: touching it would race that run
            err.what += f"; candidate {rid} was NOT rolled back to {previous} by this run"
            return
        try:
            write_verdict(ctx, rid, evidence)
            seconds = rollback_to(ctx, previous, failed, reason=err.what)
        except LockLost as lost:
            lost.what += (f" — it was rolling back from {rid} to {previous} after: {err.what}; that rollback did "
                          "not finish")
            raise
        err.what = (f"{err.what} — rolled back to {previous} (healthy again after {seconds:.0f} s; "
                    f"{failed.details['rollback_verified']})")
        err.details = {**(err.details or {}), "rolled_back_to": previous, "candidate": rid}

    ctx.shared["on_failure"] = on_failure


@step("gate")
def gate_step(ctx: StepContext, record: StepRecord) -> None:
    """Throughput gate: below the baseline by more than the noise threshold → roll back (unless accepted)."""
    opts = ctx.shared.get("roll", {})
    run = ctx.shared.get("bench_run")
    rid: str = ctx.shared["release"]
    if run is None:
        write_verdict(ctx, rid, {"verdict": "kept", "reason": "health and smoke passed; bench skipped"})
        ctx.shared.pop("on_failure", None)
        record.summary = f"{rid} kept (no bench)"
        return
    baseline: BenchResult | None = ctx.shared.get("baseline")
    threshold = float(opts.get("threshold") or ctx.profile.regression_threshold_pct)
    gated = tuple(opts.get("gate") or ctx.profile.gate_metrics)
    result = regression_gate(run.result, baseline, noise_pct=threshold,
                             accept_regression=bool(opts.get("accept_regression")),
                             min_output_throughput=ctx.profile.min_output_throughput, gated=gated)
    ctx.shared["gate"] = result
    record.details["gate"] = result.model_dump(mode="json")
    for d in result.deltas:
        if d.baseline is not None and d.new is not None:
            ctx.say(f"  {d.label:<28} {d.baseline:>10.2f} → {d.new:>10.2f}  ({d.delta_pct:+.1f} %)")
    if not result.passed:
        raise CheckFailed(f"throughput gate: {result.verdict}: " + "; ".join(result.reasons),
                          fix="keep it anyway with --accept-regression, or change the flags",
                          host=ctx.host.name, details={"gate": result.model_dump(mode="json")})
    telemetry = run.telemetry.model_dump(mode="json") if run.telemetry else None
    write_verdict(ctx, rid, {"verdict": "kept", "gate": result.model_dump(mode="json"),
                             "candidate": bench_dict(run.result),
                             "baseline": bench_dict(baseline) if baseline else None,
                             "telemetry": telemetry})
    ctx.shared.pop("on_failure", None)
    record.summary = f"{rid} kept: {result.verdict}" + (f" ({result.reasons[0]})" if result.reasons else "")


# ------------------------------------------------------------------------------------------------------ up
def desired_flags(ctx: StepContext) -> FlagSet:
    """What `up` converges to: the inventory profile's flags, unless a verified roll changed them since.

    A release records the hash of the profile flags it started from; while the inventory still says the same,
    the rolled flags stand. Editing the profile's flags in the inventory makes `up` apply them again.
    """
    meta = current_meta(ctx)
    flags = _json_fact(ctx, "current_flags")
    if (meta and isinstance(flags, dict) and meta.get("profile_flags_sha") == profile_flags_sha(ctx)
            and current_verdict(ctx) is not None):
        return canonicalize(flags, FlagSchema.load(ctx.profile.sglang_version))
    return profile_flags(ctx)


@step("release_verdict", ct_facts=("current_verdict", "current_meta"))
def release_verdict(ctx: StepContext, record: StepRecord) -> None:
    """Mark the release `up` converged to as verified (health + smoke + throughput passed)."""
    if ctx.options.dry_run:
        record.status = "skipped"
        return
    rid = ctx.shared.get("release")
    if rid is None:
        record.status = "skipped"
        record.summary = "no release"
        return
    if not ctx.shared.get("restarted") and current_verdict(ctx) is not None:
        record.summary = f"{rid} already verified"
        return
    run = ctx.shared.get("bench_run")
    write_verdict(ctx, rid, {"verdict": "kept", "source": "up",
                             "candidate": bench_dict(run.result) if run else None,
                             "telemetry": run.telemetry.model_dump(mode="json") if run and run.telemetry else None})
    record.summary = f"{rid} verified"



# ------------------------------------------------------------------------------ rollback, status, history
@step("rollback_release", ct_facts=RELEASE_FACTS)
def rollback_release(ctx: StepContext, record: StepRecord) -> None:
    """Re-install a previous release (default: the current one's predecessor) and wait for health."""
    ensure_facts(ctx)
    state = installed_state(ctx)
    target = ctx.shared.get("rollback_to")
    if target is None:
        meta = current_meta(ctx) or {}
        target = meta.get("previous")
        if not target and state.release in state.releases:
            idx = state.releases.index(state.release)
            target = state.releases[idx - 1] if idx > 0 else None
    if not target:
        raise ConfigError("no previous release to roll back to", fix="deploy history lists the releases",
                          host=ctx.host.name)
    if target not in state.releases:
        raise ConfigError(f"no release {target} on the target (known: {', '.join(state.releases[-8:])})",
                          fix="pick an id from deploy history", host=ctx.host.name)
    if target == state.release:
        record.summary = f"{target} is already current"
        return
    # The release we leave keeps its own verdict and figures: a manual rollback is an operator's choice,
    # not a judgement of that release.
    seconds = rollback_to(ctx, target, record, reason="deploy rollback")
    record.status = "changed"
    record.changes.append(f"{state.release} → {target}")
    ctx.shared["release"] = target
    record.summary = f"{target} current and healthy after {seconds:.0f} s (was {state.release})"


def _gpu_power(ctx: StepContext) -> list[dict[str, float | int | None]]:
    out = ctx.facts.host.get("gpu_power")
    rows: list[dict[str, float | int | None]] = []
    if out is None or out.rc != 0:
        return rows

    def num(x: str) -> float | None:
        try:
            return float(x)
        except ValueError:
            return None

    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4 and parts[0].isdigit():
            rows.append({"gpu": int(parts[0]), "power_w": num(parts[1]), "limit_w": num(parts[2]),
                         "util_pct": num(parts[3])})
    return rows


@step("status", host_facts=("gpu_power", "ct_status"), ct_facts=RELEASE_FACTS)
def status(ctx: StepContext, record: StepRecord) -> None:
    """Current release, server state and health, GPU power now: one round trip."""
    ensure_facts(ctx)
    state = installed_state(ctx)
    health = ctx.facts.c("health")
    meta = current_meta(ctx) or {}
    verdict = current_verdict(ctx) or {}
    gpus = _gpu_power(ctx)
    total_w = sum(float(g["power_w"] or 0) for g in gpus)
    total_limit = sum(float(g["limit_w"] or 0) for g in gpus)
    info = {"container_running": ctx.facts.ct_running, "release": state.release, "active": state.active,
            "health": health.stdout.strip() if health is not None else None,
            "release_created": meta.get("created_at"), "release_source": meta.get("source"),
            "verdict": verdict.get("verdict"), "sglang_version": meta.get("sglang_version"),
            "gpus": gpus, "power_w": round(total_w, 1), "power_limit_w": round(total_limit, 1)}
    ctx.shared["status"] = info
    record.details.update(info)
    record.summary = (f"release {state.release or 'none'} ({info['verdict'] or 'unverified'}), sglang "
                      f"{state.active}, /health {info['health']}, GPUs {total_w:.0f} W of {total_limit:.0f} W")


@step("history")
def history(ctx: StepContext, record: StepRecord) -> None:
    """Every release on the target with its verdict and figures (one round trip)."""
    from orchestrator.state.releases import parse_release_lines, read_releases_script

    res = ctx.ssh.script(in_container_script(ctx.vmid, read_releases_script(int(ctx.shared.get("limit", 50)))),
                         check=False, what="read releases")
    if res.rc != 0 and "not running" in (res.stderr + res.stdout):
        raise CheckFailed(f"CT {ctx.vmid} is not running", host=ctx.host.name, fix="deploy up")
    rows = parse_release_lines(res.stdout)
    ctx.shared["history"] = rows
    record.summary = f"{len(rows)} release(s)"
