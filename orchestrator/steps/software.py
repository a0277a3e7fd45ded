"""Inside the container: sglang at the profile's pinned version, model weights present, flags valid for it."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from orchestrator.engine.step import StepContext, mark_change, step
from orchestrator.errors import CheckFailed, ConfigError, RemoteError
from orchestrator.facts import CT, HOST, sglang_version_command
from orchestrator.facts.reads import SIZES_MARK, STACK_RECORDED, STACKS_PRUNED, StackRecorded
from orchestrator.flags.schema import FlagSchema
from orchestrator.inventory.models import ServerProfile, hf_token_for
from orchestrator.layout import PATHS
from orchestrator.parsers.weights import RECORD_PATH, WeightsState, parse_download_output
from orchestrator.releases.documents import ReleaseMeta
from orchestrator.releases.store import read_releases_script
from orchestrator.resources import flags_probe_source, probe_text
from orchestrator.runlog import StepRecord
from orchestrator.stacks.lock import (
    LockTarget,
    constraint_violations,
    hash_mismatches,
    lock_drift,
    lock_target,
    parse_lock,
)
from orchestrator.stacks.patches import (
    NOT_APPLIED_RC,
    Patch,
    apply_script,
    not_applied_error,
    parse_patch,
    patch_drift,
    read_apply_output,
)
from orchestrator.stacks.pip_index import pip_index_options
from orchestrator.stacks.pip_progress import PipProgress
from orchestrator.stacks.stack import (
    BudgetPlan,
    BudgetReport,
    DiskTally,
    ImportFailure,
    Stack,
    StackRecord,
    StackSizes,
    StackUsage,
    budget_bytes,
    budget_prune_plan,
    budget_refusal,
    build_command,
    nvcc_home,
    pip_install_command,
    protected_stacks,
    prune_command,
    record_for,
    release_stack_sha,
    requirement,
    stack_nvcc_command,
    stack_sizes_script,
    venv_sizes,
    write_record_command,
)
from orchestrator.steps.session import ensure_facts, refresh_ct_facts, unknown_until_started
from orchestrator.verdicts.cuda import stack_cuda, stack_driver_finding
from orchestrator.verdicts.toolchain import Lack
from orchestrator.verdicts.weights import DownloadContext, download_error


@dataclass(frozen=True)
class FlagCheck:
    ok: bool
    error: str
    version: str | None
    schema: FlagSchema | None
    #: `import sglang` failed in the venv: what failed, where (the parser was never built).
    import_error: ImportFailure | None = None


def profile_patches(profile: ServerProfile) -> tuple[Patch, ...]:
    """The profile's patches in its order (the loader read and checked them)."""
    return tuple(parse_patch(profile.patch_texts[name], name) for name in profile.patches
                 if name in profile.patch_texts)


def profile_stack(ctx: StepContext, version: str | None = None, *, bare: bool = False) -> Stack:
    """The stack the profile names (at `version` instead of its pin: the stack an older venv holds; `bare`: the
    plain requirement, as pip filled a venv without the lock or patches)."""
    want = version or ctx.profile.sglang_version
    prof = ctx.profile
    pinned = want == prof.sglang_version and not bare
    lock = parse_lock(prof.lock_text, prof.lock_file or "lock") if prof.lock_text is not None and pinned else None
    return Stack(requirement(want, prof.sglang_extras), want, pip_index_options(ctx.host.container.pip_index_url),
                 lock, profile_patches(prof) if pinned else (), tuple(prof.constraints) if pinned else ())


def stack_drift(ctx: StepContext, sha: str | None) -> list[str]:
    """With a lock: the running stack (`sha`, from the current release's meta) is not the profile's locked one,
    or its venv differs from the lock (by distribution, from CT.stack_dists: pip's records in that venv)."""
    want = profile_stack(ctx)
    if want.lock is None:
        return []
    if sha != want.sha:
        return [f"the running stack {sha or '(profile venv, unlocked)'} is not the profile's locked stack {want.sha} "
                f"(`deploy up` builds it)"]
    return lock_drift(want.lock, ctx.facts.get(CT.stack_dists) or {})


def stack_records(ctx: StepContext) -> dict[str, StackRecord]:
    return ctx.facts.get(CT.stacks) or {}


def server_stack(ctx: StepContext) -> StackRecord:
    """The stack the server runs in this run: the one sglang_install chose (`up`), else the current release's (a
    roll changes flags, never the stack), else the profile's own venv (a release of an earlier deploy)."""
    if ctx.state.stack is not None:
        return ctx.state.stack
    return release_stack(ctx, ctx.facts.get(CT.current_meta))


def release_stack(ctx: StepContext, meta: ReleaseMeta | None) -> StackRecord:
    """The stack a release runs, from its meta.json; a release of an earlier deploy names none and runs the
    profile's venv."""
    stack = meta.stack if meta is not None else None
    if stack is not None and stack.venv:
        return StackRecord(stack.sha or "", stack.venv, stack.sglang_version or "", stack.requirement or "",
                           cuda_home=stack.cuda_home or carried_cuda(ctx, stack.venv))
    version = ctx.facts.get(CT.sglang_version) or (
        (meta.sglang_version if meta is not None else None) or ctx.profile.sglang_version)
    venv = ctx.profile.venv.rstrip("/")
    return StackRecord("", venv, version, requirement(version, ctx.profile.sglang_extras), adopted=True,
                       cuda_home=carried_cuda(ctx, venv))


def carried_cuda(ctx: StepContext, venv: str) -> str | None:
    """The CUDA the venv `venv` carries (sglang 0.5.23's nvidia-cuda-nvcc), as this run's CT.toolchain read it
    (None: none, or the fact not read in this run: a release before this one recorded none in its meta.json)."""
    tool = ctx.facts.find(CT.toolchain)
    return tool.home_of(venv) if tool is not None else None


#: The flag check imports the stack's sglang: a real one reads torch, transformers and flashinfer cold from disk
#: (`import sglang.srt.server_args` took about 60 s of a real 0.5.12.post1 start on the project's 2-core machine).
FLAG_CHECK_TIMEOUT_S = 300


def container_flag_check(ctx: StepContext, argv: list[str], venv: str | None = None) -> FlagCheck:
    """Validate argv with the parser of the sglang of `venv` (default: the stack the server runs), in the container
    (one round trip): a new stack's parser judges the flags before anything restarts.

    The probe travels on stdin; sglang is never imported on the operator's machine.
    """
    venv = venv or server_stack(ctx).venv
    res = ctx.ct.run_python(venv, flags_probe_source(), ["sglang", json.dumps(argv)],
                            tag="DEPLOY_PROBE_EOF",
                            timeout=FLAG_CHECK_TIMEOUT_S, what="flag validation in the container")
    try:
        data: dict[str, Any] = json.loads(res.last_line)
    except (json.JSONDecodeError, IndexError) as exc:
        raise RemoteError(f"flag validation in CT {ctx.vmid} printed no result: "
                          f"{res.said(300)}",
                          fix=f"check that {ctx.ct.paths.venv_python(venv)} exists and sglang imports",
                          host=ctx.host.name) from exc
    schema = FlagSchema.from_dump(data["actions"], version=str(data.get("version"))) if data.get("actions") else None
    return FlagCheck(bool(data.get("ok")), str(data.get("error") or ""), data.get("version"), schema,
                     ImportFailure.of(data.get("import_error")))


def installed_schema(ctx: StepContext, *, current: bool = False) -> tuple[str, FlagSchema]:
    """The flag schema of the sglang the server runs in this run (a stack roll: the new stack's; `current`: the
    current release's stack); bundled when known, else probed in that venv."""
    stack = release_stack(ctx, ctx.facts.get(CT.current_meta)) if current else server_stack(ctx)
    version = stack.sglang_version or ctx.profile.sglang_version
    if version in FlagSchema.known_versions():
        return version, FlagSchema.load(version)
    probe = container_flag_check(ctx, [], venv=stack.venv)
    if probe.schema is None:
        raise RemoteError(f"cannot read sglang's flags in CT {ctx.vmid}: {probe.error}", host=ctx.host.name)
    return version, probe.schema


def sglang_install_command(ctx: StepContext) -> str:
    """The profile's venv (made with the container's own `python3 -m venv` when absent), then the pinned sglang +
    extras (or the lock's distributions): the first stack of a container, where earlier deploys and site templates
    have it."""
    venv = shlex.quote(ctx.profile.venv)
    return f"test -x {venv}/bin/python || python3 -m venv {venv} && {pip_install_command(profile_stack(ctx), venv)}"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@step("sglang_install", ct_facts=(CT.sglang_version, CT.stacks, CT.stack_patched, CT.stack_dists, CT.current_meta,
                                    CT.stack_usage, CT.python_target, CT.venv_dists, CT.toolchain),
      host_facts=(HOST.driver_version,))
def sglang_install(ctx: StepContext, record: StepRecord) -> None:
    """The profile's stack, then (with a lock) where the running stack differs from it, by distribution: the
    same facts round trip, so `plan` shows a pip run into the venv behind the tool's back."""
    install_stack(ctx, record)
    if not ctx.facts.ct_running:
        return
    tool = ctx.facts.get(CT.toolchain)
    if tool is not None:  # what a real sglang's first start compiles with (docs/doctor.md#ct-toolchain)
        # said where a first start is ahead (a plan, a stack built or changed now); a converged run only records it
        # (`--json`), doctor's ct-toolchain says it on every look
        show_toolchain(ctx, record, tool.lacks(server_stack(ctx).cuda_home),
                       loud=ctx.options.dry_run or record.status in ("changed", "would-change"))
    running = release_stack_sha(ctx.facts.get(CT.current_meta))
    drift = stack_drift(ctx, running)
    record.details["stack_drift"] = drift
    if drift and ctx.state.stack is not None and ctx.state.stack.sha == running:
        record.summary += f"; stack drift against the lock: {', '.join(drift)}"


def show_toolchain(ctx: StepContext, record: StepRecord, lacks: Sequence[Lack], *, loud: bool = True) -> None:
    """What the server's first start would not find, in its details (`--json`: `toolchain_missing`,
    `toolchain_fixes`, in the same order) and, when `loud`, in the step's line and one line each with its fix."""
    record.details["toolchain_missing"] = [lack.what for lack in lacks]
    record.details["toolchain_fixes"] = [lack.fix for lack in lacks]
    if not lacks or not loud:
        return
    record.summary += f"; the first start lacks {len(lacks)}: " + ", ".join(lack.what.split(" (")[0] for lack in lacks)
    for lack in lacks:
        ctx.say(f"  toolchain: missing {lack.describe()}")


def install_stack(ctx: StepContext, record: StepRecord) -> None:
    """The profile's stack (sglang at its pin, with its extras, from the site's index) in a venv of its own.

    The first stack goes into the profile's venv; a venv that holds another stack (the one the server runs now) is
    adopted as that stack and kept, and the new one is built beside it under PATHS.stacks_dir while the server
    keeps serving. A stack once built is reused with no pip run (a rollback, a profile moved back).
    """
    ensure_facts(ctx)
    if unknown_until_started(ctx, record, "the installed sglang version"):
        return
    stack, base = profile_stack(ctx), ctx.profile.venv.rstrip("/")
    want = stack.sglang_version
    have = ctx.facts.get(CT.sglang_version)
    records = stack_records(ctx)
    record.details.update({"wanted": want, "installed": have, "requirement": stack.requirement,
                           "stack": stack.sha, "stacks": sorted(records)})
    found = records.get(stack.sha)
    if found is not None and found.usable:
        ctx.state.stack = found = replace(found, cuda_home=carried_cuda(ctx, found.venv))
        record.summary = f"stack {stack.sha} (sglang {want}) in {found.venv}"
        if found.patches:
            record.summary += f", patched ({', '.join(found.patches)})"
        drift = patched_files_drift(ctx, found.sha, found.patches)
        if drift:
            record.details["patch_drift"] = drift
            record.summary += "; PATCHED FILE CHANGED behind the tool's back: " + "; ".join(drift)
        return
    refuse_lock_of_another_python(ctx, stack)
    refuse_driver_too_old(ctx, stack)
    # The profile's venv with this very requirement is adopted even when it was recorded as installed from
    # another index (a site template's provisioning host): its content is the requirement's.
    # A locked stack is never adopted: a venv pip filled without the lock need not hold the locked files; a
    # constrained one only when the venv meets the constraints (pip filled it without them).
    owner = next((r for r in records.values() if r.venv == base), None)
    dists: dict[str, str] = ctx.facts.get(CT.venv_dists) or {}
    unmet = constraint_violations(stack.constraints, dists)
    record.details["unmet_constraints"] = unmet
    if (have == want and stack.lock is None and not stack.patches and not unmet
            and (owner is None or owner.requirement == stack.requirement)):
        adopt_stack(ctx, record, stack, base, f"adopt {base} (sglang {want}) as stack {stack.sha}")
        return
    if have is None and (owner is None or owner.requirement == stack.requirement):
        install_base(ctx, record, stack)
        return
    if have is not None and owner is None:  # an earlier deploy's single venv: the running server's stack
        old = profile_stack(ctx, have, bare=True)
        adopt_stack(ctx, record, old, base, f"adopt {base} (sglang {have}) as stack {old.sha}, kept as it is")
    build_stack(ctx, record, stack)


def refuse_driver_too_old(ctx: StepContext, stack: Stack) -> None:
    """A stack whose torch needs a newer driver branch than the host's loaded one is refused before its build (the
    server would fail at start with torch's "driver too old"); unknown driver or torch: nothing to judge here."""
    need = stack_cuda(stack.sglang_version, ctx.profile.lock_text if stack.lock is not None else None)
    finding = stack_driver_finding(ctx.facts.find(HOST.driver_version), need)
    if finding is not None and finding.status == "fail":
        raise CheckFailed(f"{finding.observed}; nothing was built", fix=finding.fix, host=ctx.host.name)


def refuse_lock_of_another_python(ctx: StepContext, stack: Stack) -> None:
    """A lock names the wheels of the Python it was resolved for (sglang, torch and triton ship cp311 and cp313
    builds): on a container whose python3 is another, pip would refuse them as "not served" after a long build, so
    the mismatch is refused first, naming both and the fix (a lock written before targets were recorded: unknown)."""
    locked = lock_target(ctx.profile.lock_text or "") if stack.lock is not None else None
    here: LockTarget | None = ctx.facts.get(CT.python_target)
    if locked is None or here is None or locked == here:
        return
    raise ConfigError(f"{ctx.profile.lock_file} was resolved for {locked.describe()}, but CT {ctx.vmid}'s python3 is "
                      f"{here.describe()}: the locked wheels are not the ones this Python installs; nothing was built",
                      host=ctx.host.name, details={"lock_target": locked.describe(), "host_target": here.describe()},
                      fix=(f"a lock serves the hosts of one Python: run `deploy lock {ctx.host.profile} --host H` on a "
                           f"host of {here.tag} for a profile of its own (its hosts name that profile), or give "
                           f"{ctx.host.name} a container of {locked.tag} (docs/stacks.md#locks)"))


def adopt_stack(ctx: StepContext, record: StepRecord, stack: Stack, venv: str, what: str) -> None:
    """Record the profile's venv as the stack it holds: no pip run, and no prune ever removes it."""
    rec = record_for(stack, venv, adopted=True, built_at=now_iso(), cuda_home=carried_cuda(ctx, venv))
    if stack.sha == profile_stack(ctx).sha:
        ctx.state.stack = rec
    if not mark_change(record, ctx, what):
        record.summary = what
        return
    write_record(ctx, rec)
    record.summary = what


def write_record(ctx: StepContext, rec: StackRecord, then: str = "") -> StackRecorded:
    """Write a stack's record (its venv is complete), then run the script `then` in the same round trip (the
    release lines and the stacks' sizes it printed)."""
    res = ctx.ct.read_script(f"{write_record_command(rec)} || exit 1\n{then}", STACK_RECORDED, timeout=120,
                             what=f"record stack {rec.sha}")
    if res.rc != 0:
        raise RemoteError(f"could not record stack {rec.sha} in CT {ctx.vmid}: {res.said(300)}",
                          fix=f"check that {PATHS.stacks_dir} in the container is writable", host=ctx.host.name)
    return res.value


#: Between the installed sglang's version and the nvcc the venv carries in the check after a pip install.
NVCC_MARK = "__DEPLOY_STACK_NVCC__"


def pip_install(ctx: StepContext, command: str, stack: Stack, venv: str) -> str | None:
    """Run a pip install into `venv` (its lines shown as progress), then check pip's record of sglang there and, in
    the same round trip, find the CUDA the venv now carries (returned: the unit's CUDA_HOME; None: none)."""
    shown = PipProgress(total=len(stack.lock.entries) if stack.lock is not None else None)
    res = ctx.ct.run(command, check=False, timeout=3600, what="pip install sglang", each_line=shown.observe,
                     progress=lambda line: ctx.say(f"  pip: {shown.line(line)}"))
    if res.rc != 0 and (bad := hash_mismatches(res.both)):
        raise ConfigError(f"the index no longer serves the locked build of {', '.join(b.describe() for b in bad)}; "
                          f"pip refused to install stack {stack.sha} and the server was not touched",
                          host=ctx.host.name, details={"packages": [b.name for b in bad]},
                          fix=(f"if the index published a new build on purpose, run `deploy lock {ctx.host.profile} "
                               f"--host {ctx.host.name}` again and review the diff of {ctx.profile.lock_file}; "
                               "otherwise find out who changed the index (a lock exists so this never goes unseen)"))
    if res.rc != 0:
        raise RemoteError(f"pip install {stack.requirement} failed: {res.said(500)}",
                          fix=("check the container's network or set container.pip_index_url to a reachable "
                               "index (air-gapped: a local mirror or wheelhouse); the server was not touched"),
                          host=ctx.host.name)
    check = ctx.ct.run(f"{sglang_version_command(venv)}; rc=$?; echo {NVCC_MARK}; {stack_nvcc_command(venv)}; "
                       "exit $rc", check=False, timeout=60, what="read the installed sglang")
    said, _, nvcc = check.stdout.partition(f"{NVCC_MARK}\n")
    got = said.strip() if check.rc == 0 else None
    if got != stack.sglang_version:
        raise CheckFailed(f"after installing, pip's record of sglang in {venv} says {got}, wanted "
                          f"{stack.sglang_version}", host=ctx.host.name,
                          fix=(f"look for a second sglang-*.dist-info in the venv (`ls {venv}/lib/python3*"
                               "/site-packages | grep -i sglang`) and remove the stale one"))
    return nvcc_home(nvcc)


def install_base(ctx: StepContext, record: StepRecord, stack: Stack) -> None:
    """The container's first stack, in the profile's venv (as earlier deploys and site templates have it)."""
    index = ctx.host.container.pip_index_url
    base = ctx.profile.venv.rstrip("/")
    what = f"install {stack.requirement} in {base} (found none)" + (f" from {index}" if index else "")
    rec = ctx.state.stack = record_for(stack, base, adopted=True, built_at=now_iso())
    if not mark_change(record, ctx, what):
        record.summary = what
        return
    ctx.say(what)
    rec = ctx.state.stack = replace(rec, cuda_home=pip_install(ctx, sglang_install_command(ctx), stack, base))
    if stack.patches:
        rec = ctx.state.stack = record_for(stack, base, adopted=True, built_at=rec.built_at, cuda_home=rec.cuda_home,
                                           patched=apply_patches(ctx, stack, base, remove_on_failure=False))
    write_record(ctx, rec)
    record.summary = f"installed sglang {stack.sglang_version} (stack {stack.sha} in {base})" + patched_note(stack)


def refuse_over_budget(ctx: StepContext, stack: Stack) -> None:
    """With stacks_disk_budget_gb: a new stack that cannot fit even after pruning every prunable stack is refused
    (exit 2) before any change, from the sizes read in the facts round trip."""
    gb = ctx.profile.stacks_disk_budget_gb
    usage: StackUsage | None = ctx.facts.get(CT.stack_usage)
    if gb is None or usage is None:
        return
    meta = ctx.facts.get(CT.current_meta)
    protected = {sha for sha in (release_stack_sha(meta), usage.verified_stack) if sha}
    why = budget_refusal(stack, stack_records(ctx), usage.sizes.stacks, protected, gb)
    if why is not None:
        raise ConfigError(why, host=ctx.host.name,
                          details={"budget_bytes": budget_bytes(gb),
                                   "counted": DiskTally.of(usage.sizes.stacks, usage.sizes.pip_cache).to_dict()},
                          fix=(f"raise profiles.{ctx.host.profile}.stacks_disk_budget_gb (the container's "
                               "rootfs_size_gb must hold it) or remove it; the stacks of the current and the newest "
                               "verified release and the adopted venv are never pruned "
                               "(docs/stacks.md#pruning-keep_stacks-and-a-disk-budget)"))


def build_stack(ctx: StepContext, record: StepRecord, stack: Stack) -> None:
    """A new stack in its own venv under PATHS.stacks_dir, beside the running server; then the prune (by count,
    keep_stacks, and with stacks_disk_budget_gb by bytes: the sizes read with the record, the prune and the kept
    stacks' sizes in one round trip)."""
    index = ctx.host.container.pip_index_url
    what = (f"build stack {stack.sha} ({stack.requirement}{patched_note(stack)}) in {stack.venv} while the server "
            "keeps running"
            + (f" from {index}" if index else ""))
    rec = record_for(stack, stack.venv, adopted=False, built_at=now_iso())
    ctx.state.stack = rec
    refuse_over_budget(ctx, stack)
    if not mark_change(record, ctx, what):
        record.summary = what
        return
    ctx.say(what)
    rec = ctx.state.stack = replace(rec, cuda_home=pip_install(ctx, build_command(stack, stack.venv), stack,
                                                               stack.venv))
    if stack.patches:
        rec = ctx.state.stack = record_for(stack, stack.venv, adopted=False, built_at=rec.built_at,
                                           cuda_home=rec.cuda_home,
                                           patched=apply_patches(ctx, stack, stack.venv, remove_on_failure=True))
    gb = ctx.profile.stacks_disk_budget_gb
    budget = budget_bytes(gb) if gb is not None else None
    then = read_releases_script(limit=10_000) + (
        f"\necho {SIZES_MARK}\n{stack_sizes_script()}\n" if budget is not None else "")
    recorded = write_record(ctx, rec, then=then)
    rows = recorded.releases
    current = next((r.current for r in rows if r.current is not None), None)
    records = {**stack_records(ctx), stack.sha: rec}
    sizes = recorded.sizes
    plan = budget_prune_plan(records, ctx.profile.keep_stacks, protected_stacks(rows, current) | {stack.sha},
                             sizes, budget)
    prune_stacks(ctx, record, plan, records, sizes, budget)
    record.summary = f"built stack {stack.sha} (sglang {stack.sglang_version}) in {stack.venv}" + patched_note(stack)


def prune_stacks(ctx: StepContext, record: StepRecord, plan: BudgetPlan, records: dict[str, StackRecord],
                 sizes: StackSizes, budget: int | None) -> None:
    """Run the prune (the pip cache first, then the stacks: one command, which reads the sizes again with a
    budget) and say what it freed; with a budget, what it counted, pruned and kept (details `disk_budget`)."""
    gb = ctx.profile.stacks_disk_budget_gb
    limits = f"keep_stacks {ctx.profile.keep_stacks}" + (f", stacks_disk_budget_gb {gb:g}" if gb is not None else "")
    counted = DiskTally.of(venv_sizes(records, sizes.stacks), sizes.pip_cache)
    pruned, after = DiskTally(), sizes
    if plan.stacks or plan.pip_cache:
        script = prune_command(plan.stacks, pip_cache=plan.pip_cache) + (
            f" && {stack_sizes_script()}" if budget is not None else "")
        res = ctx.ct.read_output(script, STACKS_PRUNED, timeout=600, what="prune stacks")
        if res.ok:
            pruned = DiskTally.of({r.sha: sizes.stacks.get(r.sha, 0) for r in plan.stacks},
                                  sizes.pip_cache if plan.pip_cache else 0)
            if plan.pip_cache:
                ctx.say(f"emptied the pip cache {PATHS.pip_cache_dir} ({limits}), {pruned.pip_cache:,} bytes freed")
            if plan.stacks:
                record.details["pruned"] = [r.sha for r in plan.stacks]
                ctx.say(f"pruned stack(s) {', '.join(r.sha for r in plan.stacks)} ({limits})"
                        + (f", {pruned.total - pruned.pip_cache:,} bytes freed" if budget is not None else ""))
            after = res.value if budget is not None else sizes
    if budget is None:
        return
    gone = {sha for sha, _ in pruned.stacks}
    kept = DiskTally.of(venv_sizes({sha: r for sha, r in records.items() if sha not in gone}, after.stacks),
                        after.pip_cache)
    report = BudgetReport(budget, counted, pruned, kept)
    record.details["disk_budget"] = report.to_dict()
    ctx.say(report.kept_line())
    if report.over:
        ctx.say(f"warning: the kept stacks take more than stacks_disk_budget_gb {gb:g}: none of the others may "
                "be pruned (the current and newest verified releases' stacks, the new stack, adopted venvs)")


def patched_note(stack: Stack) -> str:
    return f", patched with {', '.join(p.name for p in stack.patches)}" if stack.patches else ""


def apply_patches(ctx: StepContext, stack: Stack, venv: str, *, remove_on_failure: bool) -> dict[str, str]:
    """The stack's patches into `venv`'s site-packages, each checked with a dry run first (one round trip); the
    sha256 of every patched file, for the stack's record. A patch that does not apply is a ConfigError naming the
    patch file and the hunk; the venv of a stack built for this run is removed with it (no record is written, so
    it is no stack), and the server was not touched."""
    names = ", ".join(p.name for p in stack.patches)
    ctx.say(f"patch stack {stack.sha}: {names} (dry run first)")
    res = ctx.ct.script(apply_script(stack.patches, venv, remove_on_failure=remove_on_failure), check=False,
                        timeout=300, what="apply stack patches")
    out = read_apply_output(stack.patches, res.stdout)
    if out.failed is not None or res.rc == NOT_APPLIED_RC:
        if out.failed is None:
            raise RemoteError(f"applying {names} to stack {stack.sha} failed: {res.said(500)}",
                              fix="read patch's output above", host=ctx.host.name)
        raise not_applied_error(out.failed, stack=stack.sha, sglang=stack.sglang_version, host=ctx.host.name)
    if res.rc == 127:
        raise CheckFailed(f"GNU patch is not installed in CT {ctx.vmid}: stack {stack.sha} cannot be patched",
                          fix="run `deploy up`: its ct_packages step installs `patch` (or apt-get install patch in "
                              "the container)", host=ctx.host.name)
    if res.rc != 0:
        raise RemoteError(f"applying {names} to stack {stack.sha} failed (exit {res.rc}): {res.said(500)}",
                          fix=f"check {venv} in CT {ctx.vmid}", host=ctx.host.name)
    missing = [p for p in dict.fromkeys(path for pt in stack.patches for path in pt.paths) if p not in out.patched]
    if missing:
        raise RemoteError(f"patched {names} but could not read back the sha256 of {', '.join(missing)}",
                          fix=f"check {venv} in CT {ctx.vmid}", host=ctx.host.name)
    for path, sha in sorted(out.patched.items()):
        ctx.say(f"  patched {path} (sha256 {sha[:12]}…)")
    return out.patched


def patched_files_drift(ctx: StepContext, sha: str | None, patches: Sequence[str]) -> list[str]:
    """The patched files of stack `sha` that changed (or are gone) since it was built, by name (CT.stack_patched
    reads each file's sha256 as its record holds it and as the venv holds it now)."""
    now = (ctx.facts.get(CT.stack_patched) or {}).get(sha or "")
    return patch_drift(now.recorded, now.current, list(patches)) if now is not None else []


#: What `hf` is installed from when the server's venv has none (in PATHS.hf_venv, never in the server's venv: a
#: real sglang venv keeps the huggingface_hub its transformers pins). 1.x and 2.x ship `hf`; `huggingface-cli` was
#: removed in 1.0.
HF_HUB_REQUIREMENT = "huggingface_hub>=1.0,<3"
#: `hf` otherwise asks a package registry for a newer release of itself at every start and sends telemetry: the
#: download must talk to the model hub (or the site's mirror) only.
HF_QUIET_ENV = "HF_HUB_DISABLE_UPDATE_CHECK=1 HF_HUB_DISABLE_TELEMETRY=1 "


def weights_probe_source() -> str:
    return probe_text("weights_probe.py")


def with_token_file(body: str) -> str:
    """`body` with the hub token in PATHS.hf_token_path (0600) for as long as it runs, in the same round trip: the
    token is read from the command's stdin (never argv: `read` and `printf` are shell builtins) into the file, and
    the file is removed when the body ends, however the shell ends (EXIT, and HUP/INT/TERM/PIPE: an SSH connection
    dropped by a killed run). Before issue 50 the file was written in a round trip of its own, and a run killed
    between the two left the token in the container."""
    path, tmp = shlex.quote(PATHS.hf_token_path), shlex.quote(PATHS.hf_token_path + ".tmp")
    write = (f"( umask 077 && mkdir -p {shlex.quote(PATHS.state_dir)} && IFS= read -r t && "
             f"printf '%s\\n' \"$t\" > {tmp} && mv -f {tmp} {path} )")
    # The body runs as a child the shell waits for (`wait` is interrupted by a signal; a foreground child is not),
    # and a signal ends the child too before the EXIT trap removes the file.
    stop = "; ".join(f"trap 'kill ${{child:-}} 2>/dev/null; exit {code}' {sig}"
                     for sig, code in (("HUP", 129), ("INT", 130), ("TERM", 143), ("PIPE", 141)))
    return (f"child=; trap 'rm -f {path} {tmp}' EXIT; {stop}; {write} && {{ ( {body} ) & child=$!; wait $child; }}")


def hf_download_command(ctx: StepContext, *, token_file: bool = False) -> str:
    """`hf` from the server's venv, or else from its own venv (installed once); the revision resolved to its commit
    (the probe lists its files, so a gated repo is refused before the download); `hf download REPO --revision
    COMMIT --local-dir DIR` (resumes, prints progress); then the hub's file list of that commit checked file by file
    (name and size) and recorded in DIR/RECORD_PATH, the record the weights fact trusts. A failed download adds the
    `df` line of DIR and what the rest still needs. With `token_file`, `hf` reads the token from PATHS.hf_token_path
    (HF_TOKEN_PATH), which is removed at the end. One container command."""
    prof, spec = ctx.profile, ctx.host.container
    venv, tool = shlex.quote(prof.venv), shlex.quote(PATHS.hf_venv)
    assert prof.weights_repo is not None
    repo, path = shlex.quote(prof.weights_repo), shlex.quote(prof.model_path)
    env = HF_QUIET_ENV + (f"HF_ENDPOINT={shlex.quote(spec.hf_endpoint)} " if spec.hf_endpoint else "")
    env += f"HF_TOKEN_PATH={shlex.quote(PATHS.hf_token_path)} " if token_file else ""
    probe = f"\"$hf_env\"/bin/python -c {shlex.quote(weights_probe_source())}"
    install = (f"{{ test -x {tool}/bin/hf || {{ python3 -m venv {tool} && {tool}/bin/pip install "
               f"--disable-pip-version-check --progress-bar off{pip_index_options(spec.pip_index_url)} "
               f"{shlex.quote(HF_HUB_REQUIREMENT)}; }}; }}")
    body = (f"if test -x {venv}/bin/hf; then hf_env={venv}; else hf_env={tool} && {install}; fi && export {env}&& "
            f"commit=$({probe} resolve {repo} {shlex.quote(prof.weights_revision)}) && "
            f"{{ \"$hf_env\"/bin/hf download {repo} --revision \"$commit\" --local-dir {path} || "
            f"{{ rc=$?; printf 'deploy-df\\t%s\\n' \"$(df -Ph {path} 2>/dev/null | tail -n 1)\"; "
            f"{probe} need {repo} \"$commit\" {path}; exit $rc; }}; }} && "
            f"{probe} record {repo} \"$commit\" {path} {shlex.quote(RECORD_PATH)}")
    return with_token_file(body) if token_file else body


def weights_state(ctx: StepContext) -> WeightsState | None:
    """What the weights fact found (None: not read, e.g. the container is not running)."""
    return ctx.facts.get(CT.weights)


@step("model_weights", ct_facts=(CT.weights,))
def model_weights(ctx: StepContext, record: StepRecord) -> None:
    """Complete model weights at the profile's model_path (host mount, or `hf download` with progress).

    Complete means every file is there: against deploy's record of a finished download (the hub's file list of
    the pinned revision, with sizes), or for a mounted directory the shards its index names. config.json alone
    proves nothing: `hf download` writes the small files first and deletes a partial file when it fails.
    """
    ensure_facts(ctx)
    if unknown_until_started(ctx, record, "whether the weights are complete"):
        return
    prof, spec = ctx.profile, ctx.host.container
    state = weights_state(ctx)
    if spec.model_mount is not None:
        # The weights live on host storage, mounted by the container step: check them, never download over them.
        record.details["mount"] = {"host": spec.model_mount, "container": prof.model_path}
        if state is not None and state.complete:
            record.summary = f"weights complete at {prof.model_path} (host {spec.model_mount})"
            return
        if state is None and ctx.options.dry_run:
            record.status = "skipped"
            record.summary = f"{spec.model_mount} is mounted at {prof.model_path} once the container runs"
            return
        if state is None or state.record == "none":
            raise CheckFailed(f"no model weights (config.json) at {prof.model_path}, the mount of host directory "
                              f"{spec.model_mount}",
                              fix=f"put the model files in {spec.model_mount} on the host (or drop "
                                  "container.model_mount to download them with weights_repo)", host=ctx.host.name)
        record.details["missing"] = [m.path for m in state.missing]
        raise CheckFailed(f"the weights in host directory {spec.model_mount} (mounted at {prof.model_path}) are "
                          f"incomplete: {len(state.missing)} file(s) missing or short: {state.missing_summary()}",
                          fix=f"copy the missing files into {spec.model_mount} on the host (e.g. finish the `hf "
                              "download` there), then re-run; the server is not started on partial weights",
                          host=ctx.host.name, details={"missing": [m.path for m in state.missing]})
    if state is not None and state.recorded:
        record.summary = f"weights complete at {prof.model_path} ({state.repo} at {state.commit[:12]})"
        return
    if prof.weights_repo is None:
        if state is not None and state.complete:
            record.summary = f"weights complete at {prof.model_path} (every shard its index names)"
            return
        raise CheckFailed(f"no complete model weights at {prof.model_path}"
                          + (f" (missing: {state.missing_summary()})" if state is not None and state.missing else "")
                          + " and no weights_repo to fetch them",
                          fix="copy the weights there, set profiles.<name>.weights_repo, or mount a host directory "
                              "there with container.model_mount", host=ctx.host.name)
    source = f"{prof.weights_repo}@{prof.weights_revision}"
    if state is not None and state.missing:
        record.details["missing"] = [m.path for m in state.missing]
        what = (f"finish the download of {source} to {prof.model_path} ({len(state.missing)} file(s) missing or "
                f"short: {state.missing_summary(3)})")
    elif state is not None and state.record != "none":
        what = (f"check {prof.model_path} against the file list of {source} and record it (no record of a finished "
                "download; `hf download` fetches only what is missing)")
    else:
        what = f"download {source} to {prof.model_path}"
    what += f" from {spec.hf_endpoint}" if spec.hf_endpoint else ""
    if ctx.options.skip_weights:
        record.status = "skipped"
        record.summary = f"--skip-weights: would {what}"
        return
    if not mark_change(record, ctx, what):
        record.summary = what
        return
    ctx.say(what + " (this can take long; `hf download` prints its progress and skips the files it already has)")
    token_ref = hf_token_for(ctx.host, ctx.profile)
    # The token travels on the download's own stdin into a 0600 file that lives as long as the download.
    res = ctx.ct.run(hf_download_command(ctx, token_file=token_ref is not None), check=False, timeout=24 * 3600,
                     what="weights download", progress=lambda line: ctx.say(f"  download: {line}"),
                     stdin=token_ref.read() + "\n" if token_ref is not None else None)
    out = parse_download_output(res.both)
    if out.hub_client:
        record.details["hub_client"] = out.hub_client
    if res.rc != 0:
        refresh_ct_facts(ctx, CT.weights)  # what the failed download left: named in the error
        left = weights_state(ctx)
        missing = f" ({left.missing_summary()} missing or short)" if left and left.missing else ""
        summary = missing + f": {res.said(500)}"
        raise download_error(out, DownloadContext(prof.weights_repo, prof.model_path,
                                                  token_ref.describe() if token_ref else None, spec.hf_endpoint,
                                                  ctx.host.name), summary, missing)
    refresh_ct_facts(ctx, CT.weights)
    state = weights_state(ctx)
    if state is None or not state.recorded:
        raise CheckFailed(f"`hf download {prof.weights_repo}` finished but the weights at {prof.model_path} are "
                          f"not complete: {state.missing_summary() if state else 'nothing could be read'}",
                          fix="check that weights_repo names the model repository itself, and the free space "
                              f"under {prof.model_path}", host=ctx.host.name)
    record.summary = f"downloaded {prof.weights_repo} at {state.commit[:12]} ({prof.model_path} complete)"


def require_complete_weights(ctx: StepContext) -> None:
    """The server is never started on partial weights (`up --skip-weights` after a cut download, a short mount)."""
    state = weights_state(ctx)
    if state is None or state.complete:
        return
    where = ctx.profile.model_path
    raise CheckFailed(f"not starting sglang: the weights at {where} are incomplete"
                      + (f" ({state.missing_summary()} missing or short)" if state.missing else " (no config.json)"),
                      fix="run `deploy up` without --skip-weights to finish the download"
                          + (f", or complete host directory {ctx.host.container.model_mount}"
                             if ctx.host.container.model_mount else ""),
                      host=ctx.host.name, details={"missing": [m.path for m in state.missing]})


def refuse_import_failure(ctx: StepContext, check: FlagCheck) -> None:
    """A stack whose sglang does not import cannot start a server: refused (exit 2) naming the failing import,
    before any restart, instead of "the parser rejects the flags"."""
    failure = check.import_error
    if failure is None:
        return
    stack = server_stack(ctx)
    where = f"stack {stack.sha} ({stack.venv})" if stack.sha else f"CT {ctx.vmid}"
    raise ConfigError(f"sglang of {where} does not import: {failure.describe()}; its server could not start, so "
                      "nothing was restarted", host=ctx.host.name, fix=failure.fix(ctx.host.profile),
                      details={"import_error": {"exception": failure.exception, "message": failure.message,
                                                "module": failure.module, "distribution": failure.distribution,
                                                "version": failure.version, "chain": list(failure.chain)}})


def require_valid_flags(ctx: StepContext, argv: list[str]) -> FlagCheck:
    check = container_flag_check(ctx, argv)
    if not check.ok:
        refuse_import_failure(ctx, check)
        stack = server_stack(ctx)
        where = f"stack {stack.sha} ({stack.venv})" if stack.sha else f"CT {ctx.vmid}"
        raise ConfigError(f"sglang {check.version} of {where} rejects the flags: {check.error}",
                          fix="fix the flag set (deploy render shows the canonical names); nothing was changed "
                              "(a stack built for it stays, for the next try)",
                          host=ctx.host.name)
    return check
