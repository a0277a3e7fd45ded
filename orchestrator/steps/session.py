"""Session steps: connect with strict host keys, take the host lock, gather every fact in one round trip."""

from __future__ import annotations

from typing import Any

from orchestrator.engine import metrics
from orchestrator.engine.metrics import publishing_command
from orchestrator.engine.step import REGISTRY, StepContext, step
from orchestrator.facts import CT, CtFact, HostFact
from orchestrator.locks.lease import HostLease, takeover_message
from orchestrator.runlog import StepRecord


def ensure_facts(ctx: StepContext) -> None:
    """Gather the union of the playbook's facts once; later steps read them for free."""
    if ctx.facts.gathered:
        return
    # A run that holds the host lock also stops what a dead run left running (its bench), in the same round trip.
    stopping = ctx.host_lock is not None and not ctx.options.dry_run
    host_facts, ct_facts = playbook_facts(ctx.playbook_steps or list(REGISTRY), stopping=stopping)
    ctx.facts.gather(host_facts, ct_facts)
    ctx.facts.gathered = True
    if stopping:
        report_leftovers(ctx)


def playbook_facts(names: list[str], *, stopping: bool) -> tuple[set[HostFact[Any]], set[CtFact[Any]]]:
    """The facts a run of these steps gathers in its first round trip: the union the steps name, and, for a run that
    holds the host lock (`stopping`), the leftover benches' stop and what the lock's release publishes. Also what
    tests/perf/pyinfra_compare.py hands a peer tool, so both read the same things."""
    host_facts: set[HostFact[Any]] = set()
    ct_facts: set[CtFact[Any]] = set()
    for name in names:
        st = REGISTRY.get(name)
        if st is not None:
            host_facts.update(st.host_facts)
            ct_facts.update(st.ct_facts)
    if stopping:
        ct_facts.add(CT.stop_leftovers)
        if publishing_command(names) is not None:  # what the lock's release publishes (steps/metrics.py)
            host_facts.update(metrics.HOST_FACTS)
            ct_facts.update(metrics.CT_FACTS)
    return host_facts, ct_facts


def report_leftovers(ctx: StepContext) -> None:
    for leftover in ctx.facts.get(CT.stop_leftovers) or []:
        ctx.state.stopped_benches.append(leftover)
        ctx.say(leftover.message())


def refresh_ct_facts(ctx: StepContext, *facts: CtFact[Any]) -> None:
    """Re-read container facts after a change (one round trip; after a start, once its boot has settled)."""
    ctx.facts.gather((), facts, what="re-reading container facts")


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
    if h.container.vmid_auto:
        from orchestrator.engine.vmid import resolve_auto_vmid

        resolve_auto_vmid(ctx, record)
        record.summary += f"; CT VMID {ctx.vmid} (auto)"


@step("lock")
def lock(ctx: StepContext, record: StepRecord) -> None:
    """Take the host lock (none in dry-run) and read every fact the playbook needs, in one round trip.

    The lock is a lease that belongs to this run: the fact gathering carries its acquisition, and every later
    remote command carries its renewal, so a command after an SSH reconnect runs only while the host still
    names this run as the holder.
    """
    if not ctx.options.dry_run:
        new = HostLease(ctx.ssh, ctx.options.command, say=ctx.say)
        ctx.host_lock = new
        ctx.cleanups.append(new.release)
        command = publishing_command(ctx.playbook_steps)
        if command is not None:  # published in the release's round trip, also after a failure or a rollback
            new.on_release = lambda: metrics.metrics_script(ctx, command)
        new.arm()
    ensure_facts(ctx)
    lease = ctx.host_lock
    if lease is not None:
        if not lease.held:  # nothing to gather: take it in a round trip of its own
            lease.acquire()
        lease.start_keepalive()
        record.details["lock"] = {"run": lease.run_id, "ttl_s": lease.ttl_s}
        taken = f"lock taken (run {lease.run_id}, lease {lease.ttl_s} s)"
        old = lease.took_over
        if old is not None:
            left = old.expires_in_s
            if old.taken_before_expiry:
                taken += f", from run {old.run}, whose process on this machine is gone"
            else:
                taken += f", after it expired for run {old.run}" + (f" {-left} s ago" if left is not None else "")
            record.details["lock"]["took_over"] = {"run": old.run, "holder": old.holder,
                                                   "expired_s_ago": -left if left is not None else None,
                                                   "proven_dead": old.dead,
                                                   "message": takeover_message(old)}
        record.summary = f"{taken}; "
    record.summary += f"{ctx.facts.count} facts read in one round trip"


@step("unlock")
def unlock(ctx: StepContext, record: StepRecord) -> None:
    """Release the host lock (one round trip: the lease file is removed if it still names this run)."""
    lease = ctx.host_lock
    if lease is None:
        record.status = "skipped"
        record.summary = "dry run: no lock taken" if ctx.options.dry_run else "no lock held"
        return
    ctx.host_lock = None
    record.summary = lease.release()
    if lease.notes:
        record.details["lock_notes"] = list(lease.notes)
    record.details["keepalives"] = lease.keepalives
    if lease.published is not None:
        record.details["metrics"] = lease.published
