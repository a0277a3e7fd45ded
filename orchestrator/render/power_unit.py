"""The host unit that holds the GPUs' power limit: `nvidia-smi -pl W` at every boot and after every driver load.

Why a unit: the limit `nvidia-smi -pl` sets lives in the driver. A reboot, or an unload and reload of the nvidia
module (a driver update, `rmmod nvidia`, a GPU reset with no persistence daemon holding it) puts every GPU back to
its default limit, silently. So the unit is the record of the limit deploy set (its `ExecStart=` line is what
doctor compares with the limit in force) and the way it comes back:
- at boot: `WantedBy=multi-user.target`, ordered after the driver (systemd-modules-load, nvidia-persistenced, and
  deploy's own node unit, render/boot_unit.py, which makes the nodes NVML needs) and `Before=pve-guests.service`,
  so the containers' servers start under the cap, never at full power first;
- after a module reload: a udev rule on the module's `add` event restarts the unit (`--no-block`: udev must not
  wait on systemd). A oneshot with `RemainAfterExit=yes` runs its `ExecStart=` again on restart.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.hardware.power_limit import set_command
from orchestrator.render.boot_unit import UNIT_NAME as NODES_UNIT
from orchestrator.render.boot_unit import BootUnitState, install_script

UNIT_NAME = "deploy-gpu-power.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
UDEV_RULES_DIR = "/etc/udev/rules.d"
UDEV_RULE_PATH = f"{UDEV_RULES_DIR}/71-deploy-gpu-power.rules"
UDEV_RULE = ('# Written by deploy: re-apply the GPU power limit whenever the nvidia module is (re)loaded.\n'
             f'ACTION=="add", SUBSYSTEM=="module", KERNEL=="nvidia", '
             f'RUN+="/bin/systemctl --no-block restart {UNIT_NAME}"\n')
_EXEC = re.compile(r"^ExecStart=nvidia-smi (?:-i (?P<ids>[\d,]+) )?-pl (?P<w>\d+)\s*$", re.M)


@dataclass(frozen=True)
class PowerSetting:
    """The limit a unit records: watts, on these GPU indices (None: every GPU)."""

    watts: int
    indices: tuple[int, ...] | None = None
    #: False: set it now and leave the unit alone (a tune's trial limit, or its restore of the limits it found).
    persist: bool = True

    def describe(self) -> str:
        on = f"GPU {','.join(map(str, self.indices))}" if self.indices else "every GPU"
        return f"{self.watts} W on {on}"


def render_power_unit(setting: PowerSetting) -> str:
    return ("# Written by deploy: the GPU power limit it set; re-applied at boot and after a driver reload.\n"
            "# See docs/power.md. `deploy power` rewrites it.\n"
            "[Unit]\n"
            f"Description=GPU power limit {setting.describe()} (nvidia-smi -pl), set by deploy\n"
            f"After=systemd-modules-load.service nvidia-persistenced.service {NODES_UNIT}\n"
            "Before=pve-guests.service\n"
            "\n"
            "[Service]\n"
            "Type=oneshot\n"
            "RemainAfterExit=yes\n"
            f"ExecStart={set_command(setting.watts, setting.indices)}\n"
            "\n"
            "[Install]\n"
            "WantedBy=multi-user.target\n")


def recorded(state: BootUnitState | None) -> PowerSetting | None:
    """The limit the host's unit records (None: no unit, or one deploy did not write)."""
    if state is None or state.text is None:
        return None
    m = _EXEC.search(state.text)
    if m is None:
        return None
    ids = tuple(int(i) for i in m.group("ids").split(",")) if m.group("ids") else None
    return PowerSetting(int(m.group("w")), ids)


def apply_script(setting: PowerSetting, indices: Sequence[int] | None = None) -> str:
    """Set the limit now, then write and enable the unit and the udev rule: one round trip. `set -e`: a refusal
    by nvidia-smi stops before the unit records a limit the GPUs do not have."""
    rule = (f"if [ -d {UDEV_RULES_DIR} ]; then printf '%s' {shlex.quote(UDEV_RULE)} > {UDEV_RULE_PATH}; "
            "udevadm control --reload-rules 2>/dev/null || true; fi\n")
    return (f"set -e\n{set_command(setting.watts, setting.indices if indices is None else indices)}\n"
            + install_script(render_power_unit(setting), UNIT_NAME).removeprefix("set -e\n") + rule)


__all__ = ["UDEV_RULE", "UDEV_RULE_PATH", "UNIT_NAME", "UNIT_PATH", "PowerSetting", "apply_script", "recorded",
           "render_power_unit"]
