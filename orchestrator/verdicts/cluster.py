"""VMIDs in a Proxmox VE cluster. pmxcfs keeps one VMID list for every node (pve-cluster's check_vmid_unused:
`CT 120 already exists on node 'A'`) while `pct` sees only its own node's CTs, so on node B a CT 120 of node A
reads as absent and a create of it fails half-way through a run. Judged here, from one node's view of its cluster
and the inventory, before any change: pure, no I/O."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.inventory.models import Host
from orchestrator.parsers.pve import ClusterNode, ClusterView

#: PVE's VMID range (pve-cluster's `pve-vmid` format), the lowest the default `/cluster/nextid` gives.
FIRST_VMID = 100
SUGGESTED = 3


def _is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def member_of(view: ClusterView, host: Host) -> ClusterNode | None:
    """The cluster node that inventory host `host` is: its pve.node is a member's name and its address that
    member's IP (an address given as a DNS name cannot be compared, so the name alone decides)."""
    for node in view.nodes:
        if node.name == host.pve.node and (node.ip is None or not _is_ip(host.address) or node.ip == host.address):
            return node
    return None


def cluster_mates(view: ClusterView, me: Host, hosts: Mapping[str, Host]) -> list[Host]:
    """The other inventory hosts that are nodes of this node's cluster (none for a standalone node)."""
    if not view.clustered:
        return []
    return [h for name, h in sorted(hosts.items()) if name != me.name and member_of(view, h) is not None]


def free_vmids(taken: set[int], start: int, count: int = SUGGESTED) -> list[int]:
    """The first `count` VMIDs from `start` up that nothing in the cluster (nor the inventory) takes."""
    out: list[int] = []
    vmid = max(start, FIRST_VMID)
    while len(out) < count:
        if vmid not in taken:
            out.append(vmid)
        vmid += 1
    return out


def choose_vmid(me: Host, view: ClusterView, nextid: int, hosts: Mapping[str, Host]) -> int:
    """A free VMID for `me` (`vmid: auto`, nothing recorded yet): from the cluster's `/cluster/nextid` up, none that
    a guest of the cluster or a numbered inventory host of it has. Several auto hosts of one cluster in one fleet
    run each take another: the k-th free one, k their place among those hosts by name, so hosts that read the
    same list never pick one VMID (each records its pick; the `cluster` step and PVE's create refuse a clash)."""
    mates = cluster_mates(view, me, hosts)
    taken = set(view.guests) | {h.container.vmid for h in mates if not h.container.vmid_auto}
    autos = sorted([h.name for h in mates if h.container.vmid_auto] + [me.name])
    k = autos.index(me.name)
    return free_vmids(taken, nextid, count=k + 1)[k]


@dataclass(frozen=True)
class VmidConflict:
    """Why this host's VMID cannot be used in its cluster, and what to set instead."""

    what: str
    fix: str
    details: dict[str, Any] = field(default_factory=dict)


def vmid_conflict(me: Host, view: ClusterView, hosts: Mapping[str, Host],
                  recorded: str | None = None) -> VmidConflict | None:
    """None when `me`'s container VMID is its own in the cluster: no other inventory host of the cluster uses it
    and no other node has a guest with it. A standalone node has only its own VMIDs, which `pct` sees.
    `recorded`: the node file holding `me`'s auto VMID, named in the fix."""
    if not view.clustered:
        return None
    vmid = me.container.vmid
    mates = cluster_mates(view, me, hosts)
    local = next((n.name for n in view.nodes if n.local), me.pve.node)
    numbered = {h.name: h.container.vmid for h in mates if not h.container.vmid_auto}
    free = free_vmids(set(view.guests) | set(numbered.values()), vmid + 1)
    fix = (f"give each host of cluster {view.name} its own container.vmid (free in the cluster now: "
           f"{', '.join(map(str, free))}) or set `vmid: auto` (docs/inventory.md)"
           + (f"; this host's VMID is auto: delete its record on the node ({recorded}) to choose another"
              if recorded else "") + "; nothing was changed")
    details: dict[str, Any] = {"cluster": view.name, "vmid": vmid, "free_vmids": free}
    same = [name for name, other in numbered.items() if other == vmid]
    if same:
        return VmidConflict(
            f"hosts {me.name} and {', '.join(same)} are nodes of one Proxmox cluster ({view.name}) and both use "
            f"VMID {vmid}: VMIDs are unique across a cluster, so only one of them could have CT {vmid} (PVE "
            f"refuses the other's create: `CT {vmid} already exists on node '…'`)",
            fix, {**details, "hosts": [me.name, *same]})
    owner = view.guests.get(vmid)
    if owner is not None and owner != local:
        host = next((h.name for h in hosts.values() if h.pve.node == owner and h.name != me.name), None)
        named = f" (inventory host {host})" if host else ""
        return VmidConflict(
            f"VMID {vmid} of host {me.name} belongs to a guest on node {owner}{named} of cluster {view.name}: "
            f"VMIDs are unique across a cluster, `pct` on {local} cannot see it, and PVE refuses a create "
            f"(`CT {vmid} already exists on node '{owner}'`)",
            fix, {**details, "node": owner, **({"hosts": [me.name, host]} if host else {})})
    return None
