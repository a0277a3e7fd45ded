"""doctor's `power-limit` check: the limit in force is the one deploy recorded, and its unit will re-apply it.

Why: a limit set with `nvidia-smi -pl` is gone after a reboot or a driver reload, silently; the unit
(render/power_unit.py) is the record and the cure. A drift is a warning, not a failure: the GPUs work, only at
another power (and speed) than the one chosen. Pure: facts in, one Finding out.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.hardware.power_limit import GpuPowerLimit, in_force, selected
from orchestrator.render.boot_unit import BootUnitState
from orchestrator.render.power_unit import UNIT_NAME, PowerSetting, recorded
from orchestrator.verdicts.host import Finding

CHECK = "power-limit"


def _now(gpus: Sequence[GpuPowerLimit]) -> str:
    limits = sorted({g.limit_w for g in gpus if g.limit_w is not None})
    return " / ".join(f"{w:g} W" for w in limits) or "N/A"


def power_finding(gpus: Sequence[GpuPowerLimit] | None, unit: BootUnitState | None, inventory_w: int | None,
                  host: str) -> Finding:
    if gpus is None:
        return Finding(CHECK, "warn", "could not read the GPUs' power limits (nvidia-smi failed)",
                       "see the driver check above")
    record = recorded(unit)
    apply = f"deploy power host {host} --set {{w}}"
    if inventory_w is not None and (record is None or record.watts != inventory_w or record.indices):
        return Finding(CHECK, "warn", f"the inventory's power_limit_w {inventory_w} W is not the host's record ("
                       + (record.describe() if record else f"no {UNIT_NAME}") + f"); in force: {_now(gpus)}",
                       apply.format(w=inventory_w) + " (or `deploy up`)")
    if record is None:
        return Finding(CHECK, "ok", f"not managed: {len(gpus)} GPU(s) at {_now(gpus)} (their own limit)")
    if unit is not None and not unit.enabled:
        return Finding(CHECK, "warn", f"{UNIT_NAME} records {record.describe()} but is not enabled: a reboot "
                       "will not re-apply it", f"ssh root@{host} systemctl enable {UNIT_NAME}")
    if not in_force(gpus, record.watts, record.indices):
        off = [g for g in selected(gpus, record.indices) if g.limit_w is None or abs(g.limit_w - record.watts) >= 0.5]
        return Finding(CHECK, "warn", f"recorded {record.describe()}, but "
                       + ", ".join(f"GPU {g.index} is at {_w(g.limit_w)}" for g in off)
                       + " (a driver reload or a reboot the unit did not follow?)",
                       f"ssh root@{host} systemctl restart {UNIT_NAME} (re-applies it), or "
                       + apply.format(w=record.watts))
    return Finding(CHECK, "ok", f"{record.describe()} in force, kept by {UNIT_NAME} (enabled)")


def _w(v: float | None) -> str:
    return "N/A" if v is None else f"{v:g} W"


__all__ = ["CHECK", "PowerSetting", "power_finding"]
