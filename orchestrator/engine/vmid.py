"""`vmid: auto`: the container's VMID chosen once from the cluster and recorded on the host's node, so every later
run (from any machine) uses the same one. Resolved by the `connect` step, before any command names the container;
a run that cannot create the container (status, roll, a plan) reads the record and records nothing."""

from __future__ import annotations

import shlex

from orchestrator.engine.step import StepContext
from orchestrator.errors import ConfigError
from orchestrator.facts import CLUSTER_COMMAND
from orchestrator.facts.reads import AUTO_VMID
from orchestrator.inventory.models import Host
from orchestrator.locks.lease import LOCK_DIR
from orchestrator.parsers.pve import AUTO_VMID_MARK
from orchestrator.remote.container import node_read
from orchestrator.runlog import StepRecord
from orchestrator.verdicts.cluster import choose_vmid

#: Where `vmid: auto` keeps the VMID it chose, per inventory host, on the host's node (one number a file).
AUTO_VMID_DIR = f"{LOCK_DIR}/auto-vmid"

#: The steps that create the container: only their playbooks record a new choice.
CREATING_STEPS = ("container",)


def auto_record(host: Host) -> str | None:
    """The node file that records `host`'s auto VMID (None for a host with a number in the inventory)."""
    return f"{AUTO_VMID_DIR}/{host.name}" if host.container.vmid_auto else None


def read_command(path: str) -> str:
    return (f"cat {shlex.quote(path)} 2>/dev/null; echo {AUTO_VMID_MARK}; "
            f"pvesh get /cluster/nextid --output-format json && echo && {CLUSTER_COMMAND}")


def record_command(path: str, vmid: int) -> str:
    tmp = shlex.quote(f"{path}.tmp")
    return (f"mkdir -p {shlex.quote(AUTO_VMID_DIR)} && printf '%s\\n' {int(vmid)} > {tmp} && "
            f"mv {tmp} {shlex.quote(path)}")


def resolve_auto_vmid(ctx: StepContext, record: StepRecord) -> None:
    """Give `ctx` the host's auto VMID: the recorded one, else a free one (recorded when this run may create the
    container and is no dry run). One round trip, two when it records."""
    path = auto_record(ctx.host)
    if path is None:
        return
    read = node_read(ctx.ssh, read_command(path), AUTO_VMID, what="read the auto VMID")
    creates = any(name in ctx.playbook_steps for name in CREATING_STEPS)
    if read.recorded is not None:
        vmid, how = read.recorded, f"recorded in {path}"
    elif not creates:
        raise ConfigError(f"container.vmid is auto and no VMID is recorded for {ctx.host.name} on node "
                          f"{ctx.host.pve.node} ({path} is missing)",
                          fix=f"run `deploy up host {ctx.host.name}` first: it chooses a free VMID and records it",
                          host=ctx.host.name)
    else:
        vmid = choose_vmid(ctx.host, read.cluster, read.nextid, ctx.inventory.hosts)
        if ctx.options.dry_run:
            how = f"free in the cluster now; `up` records it in {path}"
        else:
            ctx.ssh.run(record_command(path, vmid), what="record the auto VMID")
            how = f"chosen from /cluster/nextid and recorded in {path}"
    host = ctx.host.model_copy(update={"container": ctx.host.container.with_vmid(vmid)})
    if read.recorded is not None or not ctx.options.dry_run:  # the node's own record: this machine keeps a copy
        from orchestrator.inventory.auto_vmids import remember

        remember(host, vmid)
    ctx.host = host
    ctx.ssh.host = host
    ctx.facts.host_cfg = host
    ctx.ct.vmid = vmid
    record.details["vmid"] = {"auto": True, "vmid": vmid, "how": how}
    ctx.say(f"container VMID {vmid} (auto: {how})")
