"""The release lifecycle, in one place: install a release, make it current, roll back, write its verdict.

`up` (step server_unit) and `roll` (step install_release) both install through `install_bundle`; the gate
(steps/throughput.py) and `release_verdict` judge; `rollback_release` and a failed roll's undo go through
`roll_back_to`. Any failure after a roll's install rolls back to the previous release, which must come back
healthy; the verdict and its evidence (journal excerpt, bench figures side by side) are written into the failed
release. A release without a verdict.json is an unverified candidate (a roll was interrupted): `up` and `roll`
restore the previous release first, so the host always ends with exactly one healthy release current. An `up`
release without a verdict (that `up` was interrupted) is marked abandoned by the next `up`, which installs its
files again as a new release. Every install is a new release id, so re-rolling the same flags keeps the earlier
attempt's verdict.

Step functions carry their playbook names: install_release, release_verdict, rollback_release; the throughput
gate's step, `gate`, is steps/throughput.py (it writes a roll's "kept" verdict through write_verdict).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from orchestrator.engine.state import BaselineEvidence, Candidate, FlagDrift, Rollback
from orchestrator.engine.step import REGISTRY, StepContext, step
from orchestrator.engine.waiting import waiting_for
from orchestrator.errors import CheckFailed, ConfigError, DeployError, LockLost, RemoteError
from orchestrator.facts import CT, health_code_command
from orchestrator.facts.container import json_object
from orchestrator.facts.reads import CURRENT_AND_HEALTH, SECRETS, SWITCH, VERDICT_WRITE
from orchestrator.flags import FlagSchema, FlagSet, canonicalize, diff_flags, with_secret_values
from orchestrator.layout import PATHS
from orchestrator.redact import REDACTED, SECRET_REF
from orchestrator.releases.documents import (
    ABANDONED,
    KEPT,
    ROLLED_BACK,
    CacheMeta,
    ReleaseMeta,
    ReleaseVerdict,
    StoredFlags,
    TuneMeta,
    VerdictFigures,
)
from orchestrator.releases.store import (
    NOT_CANDIDATE,
    NOT_CANDIDATE_RC,
    ReleaseBundle,
    activate_script,
    record_file_script,
    unique_release_id,
    write_release_script,
)
from orchestrator.render.bundle import Bundle, render_bundle
from orchestrator.render.service import launch_argv, public_flags, secret_flags
from orchestrator.runlog import StepRecord
from orchestrator.stacks.kernel_caches import CacheCheck, check_shell, release_cache
from orchestrator.steps.checks import bench_for_release, wait_healthy
from orchestrator.steps.session import ensure_facts
from orchestrator.steps.software import release_stack, server_stack, stack_records
from orchestrator.watchdog.render import check_now_script

if TYPE_CHECKING:  # bench results, the ledger and the gate load where a bench's figures are judged
    from orchestrator.parsers.bench import BenchResult

RELEASE_FACTS = (CT.current_meta, CT.current_verdict, CT.current_flags, CT.current_bench, CT.unit_sha, CT.active,
                 CT.current_release, CT.releases, CT.main_pid, CT.health, CT.sglang_version)


# ------------------------------------------------------------------------------------ what is installed
@dataclass(frozen=True)
class InstalledState:
    unit_sha: str | None
    env_sha: str | None
    active: str
    release: str | None
    releases: list[str]


def installed_state(ctx: StepContext) -> InstalledState:
    shas = ctx.facts.get(CT.unit_sha) or {}
    active = ctx.facts.get(CT.active)
    return InstalledState(
        unit_sha=shas.get(ctx.ct.paths.unit_path),
        env_sha=shas.get(ctx.ct.paths.env_path),
        active=active if active is not None else "unknown",
        release=ctx.facts.get(CT.current_release),
        releases=ctx.facts.get(CT.releases) or [],
    )


def current_meta(ctx: StepContext) -> ReleaseMeta | None:
    return ctx.facts.get(CT.current_meta)


def current_verdict(ctx: StepContext) -> ReleaseVerdict | None:
    return ctx.facts.get(CT.current_verdict)


def installed_flags(ctx: StepContext, given: Iterable[str] = ()) -> dict[str, Any] | None:
    """The current release's flags (None before the first release): flags.json, with each secret flag's value read
    back from the release's own 0600 secrets.yaml (one round trip, only when it has secret flags). A secret stored
    redacted is an error unless the caller gives that flag anew (`given`): evidence is never configuration."""
    stored = ctx.facts.get(CT.current_flags)
    if stored is None:
        return None
    rid = ctx.facts.get(CT.current_release)
    return _with_secrets(ctx, stored.root, ctx.ct.paths.current_link, f"release {rid or 'current'}", given)


def release_flags(ctx: StepContext, rid: str, given: Iterable[str] = ()) -> dict[str, Any] | None:
    """Another release's flags, read as `installed_flags` reads the current one's (one round trip more): a plan
    over an interrupted roll rolls from the release the real run would restore first, not from the candidate."""
    stored = StoredFlags.from_data(release_json(ctx, rid, "flags.json"))
    if stored is None:
        return None
    return _with_secrets(ctx, stored.root, ctx.ct.paths.release_dir(rid), f"release {rid}", given)


def release_json(ctx: StepContext, rid: str, name: str) -> dict[str, Any] | None:
    """One JSON file of a release (flags.json, meta.json), one round trip; None when absent or unreadable. Read it
    through its model (releases/documents.py), as the facts read the current release's."""
    path = f"{ctx.ct.paths.release_dir(rid)}/{name}"
    res = ctx.ct.run(f"cat {shlex.quote(path)}", check=False, timeout=60, what=f"read release {rid}'s {name}")
    return json_object(res.output)


def release_meta(ctx: StepContext, rid: str) -> ReleaseMeta | None:
    """Another release's meta.json (one round trip)."""
    return ReleaseMeta.from_data(release_json(ctx, rid, "meta.json"))


def require_stack_present(ctx: StepContext, rid: str) -> None:
    """A release runs only on its own stack: refuse (exit 2, nothing changed) to make current a release whose
    stack venv was pruned or broken, instead of restarting into a unit whose interpreter is gone."""
    stack = release_stack(ctx, release_meta(ctx, rid))
    if not stack.sha:
        return  # a release of an earlier deploy: it runs the profile's own venv, which nothing removes
    found = stack_records(ctx).get(stack.sha)
    if found is not None and found.usable:
        return
    why = "was pruned" if found is None else f"is broken (pip's record in {found.venv} names sglang {found.installed})"
    raise ConfigError(f"release {rid} runs on stack {stack.sha} ({stack.requirement}), which {why}; nothing was "
                      "changed", host=ctx.host.name,
                      fix=(f"pin the profile to that stack (sglang_version {stack.sglang_version}, same extras and "
                           "index) and run `deploy up` to build it again, or roll back to a release whose stack "
                           "is kept (`deploy history` names each release's stack; raise keep_stacks to keep more)"))


def _with_secrets(ctx: StepContext, stored: dict[str, Any], release_dir: str, where: str,
                  given: Iterable[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if SECRET_REF in stored.values():
        path = f"{release_dir}/secrets.yaml"
        read = ctx.ct.read_output(f"cat {shlex.quote(path)}", SECRETS, timeout=60, what="read the secret flags")
        values = read or {}
    return with_secret_values(stored, values, where, given=given)


def is_unverified_candidate(ctx: StepContext) -> bool:
    """A roll that installed a release and died before its gate wrote a verdict."""
    meta = current_meta(ctx)
    return bool(meta and (meta.source or "").startswith("roll") and current_verdict(ctx) is None
                and meta.previous)


# ------------------------------------------------------------------------------------ what to install
def profile_flags(ctx: StepContext, schema: FlagSchema | None = None) -> FlagSet:
    return canonicalize(ctx.profile.flags, schema or FlagSchema.load(ctx.profile.sglang_version))


def profile_flags_sha(ctx: StepContext) -> str:
    return hashlib.sha256(json.dumps(ctx.profile.flags, sort_keys=True, default=str).encode()).hexdigest()


def desired_flags(ctx: StepContext) -> FlagSet:
    """What `up` converges to: the inventory profile's flags, unless a verified roll changed them since.

    A release records the hash of the profile flags it started from; while the inventory still says the same,
    the rolled flags stand. Editing the profile's flags in the inventory makes `up` apply them again.
    """
    meta = current_meta(ctx)
    refuse_tune_trial(ctx)
    try:
        flags = installed_flags(ctx)
    except ConfigError as exc:  # a secret stored redacted by an older deploy: the profile is the real source
        ctx.say(f"{exc.what}: converging to the profile's flags")
        return profile_flags(ctx)
    if (meta and flags is not None and meta.profile_flags_sha == profile_flags_sha(ctx)
            and current_verdict(ctx) is not None):
        return canonicalize(flags, FlagSchema.load(ctx.profile.sglang_version))
    return profile_flags(ctx)


def tune_trial(ctx: StepContext) -> TuneMeta | None:
    """The tune whose trial point the current release is (its id and original), or None: a tune marks each release
    it rolls (TuneTrial) and restores the original when it ends, so a current trial means a tune that runs now
    from another machine, or one that was killed (SIGKILL, a lost machine) before its restore."""
    meta = current_meta(ctx)
    tune = meta.tune if meta is not None else None
    return tune if tune is not None and tune.id else None


def refuse_tune_trial(ctx: StepContext) -> None:
    """`up` converges to what the operator chose; a tune's trial is neither the profile nor a kept roll, and
    converging over it would either keep the trial or discard the release the tune is to restore. So it stops,
    before any change, and says how to finish or undo the tune."""
    tune = tune_trial(ctx)
    if tune is None:
        return
    original = tune.original
    undo = f"deploy rollback host {ctx.host.name}" + (f" --to {original}" if original else "")
    raise CheckFailed(f"the current release is a trial point of tune {tune.id}, which has not finished (killed "
                      "before it restored the original, or running from another machine)",
                      fix=f"deploy tune host {ctx.host.name} --resume {tune.id} (on the machine that ran it: "
                          f"it restores the original first), or undo the trial: {undo}", host=ctx.host.name)


def flag_drift(ctx: StepContext) -> list[FlagDrift]:
    """Where the current release's flags differ from the inventory profile's, as `plan` and `status` show them.

    A verified roll's flags stand until the profile is edited (`desired_flags`), so `plan` says "no changes" while
    the host runs something the inventory does not say: operators coming from Terraform expect to see that. Read
    from flags.json only (no secrets.yaml round trip): a secret flag counts as drift only when it is set on one
    side and not on the other, and its values are never shown. Empty before the first release, or when the
    profile's flags do not parse (the run's other steps report that)."""
    found = ctx.facts.get(CT.current_flags)
    if found is None:
        return []
    stored = found.root
    try:
        wanted = profile_flags(ctx)
    except ConfigError:
        return []
    hidden = secret_flags(ctx.profile, wanted) | {k for k, v in stored.items() if v in (SECRET_REF, REDACTED)}
    out = []
    for name, profile_value, running in diff_flags(wanted.as_dict(), stored):
        if name in hidden:
            if (profile_value is None) == (running is None):
                continue
            profile_value = None if profile_value is None else SECRET_REF
            running = None if running is None else SECRET_REF
        out.append(FlagDrift(name, profile_value, running))
    return out


def drift_line(drift: list[FlagDrift], profile: str) -> str:
    """One line for humans: which flags run differently from the profile, and what makes them agree."""
    shown = ", ".join(d.describe() for d in drift)
    return (f"running flags differ from profile '{profile}': {shown}; a verified roll's flags stand until the "
            "profile is edited (put them in the profile to keep them, or `deploy roll` back)")


def bundle_for(ctx: StepContext, flags: FlagSet, release_id: str | None = None) -> Bundle:
    """The files for `flags` on the stack the server runs in this run (server_stack: its venv is the unit's
    interpreter, the CUDA it carries the unit's CUDA_HOME); `release_id` goes into the unit's managed header only
    (not into any hash)."""
    api_key = ctx.profile.api_key.read() if ctx.profile.api_key is not None else None
    cache = stack_cache(ctx, flags)
    stack = server_stack(ctx)
    return render_bundle(ctx.host, ctx.profile, flags=flags, api_key=api_key, release_id=release_id,
                         venv=stack.venv, cache_dir=cache.dir if cache is not None else None,
                         cuda_home=stack.cuda_home)


def baseline_bench(ctx: StepContext, preset: str) -> tuple[BenchResult, str] | None:
    """The newest plain run of the same preset on the current release, with its run id: the only fair baseline."""
    from orchestrator.parsers.bench import BenchParseError, parse_bench_jsonl

    runs: list[tuple[str, str]] = ctx.facts.get(CT.current_bench) or []
    for name, record in reversed(runs):
        # Only a finished run's file: a killed run's temporary `….jsonl.partial` is never a baseline.
        if name.startswith(f"bench-{preset}--") and name.endswith(".jsonl") and record.strip():
            try:
                return parse_bench_jsonl(record), name.removeprefix(f"bench-{preset}--").removesuffix(".jsonl")
            except BenchParseError:
                continue
    return None


def usable_baseline(ctx: StepContext, preset: str, release: str
                    ) -> tuple[BenchResult | None, BaselineEvidence | None, str]:
    """The stored baseline a roll's gate may use, its evidence, and otherwise why there is none: no plain run of
    the preset on `release`, or the newest is older than the profile's `baseline_max_age_h`."""
    from orchestrator.ledger.sqlite import run_started

    found = baseline_bench(ctx, preset)
    if found is None:
        return None, None, f"no plain run of preset {preset} on {release}"
    result, run_id = found
    started = run_started(run_id)
    age_s = (datetime.now() - started).total_seconds() if started is not None else None
    max_h = ctx.profile.baseline_max_age_h
    if age_s is not None and age_s > max_h * 3600:
        return None, None, f"the newest, {run_id}, is {age_s / 3600:.1f} h old (baseline_max_age_h {max_h:g})"
    return result, BaselineEvidence(run_id, release, preset, age_s), ""


def verdict_figures(result: BenchResult) -> VerdictFigures:
    """Bench figures for verdict.json; the resolved server args are stored once, in server_info.json."""
    return VerdictFigures.model_validate(result.model_dump(mode="json", exclude={"server_info"}))


# ------------------------------------------------------------------------------------ the kernel cache
def stack_cache(ctx: StepContext, flags: FlagSet) -> CacheMeta | None:
    """The kernel cache of a release with `flags` on the stack this run serves with (stacks/kernel_caches.py)."""
    stack = server_stack(ctx)
    return release_cache(ctx.profile.env, ctx.profile.model_path, stack.sha, stack.venv, flags.values)


def pre_start_check() -> str:
    """The check the activation script runs before the server starts, on the release it made current."""
    return check_shell(f"{PATHS.current_link}/meta.json")


def note_cache(ctx: StepContext, check: CacheCheck | None) -> None:
    """Keep what the check before this start found (the boot ledger records it); a cache set aside, or one that
    could not be checked, is said in the command's output."""
    ctx.state.server.cache = check
    if check is not None and check.state in ("set-aside", "unchecked"):
        ctx.say(check.line())


# ------------------------------------------------------------------------- install, make current, undo
def install_bundle(ctx: StepContext, bundle: Bundle, *, source: str, restart: bool, previous: str | None,
                   existing: list[str], extra_meta: dict[str, Any] | None = None) -> str:
    """Write a new release for this bundle and make it current: one round trip. Returns its id.

    Every install gets a new id, even for content installed before, so an earlier attempt keeps its verdict.
    The unit's managed header names the id; the body hashes (and so the "restart only when the files changed"
    decision, and the bundle hash in the id) do not depend on it.
    """
    rid = unique_release_id(bundle.sha256, existing)
    named = bundle_for(ctx, bundle.flags, release_id=rid)
    if named.sha256 != bundle.sha256:  # the header is outside every hash; a mismatch means the files changed
        raise ConfigError(f"the rendered files changed while installing release {rid}",
                          fix="re-run; check that the API key file is not being rewritten", host=ctx.host.name)
    bundle = named
    stack = server_stack(ctx)
    meta = ReleaseMeta.model_validate({
        "id": rid, "created_at": datetime.now(UTC).isoformat(timespec="seconds"), "source": source,
        "bundle_sha256": bundle.sha256, "previous": previous, "profile": ctx.host.profile,
        "sglang_version": bundle.flags.version, "argv": launch_argv(ctx.profile, bundle.flags, venv=stack.venv),
        "stack": stack.to_meta(), **({"cache": cache} if (cache := stack_cache(ctx, bundle.flags)) else {}),
        **(extra_meta or {})})
    rb = ReleaseBundle(rid, tuple(bundle.files), StoredFlags(public_flags(ctx.profile, bundle.flags)), meta)
    script = write_release_script(rb) + activate_script(rid, restart=restart, keep=ctx.profile.keep_releases,
                                                        fresh=True, pre_start=pre_start_check())
    with waiting_for(ctx.say, f"sglang to {'stop and restart' if restart else 'start'} with release {rid}",
                     ctx.profile.stop_timeout_s):
        res = ctx.ct.read_script(script, SWITCH, timeout=switch_timeout_s(ctx), what=f"install release {rid}")
    ctx.state.server.journal_cursor = res.value.journal_cursor
    note_cache(ctx, res.value.cache)
    if res.rc != 0:
        raise RemoteError(f"installing release {rid} in CT {ctx.vmid} failed: "
                          f"{res.said(500)}",
                          fix="re-run; the previous release stays in place until the switch succeeds",
                          host=ctx.host.name)
    return rid


#: What a release switch's script does besides the restart (write files, prune, read the cursor), at most.
SWITCH_WORK_S = 180


def switch_timeout_s(ctx: StepContext) -> int:
    """A switch restarts sglang, and `systemctl restart` waits for the old server's drain (up to stop_timeout_s)."""
    return ctx.profile.stop_timeout_s + SWITCH_WORK_S


def make_current(ctx: StepContext, release: str, *, what: str, restart: bool = True) -> None:
    """Install an existing release's files, point `current` at it and (re)start sglang (one round trip)."""
    with waiting_for(ctx.say, f"sglang to {'stop and restart' if restart else 'start'} with release {release}",
                     ctx.profile.stop_timeout_s):
        res = ctx.ct.read_script(activate_script(release, restart=restart, keep=ctx.profile.keep_releases,
                                                 pre_start=pre_start_check()),
                                 SWITCH, timeout=switch_timeout_s(ctx), what=what)
    ctx.state.server.journal_cursor = res.value.journal_cursor
    note_cache(ctx, res.value.cache)
    if res.rc != 0:
        raise RemoteError(f"{what}: activating release {release} failed: "
                          f"{res.said(400)}", host=ctx.host.name,
                          fix=f"check {ctx.ct.paths.releases_dir} in the container")


def read_back_current(ctx: StepContext, release: str) -> str:
    """After a rollback, report only what the host says: the current release and /health, read together."""
    p = ctx.profile
    inner = f"readlink {shlex.quote(ctx.ct.paths.current_link)}; {health_code_command(p)}; echo"
    current, code = ctx.ct.read_output(inner, CURRENT_AND_HEALTH, timeout=p.health_probe_timeout_s + 35,
                                       what="read back the current release")
    if current != release or code != "200":
        raise CheckFailed(f"rolled back to {release}, but the host now reports current release "
                          f"{current or 'unknown'} with /health {code}",
                          fix="check the host (deploy status, deploy history) before anything else",
                          host=ctx.host.name)
    return f"current release read back: {current}, /health {code}"


def candidate_guard(ctx: StepContext, release: str) -> str:
    """Shell lines that stop a script (exit 86) unless `current` names `release` and sglang is active: the server
    the gates measured must still be the candidate when its "kept" verdict is written (same round trip)."""
    link, unit = shlex.quote(ctx.ct.paths.current_link), shlex.quote(ctx.ct.paths.unit_name)
    return (f'cur=$(readlink {link} || true); cur=${{cur##*/}}; act=$(systemctl is-active {unit} || true)\n'
            f'if [ "$cur" != {shlex.quote(release)} ] || [ "$act" != active ]; then '
            f'echo "{NOT_CANDIDATE} ${{cur:-none}} ${{act:-unknown}}"; exit {NOT_CANDIDATE_RC}; fi\n')


def not_the_candidate(ctx: StepContext, release: str, current: str, active: str) -> CheckFailed:
    return CheckFailed(f"the server the checks measured is not the candidate {release}: the current release is "
                       f"now {current} (sglang {active}); something outside this roll changed the host during it, "
                       "so its health, smoke and bench results do not describe the candidate",
                       fix="see `deploy history` and `deploy status` for what changed it, then roll again",
                       host=ctx.host.name, details={"current": current, "active": active})


def write_verdict(ctx: StepContext, release: str, verdict: ReleaseVerdict, *, guard: bool = False) -> None:
    """Record a release's verdict (stamped with the time now); a failed write raises (a release without
    verdict.json counts as unverified, so an unrecorded "kept" would make the next up or roll undo a good
    release). `guard`: write it only while `release` is current and sglang active (a "kept" verdict), else
    CheckFailed."""
    verdict = verdict.model_copy(update={"at": datetime.now(UTC).isoformat(timespec="seconds")})
    script = record_file_script(release, "verdict.json", verdict.to_json())
    if verdict.kept:
        script += check_now_script()
    res = ctx.ct.read_script(candidate_guard(ctx, release) + script if guard else script, VERDICT_WRITE,
                             timeout=120, what="record verdict")
    if guard and res.rc == NOT_CANDIDATE_RC and res.value is not None:
        raise not_the_candidate(ctx, release, *res.value)
    if res.rc != 0:
        raise RemoteError(f"recording the verdict ({verdict.verdict}) of release {release} in CT {ctx.vmid} "
                          f"failed: {res.said(300) or f'exit code {res.rc}'}",
                          fix=f"free space in the container (`df -h {ctx.ct.paths.releases_dir}` in CT {ctx.vmid}) "
                              "and re-run; until its verdict is recorded the release counts as unverified",
                          host=ctx.host.name)
    ctx.state.verdicts[release] = verdict


def roll_back_to(ctx: StepContext, release: str, record: StepRecord, *, reason: str) -> float:
    """Make `release` current again and wait until it is healthy. Returns seconds to healthy."""
    ctx.say(f"rolling back to {release}: {reason}")
    make_current(ctx, release, what=f"rollback to {release}")
    try:
        seconds = wait_healthy(ctx, record)
    except CheckFailed as exc:
        raise CheckFailed(f"rolled back to {release}, but it did not come back healthy: {exc.what}",
                          fix="the host needs attention: check the journal and GPUs (deploy status, doctor)",
                          host=ctx.host.name, details=exc.details) from exc
    record.details["rollback_verified"] = read_back_current(ctx, release)
    return seconds


@dataclass(frozen=True)
class InterruptedRoll:
    """An interrupted roll's unverified candidate found current, and its predecessor that replaces it."""

    candidate: str
    previous: str
    restored: bool  # False: a dry run, which only says it would restore `previous`


def restore_interrupted(ctx: StepContext, record: StepRecord) -> InterruptedRoll | None:
    """If the current release is an interrupted roll's candidate, bring back its predecessor.

    Only a run that changes the host does it (it holds the host lock): a dry run, a plan or a fleet preflight
    only reports what it would restore, since the "interrupted" candidate may be a live roll's, still loading."""
    if not is_unverified_candidate(ctx):
        return None
    meta = current_meta(ctx) or ReleaseMeta()
    cand, prev = str(meta.id), str(meta.previous)
    if ctx.options.dry_run:
        note = (f"would restore the interrupted release {prev} (release {cand} is an unverified candidate: an "
                "interrupted roll's, or a roll still running)")
        record.changes.append(note)
        record.details["would_restore"] = {"release": prev, "candidate": cand}
        record.status = "would-change"
        ctx.say(note)
        return InterruptedRoll(cand, prev, restored=False)
    record.changes.append(f"restored {prev} (release {cand} was an interrupted roll's unverified candidate)")
    record.status = "changed"
    write_verdict(ctx, cand, ReleaseVerdict(verdict=ABANDONED, reason="the roll was interrupted before its gate",
                                            rolled_back_to=prev))
    roll_back_to(ctx, prev, record, reason=f"{cand} was never verified (interrupted roll)")
    ctx.state.rolled_back.append(Rollback(to=prev, candidate=cand, reason="interrupted"))
    ctx.facts.gather((), RELEASE_FACTS, what="re-reading release facts")
    return InterruptedRoll(cand, prev, restored=True)


def unverified_up_release(ctx: StepContext) -> str | None:
    """The current release, when an `up` installed it and never wrote its verdict (interrupted or failed)."""
    meta = current_meta(ctx)
    if meta and meta.source == "up" and meta.id and current_verdict(ctx) is None:
        return meta.id
    return None


def abandon_interrupted_up(ctx: StepContext, record: StepRecord) -> str | None:
    """If the current release came from an `up` that never passed its checks, mark it abandoned; returns its id.

    Unlike a roll's candidate there is no predecessor to restore: `up` installs its desired files again as a new
    release, which its own checks verify (restarting sglang only if those files differ from the running ones).
    """
    rid = unverified_up_release(ctx)
    if rid is None:
        return None
    write_verdict(ctx, rid, ReleaseVerdict(
        verdict=ABANDONED, reason="the up that installed it ended before health, smoke and throughput passed"))
    record.changes.append(f"release {rid} marked abandoned (its up ended before its checks passed)")
    record.status = "changed"
    return rid


# ------------------------------------------------------------------------------------------- roll steps
def candidate(ctx: StepContext) -> Candidate:
    if ctx.state.candidate is None:
        raise ConfigError("no candidate release: the playbook must run resolve_release before this step",
                          fix="add resolve_release (and validate_flags) before it in the playbook",
                          host=ctx.host.name)
    return ctx.state.candidate


@step("install_release")
def install_release(ctx: StepContext, record: StepRecord) -> None:
    """Install the candidate as a new release and restart; from here on a failure rolls back."""
    cand = candidate(ctx)
    previous = cand.previous
    if cand.baseline_needed and not ctx.options.skip_bench:
        preset = ctx.options.preset or ctx.profile.bench_preset
        why = cand.baseline_missing or f"no plain run of preset {preset} on {previous}"
        ctx.say(f"measuring a baseline on {previous} first ({preset}): {why}")
        run = bench_for_release(ctx, preset, previous)
        cand.baseline = run.result
        cand.baseline_evidence = BaselineEvidence(run.run_id, previous, preset, 0.0, remeasured=why)
    bundle = bundle_for(ctx, cand.new_flags)
    state = installed_state(ctx)
    trial = ctx.inputs.roll.trial if ctx.inputs.roll is not None else None
    rid = install_bundle(ctx, bundle, source="roll", restart=True, previous=previous, existing=state.releases,
                         extra_meta={"profile_flags_sha": profile_flags_sha(ctx),
                                     "flag_diff": [[k, a, b] for k, a, b in cand.flag_diff],
                                     **({"tune": trial.meta()} if trial is not None else {})})
    server = ctx.state.server
    server.release, server.bundle, server.restarted, server.installed = rid, bundle, True, True
    record.changes.append(f"release {rid} installed, sglang restarted")
    record.status = "changed"
    record.summary = f"candidate {rid} (previous {previous})"

    arm_rollback(ctx, rid, previous, cand)


def arm_rollback(ctx: StepContext, rid: str, previous: str, cand: Candidate | None = None) -> None:
    """From here on a failing step puts `previous` back (with its own files and stack) and waits for its health;
    the failed release `rid` gets a "rolled-back" verdict with its evidence (`cand`'s baseline for a roll)."""

    def on_failure(err: DeployError, failed: StepRecord) -> None:
        evidence = ReleaseVerdict(
            verdict=ROLLED_BACK, failed_step=failed.name, reason=err.what,
            journal=list((err.details or {}).get("journal") or [])[-20:],  # type: ignore[call-overload]
            rolled_back_to=previous)
        if ctx.state.bench_run is not None:
            evidence.candidate = verdict_figures(ctx.state.bench_run.result)
            evidence.preset = ctx.state.bench_run.preset
        if cand is not None and cand.baseline is not None:
            evidence.baseline = verdict_figures(cand.baseline)
        if cand is not None and cand.baseline_evidence is not None:
            evidence.baseline_evidence = cand.baseline_evidence.to_dict()
        if isinstance(err, LockLost):  # another run owns the host now: touching it would race that run
            err.what += f"; candidate {rid} was NOT rolled back to {previous} by this run"
            return
        try:
            try:
                write_verdict(ctx, rid, evidence)
            except RemoteError as unrecorded:  # the rollback matters more than its evidence (a full disk)
                err.what += f"; {unrecorded.what}"
            seconds = roll_back_to(ctx, previous, failed, reason=err.what)
        except LockLost as lost:
            lost.what += (f" — it was rolling back from {rid} to {previous} after: {err.what}; that rollback did "
                          "not finish")
            raise
        err.what = (f"{err.what} — rolled back to {previous} (healthy again after {seconds:.0f} s; "
                    f"{failed.details['rollback_verified']})")
        err.fix = rolled_back_fix(err.fix, previous)
        err.details = {**(err.details or {}), "rolled_back_to": previous, "candidate": rid}
        failed_step = REGISTRY.get(failed.name)  # a gate's declared reason (GateSpec), else the step's name
        reason = failed_step.rollback_reason if failed_step is not None else failed.name
        ctx.state.rollback = Rollback(to=previous, candidate=rid, reason=reason)
        ctx.state.rolled_back.append(ctx.state.rollback)

    ctx.on_failure = on_failure


#: A failing check's advice to roll back ("…, or roll back", "; roll back if a flag change caused it"): stale once
#: the roll has rolled back by itself.
ROLL_BACK_ADVICE = re.compile(r"(,| or|;)* *roll back( \(deploy rollback\)| if a flag change caused it)?")


def rolled_back_fix(fix: str, previous: str | None) -> str:
    """The fix of an error after the automatic rollback: advice to roll back is replaced by what happened."""
    own, advised = ROLL_BACK_ADVICE.subn("", fix)
    if not advised:
        return fix
    now = f"the roll already put the host back on {previous}, so there is nothing to roll back"
    return f"{own.strip(' ;,')}; {now}" if own.strip(" ;,") else now


# ------------------------------------------------------------------------------------- up and rollback
@step("release_verdict", ct_facts=(CT.current_verdict, CT.current_meta))
def release_verdict(ctx: StepContext, record: StepRecord) -> None:
    """Mark the release `up` converged to as verified (health + smoke + throughput passed)."""
    if ctx.options.dry_run:
        record.status = "skipped"
        record.summary = "dry run"
        return
    server = ctx.state.server
    if server.release is None:
        record.status = "skipped"
        record.summary = "no release"
        return
    if not server.installed and not server.restarted and current_verdict(ctx) is not None:
        record.summary = f"{server.release} already verified"
        return
    run = ctx.state.bench_run
    ctx.on_failure = None  # verified: a later step's failure (the watchdog's) is no reason to roll back
    write_verdict(ctx, server.release, ReleaseVerdict(
        verdict=KEPT, source="up", candidate=verdict_figures(run.result) if run else None,
        preset=run.preset if run else None,
        telemetry=run.telemetry.model_dump(mode="json") if run and run.telemetry else None))
    record.summary = f"{server.release} verified"


@step("rollback_release", ct_facts=(*RELEASE_FACTS, CT.stacks))
def rollback_release(ctx: StepContext, record: StepRecord) -> None:
    """Re-install a previous release (default: the current one's predecessor) and wait for health."""
    ensure_facts(ctx)
    state = installed_state(ctx)
    target = ctx.inputs.rollback_to
    if target is None:
        meta = current_meta(ctx)
        target = meta.previous if meta is not None else None
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
    require_stack_present(ctx, target)
    # The release we leave keeps its own verdict and figures: a manual rollback is an operator's choice,
    # not a judgement of that release.
    seconds = roll_back_to(ctx, target, record, reason="deploy rollback")
    if state.release is not None:
        ctx.state.rolled_back.append(Rollback(to=target, candidate=state.release, reason="manual"))
    record.status = "changed"
    record.changes.append(f"{state.release} → {target}")
    ctx.state.server.release = target
    record.summary = f"{target} current and healthy after {seconds:.0f} s (was {state.release})"
