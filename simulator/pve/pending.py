"""Pending config changes, as pve-container's update_pct_config / vmconfig_hotplug_pending /
vmconfig_apply_pending (src/PVE/LXC/Config.pm) handle them.

Every change goes to the `[pve:pending]` section first. On a stopped container it is applied at once; on a running
one only the keys PVE can change live are applied and the rest stay pending until the next start, which applies
them. `GET config` shows pending values unless `current=1`; `GET pending` lists current, pending and deletions.
"""

from __future__ import annotations

import re
from typing import Any

from simulator.ctconf import CtConf
from simulator.pve.errors import PveError

#: $LXC_FASTPLUG_OPTIONS: copied into the config of a running container as they are.
FASTPLUG = frozenset({"description", "onboot", "startup", "protection", "hostname", "hookscript", "cores", "tags",
                      "lock"})
#: Values vmconfig_hotplug_pending changes on a running container (cgroup limits, veth update; mpN/devN only
#: when new: an existing mount point or device stays pending).
HOTPLUG_SET = re.compile(r"^(cpulimit|cpuunits|memory|swap|net\d+|mp\d+|dev\d+)$")
ADD_ONLY = re.compile(r"^(mp|dev)\d+$")
#: Deletions it applies on a running container (the others, devN and mpN included, stay pending).
HOTPLUG_DELETE = re.compile(r"^(unused\d+|swap|cpulimit|cpuunits|net\d+)$")
REQUIRED = ("memory", "rootfs", "ostype")


def stays_pending(key: str, conf: CtConf, delete: bool = False) -> bool:
    """Whether changing (or deleting) `key` on a running container leaves it pending until the next start."""
    if key in FASTPLUG:
        return False
    if delete:
        return not HOTPLUG_DELETE.match(key)
    if ADD_ONLY.match(key):
        return key in conf.options
    return not HOTPLUG_SET.match(key)


def update(conf: CtConf, values: dict[str, str], delete: list[str], running: bool) -> None:
    """Write `values` and `delete` into the pending section, then apply what the container's state allows."""
    for opt in delete:
        if opt not in conf.options and opt not in conf.pending and not (opt == "description" and conf.description):
            continue  # PVE warns "cannot delete '<opt>' - not set in current configuration!" and goes on
        if opt in REQUIRED:
            raise PveError(f"unable to delete required option '{opt}'")
        if opt == "unprivileged":
            raise PveError(f"unable to delete read-only option: '{opt}'")
        conf.pending.pop(opt, None)
        if opt not in conf.pending_delete:
            conf.pending_delete.append(opt)
    for key, value in values.items():
        if key == "unprivileged":
            raise PveError(f"unable to modify read-only option: '{key}'")
        conf.pending[key] = value
        if key in conf.pending_delete:
            conf.pending_delete.remove(key)
    _cleanup(conf)
    if running:
        _hotplug(conf)
    else:
        apply(conf)


def _current(conf: CtConf, key: str) -> str | None:
    if key == "description":
        return conf.description or None
    return conf.options.get(key)


def _set(conf: CtConf, key: str, value: str) -> None:
    if key == "description":
        conf.description = value
    else:
        conf.options[key] = value


def _drop(conf: CtConf, key: str) -> None:
    if key == "description":
        conf.description = ""
    conf.options.pop(key, None)


def _cleanup(conf: CtConf) -> None:
    """cleanup_pending: a pending value equal to the current one, or a deletion of an unset key, is no change."""
    for key in [k for k, v in conf.pending.items() if _current(conf, k) == v]:
        del conf.pending[key]
    conf.pending_delete = [k for k in conf.pending_delete if _current(conf, k) is not None]


def _hotplug(conf: CtConf) -> None:
    for key in list(conf.pending_delete):
        if not stays_pending(key, conf, delete=True):
            _drop(conf, key)
            conf.pending_delete.remove(key)
    for key in sorted(conf.pending):
        if not stays_pending(key, conf):
            _set(conf, key, conf.pending.pop(key))


def apply(conf: CtConf) -> None:
    """vmconfig_apply_pending: everything pending becomes current (a stopped container, or at start)."""
    for key in conf.pending_delete:
        _drop(conf, key)
    for key in sorted(conf.pending):
        _set(conf, key, conf.pending[key])
    conf.pending.clear()
    conf.pending_delete.clear()


def with_pending(conf: CtConf) -> CtConf:
    """load_current_config without `current`: the config as it will be after the next start."""
    view = CtConf(options=dict(conf.options), lxc=list(conf.lxc), description=conf.description,
                  pending=dict(conf.pending), pending_delete=list(conf.pending_delete))
    apply(view)
    return view


def pending_list(conf: CtConf, digest: str) -> list[dict[str, Any]]:
    """GET .../pending (PVE::GuestHelpers::config_with_pending_array): one entry per key."""
    current: dict[str, str] = dict(conf.options)
    if conf.description:
        current["description"] = conf.description
    current["digest"] = digest
    out: list[dict[str, Any]] = []
    for key in sorted(set(current) | set(conf.pending) | set(conf.pending_delete)):
        item: dict[str, Any] = {"key": key}
        if key in current:
            item["value"] = current[key]
        if key in conf.pending:
            item["pending"] = conf.pending[key]
        if key in conf.pending_delete:
            item["delete"] = 1
        out.append(item)
    return out
