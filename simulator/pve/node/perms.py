"""Who may change what in a CT's config (pve-container's check_ct_modify_config_perm and the SDN checks).
"""

from __future__ import annotations

import re
from typing import Any

from simulator import ctconf as confmod
from simulator.pve.acl import ROOT_USER
from simulator.pve.errors import PveError
from simulator.pve.node.base import NodeBase


def perm_error(what: str) -> PveError:
    return PveError(f"Permission check failed ({what})", 403)


class NodePerms(NodeBase):
    """The permission checks of config changes beyond the API's per-key privileges."""

    def check_modify_perm(self, user: str, vmid: int, keys: list[str], values: dict[str, Any], unprivileged: bool,
                          old: dict[str, str] | None = None) -> None:
        """pve-container check_ct_modify_config_perm: only root@pam may pass devices, touch privileged features;
        nesting needs VM.Allocate on the CT, a netN bridge SDN.Use on its zone (check_bridge_access, for the old
        and the new value). The per-key VM.Config.* privileges are checked by the API first (api._config_perms)."""
        if user == ROOT_USER:
            return
        from simulator.pve import acl

        old = old or {}
        for key in keys:
            if re.fullmatch(r"dev\d+", key):
                raise perm_error("configuring device passthrough is only allowed for root@pam")
            if key == "hookscript":
                raise perm_error("changing the hookscript is only allowed for root@pam")
            if key == "features":
                if not unprivileged:
                    raise perm_error("changing feature flags for privileged container is only allowed for root@pam")
                new = confmod.split_property(str(values.get(key, "")), "")
                was = confmod.split_property(old.get(key, ""), "")
                changed = {k for k in set(new) | set(was) if new.get(k) != was.get(k)}
                if changed - {"nesting"}:
                    raise perm_error("changing feature flags (except nesting) is only allowed for root@pam")
                if changed:
                    acl.require(self.hp, user, f"/vms/{vmid}", ["VM.Allocate"])
            if re.fullmatch(r"net\d+", key):
                for raw in (old.get(key), values.get(key)):
                    if raw:
                        self._check_bridge_access(user, str(raw))

    def _check_bridge_access(self, user: str, raw: str) -> None:
        """pve-guest-common check_vnet_access: a plain bridge is a vnet of the `localnetwork` zone; SDN.Use on
        the bridge, or on each VLAN tag (`tag=`, `trunks=`) below it."""
        from simulator.pve import acl

        net = confmod.split_property(raw, "name")
        bridge = net.get("bridge")
        if not bridge:
            return
        zone = f"/sdn/zones/localnetwork/{bridge}"
        tags: set[str] = set()
        for part in (net.get("trunks") or "").split(";"):
            lo, _, hi = part.partition("-")
            if lo.isdigit():
                tags.update(str(t) for t in range(int(lo), int(hi or lo) + 1))
        if net.get("tag"):
            acl.require(self.hp, user, f"{zone}/{net['tag']}", ["SDN.Use"])
        for tag in sorted(tags):
            acl.require(self.hp, user, f"{zone}/{tag}", ["SDN.Use"])
        if not (net.get("tag") or tags):
            acl.require(self.hp, user, zone, ["SDN.Use"])
