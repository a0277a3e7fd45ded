"""`power_limit`: the GPUs' power limit set on the node, read back, and persisted by its host unit.

The wanted limit is the command's (`deploy power --set`, a tune's power phase) or the inventory's `power_limit_w`;
none of them leaves the GPUs alone. A value outside any GPU's range is refused (exit 2) before anything changes,
with the range named; nvidia-smi's own refusal, should the range move under us, stops the step with its line."""

from __future__ import annotations

from orchestrator.engine.step import StepContext, mark_change, step
from orchestrator.errors import CheckFailed, ConfigError
from orchestrator.facts import HOST
from orchestrator.facts.reads import POWER_LIMITS, power_set
from orchestrator.hardware.power_limit import (
    QUERY_COMMAND,
    GpuPowerLimit,
    common_range,
    in_force,
    refusal,
    set_command,
)
from orchestrator.remote.container import node_read, node_read_script
from orchestrator.render.boot_unit import BootUnitState
from orchestrator.render.power_unit import UNIT_NAME, PowerSetting, apply_script, recorded, render_power_unit
from orchestrator.runlog import StepRecord
from orchestrator.steps.session import ensure_facts


def wanted_setting(ctx: StepContext) -> PowerSetting | None:
    if ctx.inputs.power_limit is not None:
        return ctx.inputs.power_limit
    w = ctx.host.power_limit_w
    return PowerSetting(w) if w is not None else None


def refuse_out_of_range(gpus: list[GpuPowerLimit], want: PowerSetting, host: str) -> None:
    """Exit 2, nothing changed, when a GPU does not allow the wanted limit (each GPU's range named)."""
    why = refusal(gpus, want.watts, want.indices)
    if why is not None:
        span = common_range(gpus)
        raise ConfigError(f"power limit refused, nothing changed: {why}",
                          fix=(f"pick a limit from {span[0]:g} to {span[1]:g} W" if span else
                               "these GPUs have no software power limit"), host=host)


@step("power_limit", host_facts=(HOST.power_limits, HOST.power_unit))
def power_limit(ctx: StepContext, record: StepRecord) -> None:
    """Set the GPUs' power limit (nvidia-smi -pl), read it back, and keep it with a host unit across reboots."""
    ensure_facts(ctx)
    gpus = ctx.facts.get(HOST.power_limits)
    unit = ctx.facts.get(HOST.power_unit) or BootUnitState(False, None)
    ctx.state.power_limits = list(gpus or [])
    ctx.state.power_recorded = recorded(unit)
    want = wanted_setting(ctx)
    if gpus is None:
        raise CheckFailed(f"could not read the GPUs' power limits (`{QUERY_COMMAND}` failed)",
                          fix=f"`deploy doctor host {ctx.host.name}`: is the driver loaded?", host=ctx.host.name)
    record.details["gpus"] = [g.to_dict() for g in gpus]
    if want is None:
        now = sorted({f"{g.limit_w:g} W" if g.limit_w is not None else "N/A" for g in gpus})
        record.summary = f"not managed (no power_limit_w): {len(gpus)} GPU(s) at {' / '.join(now)}"
        return
    refuse_out_of_range(gpus, want, ctx.host.name)
    text = render_power_unit(want)
    record.details["unit"] = UNIT_NAME
    record.details["wanted"] = {"watts": want.watts, "indices": list(want.indices) if want.indices else None}
    if in_force(gpus, want.watts, want.indices) and (not want.persist or unit.in_place(text)):
        record.summary = f"{want.describe()} in force" + (f", kept by {UNIT_NAME}" if want.persist else "")
        return
    before = ", ".join(f"GPU {g.index} {g.limit_w:g} W" for g in gpus if g.limit_w is not None)
    what = f"power limit {want.describe()} (now {before})" + (
        f"; {UNIT_NAME} re-applies it at boot and driver load" if want.persist else " (not persisted)")
    if not mark_change(record, ctx, what):
        record.summary = what
        return
    script = apply_script(want) if want.persist else set_command(want.watts, want.indices)
    done = node_read_script(ctx.ssh, script, power_set, what=f"set the GPU power limit to {want.watts} W")
    if not done.ok or done.said.refused:
        lines = "; ".join(done.said.refused) or done.words
        raise CheckFailed(f"nvidia-smi refused the power limit: {lines}",
                          fix="run as root on the node; `nvidia-smi -q -d POWER` shows each GPU's range",
                          host=ctx.host.name)
    back = node_read(ctx.ssh, QUERY_COMMAND, POWER_LIMITS, check=True,
                     what="read back the power limits")
    ctx.state.power_limits = back
    if want.persist:
        ctx.state.power_recorded = want
    record.details["gpus"] = [g.to_dict() for g in back]
    if not in_force(back, want.watts, want.indices):
        raise CheckFailed(f"the power limit read back is not {want.watts} W: "
                          + ", ".join(f"GPU {g.index} {g.limit_w} W" for g in back), host=ctx.host.name)
    record.summary = f"{want.describe()} set and read back" + (f"; {UNIT_NAME} enabled" if want.persist else "")
