"""Session steps: connect with strict host keys, take the host lock, gather every fact in one round trip."""

from __future__ import annotations

from orchestrator.parsers.leftovers import parse_leftovers
from orchestrator.remote.lock import HostLock
from orchestrator.runlog import StepRecord
from orchestrator.steps.base import REGISTRY, StepContext, step


def ensure_facts(ctx: StepContext) -> None:
    """Gather the union of the playbook's facts once; later steps read them for free."""
    if ctx.facts.gathered:
        return
    names = ctx.playbook_steps or list(REGISTRY)
    host_facts: set[str] = set()
    ct_facts: set[str] = set()
    for name in names:
        st = REGISTRY.get(name)
        if st is not None:
            host_facts.update(st.host_facts)
            ct_facts.update(st.ct_facts)
    # A run that holds the host lock also stops what a dead run left running (its bench), in the same round trip.
    stopping = ctx.host_lock is not None and not ctx.options.dry_run
    if stopping:
        ct_facts.add("stop_leftovers")
    ctx.facts.gather(host_facts, ct_facts)
    ctx.facts.gathered = True
    if stopping:
        report_leftovers(ctx)


def report_leftovers(ctx: StepContext) -> None:
    out = ctx.facts.c("stop_leftovers")
    if out is None:
        return
    for leftover in parse_leftovers(out.stdout):
        ctx.state.stopped_benches.append(leftover)
        ctx.say(leftover.message())


def refresh_ct_facts(ctx: StepContext, *names: str, settle_boot: bool = False) -> None:
    """Re-read container facts after a change (one round trip; after a start, once its boot has settled)."""
    ctx.facts.gather((), names, what="re-reading container facts", settle_boot=settle_boot)


def unknown_until_started(ctx: StepContext, record: StepRecord, what: str) -> bool:
    """In a plan, a stopped container hides its inside: say so instead of predicting a reinstall.

    `up` starts the container first (step container) and only then reads these facts, so a plan that guessed
    from the missing facts would predict changes `up` never makes. Returns True when the step should stop here.
    """
    if not (ctx.options.dry_run and ctx.facts.ct_stopped):
        return False
    record.status = "skipped"
    record.summary = f"CT {ctx.vmid} is {ctx.facts.ct_state}: {what} is read once `up` has started it"
    record.details["checked_after_start"] = True
    return True


@step("connect")
def connect(ctx: StepContext, record: StepRecord) -> None:
    """Open the SSH connection (strict host key checking unless --tofu)."""
    ctx.ssh.connect()
    h = ctx.host
    record.summary = f"{h.ssh.user}@{h.address}:{h.ssh.port}" + (" (TOFU)" if ctx.options.tofu else "")


@step("lock")
def lock(ctx: StepContext, record: StepRecord) -> None:
    """Take the host lock (none in dry-run), then read every fact the playbook needs in one round trip."""
    if not ctx.options.dry_run:
        host_lock = HostLock(ctx.ssh, ctx.options.command)
        host_lock.acquire()
        ctx.cleanups.append(host_lock.release)
        ctx.host_lock = host_lock
        record.summary = "lock taken; "
    ensure_facts(ctx)
    record.summary += f"{len(ctx.facts.host) + len(ctx.facts.ct)} facts read in one round trip"


@step("unlock")
def unlock(ctx: StepContext, record: StepRecord) -> None:
    """Release the host lock."""
    host_lock, ctx.host_lock = ctx.host_lock, None
    if host_lock is not None:
        host_lock.release()
        record.summary = "lock released"
    else:
        record.status = "skipped"
