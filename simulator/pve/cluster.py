"""A Proxmox VE cluster of simulated nodes (`deploy sim up --cluster NAME`).

The shared registry is the root itself: the nodes of one cluster are the hosts under the same root whose
host.json names that cluster. What pmxcfs makes cluster-wide on a real cluster follows from that: one VMID list
(every member's `/etc/pve/nodes/<node>/lxc/*.conf`, pve-cluster's vmlist), creation of a VMID under one lock for
the whole cluster (`check_vmid_unused`), and any node's API serving `/nodes/<other>/…`. A host without a cluster
is a standalone node, exactly as before: its only member is itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from simulator.config import HostConfig, HostPaths, locked

#: pve-cluster's text when /etc/pve is read-only because the node is not in the quorate partition.
NO_QUORUM = "cluster not ready - no quorum?"


def _config(hp: HostPaths) -> HostConfig | None:
    try:
        return hp.load()
    except (OSError, ValueError):
        return None


def members(hp: HostPaths) -> list[HostPaths]:
    """Every node of hp's cluster (hp included), by name; [hp] for a standalone node."""
    cfg = _config(hp)
    if cfg is None or not cfg.cluster:
        return [hp]
    out = []
    for sibling in sorted(hp.dir.parent.iterdir()) if hp.dir.parent.is_dir() else []:
        other = HostPaths(sibling)
        if not other.config.is_file():
            continue
        if other.dir == hp.dir or ((c := _config(other)) is not None and c.cluster == cfg.cluster):
            out.append(other)
    return out


def member(hp: HostPaths, node: str) -> HostPaths | None:
    """The member whose PVE node name is `node` (None: no such node in hp's cluster)."""
    for m in members(hp):
        cfg = _config(m)
        if cfg is not None and cfg.node == node:
            return m
    return None


def vmid_owner(hp: HostPaths, vmid: int) -> str | None:
    """The node that has CT `vmid` anywhere in hp's cluster (pve-cluster's vmlist), None when it is unused."""
    for m in members(hp):
        if m.conf(vmid).is_file():
            cfg = _config(m)
            return cfg.node if cfg is not None else m.name
    return None


def used_vmids(hp: HostPaths) -> dict[int, str]:
    """Every VMID of the cluster and its node."""
    out: dict[int, str] = {}
    for m in members(hp):
        cfg = _config(m)
        node = cfg.node if cfg is not None else m.name
        if m.lxc_conf_dir.is_dir():
            out.update({int(p.stem): node for p in m.lxc_conf_dir.glob("*.conf") if p.stem.isdigit()})
    return out


def quorate(hp: HostPaths) -> bool:
    """Whether this node is in the quorate partition (the `no_quorum` host fault says it is not)."""
    cfg = _config(hp)
    return cfg is None or not cfg.faults.no_quorum


@contextmanager
def vmid_lock(hp: HostPaths) -> Iterator[None]:
    """One lock for VMID allocation across the cluster (a standalone node's own), as pmxcfs's cluster lock."""
    cfg = _config(hp)
    name = cfg.cluster if cfg is not None and cfg.cluster else None
    path = hp.dir.parent.parent / "clusters" / f"{name}.vmids" if name else hp.dir / "locks" / "vmids"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with locked(path):
        yield
