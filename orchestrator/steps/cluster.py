"""The node's Proxmox cluster, checked before any change: quorum (without it /etc/pve is read-only and PVE refuses
every change) and a VMID that is this host's own across the cluster (orchestrator/verdicts/cluster.py)."""

from __future__ import annotations

from orchestrator.engine.step import StepContext, step
from orchestrator.engine.vmid import auto_record
from orchestrator.errors import ConfigError, RemoteError
from orchestrator.facts import HOST
from orchestrator.parsers.pve import ClusterView
from orchestrator.remote.pve import NO_QUORUM, QUORUM_FIX
from orchestrator.runlog import StepRecord
from orchestrator.steps.session import ensure_facts
from orchestrator.verdicts.cluster import cluster_mates, vmid_conflict


def no_quorum_error(node: str, cluster: str | None, host: str) -> RemoteError:
    """A lost quorum, named: every change on the node fails until it is back."""
    return RemoteError(
        f"node {node} of cluster {cluster or '?'} has no quorum: /etc/pve is read-only, so PVE refuses every change "
        f"to a container (`{NO_QUORUM}`)",
        fix=f"{QUORUM_FIX}. Nothing was changed",
        host=host, details={"cause": "no-quorum", "cluster": cluster, "node": node})


def _local(view: ClusterView, default: str) -> str:
    return next((n.name for n in view.nodes if n.local), default)


@step("cluster", host_facts=(HOST.cluster,))
def cluster(ctx: StepContext, record: StepRecord) -> None:
    """In a PVE cluster: the node has quorum, and the container's VMID is this host's own across the cluster (no
    other node has it, no other inventory host of the cluster uses it); refused before any change."""
    ensure_facts(ctx)
    view = ctx.facts.get(HOST.cluster)
    if view is None:
        record.summary = "cluster membership not readable (pvesh /cluster/status failed); VMIDs not cross-checked"
        return
    if not view.clustered:
        record.summary = "standalone node"
        return
    node = _local(view, ctx.host.pve.node)
    mates = cluster_mates(view, ctx.host, ctx.inventory.hosts)
    record.details["cluster"] = {"name": view.name, "nodes": [n.name for n in view.nodes], "quorate": view.quorate,
                                 "inventory_hosts": [h.name for h in mates]}
    if not view.quorate:
        raise no_quorum_error(node, view.name, ctx.host.name)
    conflict = vmid_conflict(ctx.host, view, ctx.inventory.hosts, auto_record(ctx.host))
    if conflict is not None:
        raise ConfigError(conflict.what, fix=conflict.fix, host=ctx.host.name, details=conflict.details)
    record.summary = (f"node {node} of cluster {view.name} ({len(view.nodes)} nodes, quorate); VMID "
                      f"{ctx.host.container.vmid} is this host's own")
