"""The VMIDs `vmid: auto` resolved to, as this machine last read them from the hosts' nodes.

The node's record is the truth (steps/vmid.py reads it in every run's connect step); this copy lets the commands
that name a container without running a playbook first (the router's worker addresses, `metrics sd`, `bench
group`, a fleet roll's router check, `render`) use the same number. One small file per inventory host under
`state_dir()/auto-vmids/`, naming the host's address and node too, so a host that moved is not given another
node's VMID. A machine that never ran `up` or `status` on the host has none: those commands then say so.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.inventory.models import Host, Inventory
from orchestrator.local.files import private_state_dir, read_private_file, write_file


def _path(host: Host) -> Path:
    return private_state_dir() / "auto-vmids" / host.name


def remember(host: Host, vmid: int) -> None:
    """Keep `host`'s resolved auto VMID (a failure to write only costs the other commands their shortcut)."""
    path = _path(host)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, f"{host.address} {host.pve.node} {int(vmid)}\n")
    except OSError:
        pass


def recalled(host: Host) -> int | None:
    """The VMID remembered for `host` at its current address and node, None when there is none."""
    try:
        text = read_private_file(_path(host), "remembered auto VMID")  # a foreign file: a ConfigError, said
        address, node, vmid = (text or "").split()
    except (OSError, ValueError):
        return None
    return int(vmid) if (address, node) == (host.address, host.pve.node) and vmid.isdigit() else None


def with_recalled_vmids(inventory: Inventory) -> Inventory:
    """The inventory with each `vmid: auto` host resolved to its remembered VMID (unchanged when none is auto)."""
    hosts = {}
    for name, host in inventory.hosts.items():
        vmid = recalled(host) if host.container.vmid_auto else None
        hosts[name] = host if vmid is None else host.model_copy(
            update={"container": host.container.with_vmid(vmid)})
    return inventory if hosts == inventory.hosts else inventory.model_copy(update={"hosts": hosts})
