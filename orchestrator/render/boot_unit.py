"""The host unit that recreates the NVIDIA device nodes at every boot, before pve-guests starts the containers.

Why: after a host reboot the NVIDIA module is loaded, but it makes no device node and the `.run` driver ships no
udev rule: /dev/nvidia0..N, /dev/nvidiactl, /dev/nvidia-uvm(-tools), /dev/nvidia-modeset and /dev/nvidia-caps/*
exist only once something ran `nvidia-modprobe` (NVML does for nvidiaN and nvidiactl: the first `nvidia-smi`, or
nvidia-persistenced, which does not load nvidia-uvm). pve-container stats every `devN` path when it writes the
container's LXC config, so an `onboot: 1` container whose `devN` names a missing node fails at boot with
`Device /dev/nvidia0 does not exist` and the server stays down.

Why a host unit ordered `Before=pve-guests.service`, not a PVE hookscript (`hookscript:` with a `pre-start`
phase), although a hookscript runs at every start:

- A hookscript cannot do it. pve-container's `vm_start` calls `update_lxc_config` (which dies on the missing
  `devN` path) BEFORE it runs the `pre-start` hook (PVE/LXC.pm, `vm_start`): the start fails before the hook runs.
- A hookscript lives in a `snippets` storage that must exist and be enabled, is set per container (`hookscript:`
  in each CT's config; a restored or recreated CT loses it), and only root@pam may set it, so an API token cannot.
- The unit is one file on the host, covers every container at once, runs once per boot before pve-guests (whose
  `startall` is what starts `onboot` guests), and is idempotent: nvidia-modprobe only makes what is missing.

`nvidia-modprobe -c0 … -c7 -c255` makes /dev/nvidia0..7 and /dev/nvidiactl (nvidia-modprobe names minor 255
nvidiactl; with `-u` the same `-c` makes uvm nodes instead, so the GPU nodes are a call of their own, first);
`nvidia-modprobe -u -c0` makes /dev/nvidia-uvm (minor 0) and /dev/nvidia-uvm-tools (minor 1); `-m` makes
/dev/nvidia-modeset; `-f /proc/driver/nvidia/capabilities/mig/config|monitor` makes nvidia-cap1|2. The unit makes
the nodes the container is given (the host's listing when `up` ran), so a reboot never adds a node the container
was not configured with. A bare `nvidia-modprobe` is found in systemd's fixed search path (/usr/bin for the
`.run` driver). It is ordered `After=nvidia-persistenced.service`: where the host runs nvidia-persistenced (not
ordered before pve-guests by its own unit), systemd then starts it, and its nodes, before this unit and the guests,
and the two never mknod the same node at once; without it the ordering is a no-op. It is
`WantedBy=multi-user.target`, not `RequiredBy=pve-guests.service`: a failure must not stop the host's other guests
from starting.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.parsers.devices import DeviceNode

UNIT_NAME = "deploy-nvidia-nodes.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
#: /dev/nvidia-caps/nvidia-capN → the capability file nvidia-modprobe -f reads for it (the driver's fixed minors).
CAP_FILES = {"/dev/nvidia-caps/nvidia-cap1": "/proc/driver/nvidia/capabilities/mig/config",
             "/dev/nvidia-caps/nvidia-cap2": "/proc/driver/nvidia/capabilities/mig/monitor"}
#: nvidia-modprobe's minor for /dev/nvidiactl (NV_CTL_DEVICE_NUM).
CTL_MINOR = 255
_GPU_NODE = re.compile(r"/dev/nvidia(\d+)")


def exec_lines(nodes: Sequence[DeviceNode]) -> list[str]:
    """The nvidia-modprobe calls that make these nodes: the GPU nodes and nvidiactl first, then nvidia-uvm's
    (always: CUDA needs it), modeset and the caps."""
    paths = {n.path for n in nodes}
    gpus = sorted(int(m.group(1)) for p in paths if (m := _GPU_NODE.fullmatch(p)))
    minors = [*gpus, CTL_MINOR] if gpus or "/dev/nvidiactl" in paths else []
    lines = ["nvidia-modprobe " + " ".join(f"-c{m}" for m in minors)] if minors else []
    lines.append("nvidia-modprobe -u -c0")
    if "/dev/nvidia-modeset" in paths:
        lines.append("nvidia-modprobe -m")
    caps = [f"-f {proc}" for dev, proc in CAP_FILES.items() if dev in paths]
    if caps:
        lines.append("nvidia-modprobe " + " ".join(caps))
    return lines


def render_boot_unit(nodes: Sequence[DeviceNode]) -> str:
    execs = "".join(f"ExecStart={line}\n" for line in exec_lines(nodes))
    return ("# Written by deploy: the NVIDIA nodes the GPU containers pass through (devN) exist after a boot only\n"
            "# once nvidia-modprobe ran; PVE refuses to start a container whose devN path is missing. See docs/up.md.\n"
            "[Unit]\n"
            "Description=NVIDIA device nodes for GPU containers (GPUs, nvidiactl, uvm, caps) before PVE starts guests\n"
            "After=systemd-modules-load.service nvidia-persistenced.service\n"
            "Before=pve-guests.service\n"
            "\n"
            "[Service]\n"
            "Type=oneshot\n"
            "RemainAfterExit=yes\n"
            f"{execs}"
            "\n"
            "[Install]\n"
            "WantedBy=multi-user.target\n")


@dataclass(frozen=True)
class BootUnitState:
    """The unit as the host has it: enabled (a boot starts it) and its text (None: no file)."""

    enabled: bool
    text: str | None

    def in_place(self, wanted: str) -> bool:
        return self.enabled and self.text == wanted


#: Between `systemctl is-enabled` and the file in the `boot_unit` host fact.
SEPARATOR = "--- deploy boot unit ---"


def boot_unit_fact(name: str = UNIT_NAME) -> str:
    """Host fact: whether the unit `name` is enabled, then its file (nothing when absent); parse_boot_unit reads it
    (the power unit, render/power_unit.py, is read the same way)."""
    return (f"systemctl is-enabled {name} 2>/dev/null; echo '{SEPARATOR}'; "
            f"cat /etc/systemd/system/{name} 2>/dev/null; true")


def parse_boot_unit(text: str) -> BootUnitState:
    head, sep, body = text.partition(SEPARATOR + "\n")
    if not sep:
        return BootUnitState(False, None)
    return BootUnitState(head.strip() == "enabled", body if body else None)


def install_script(text: str, name: str = UNIT_NAME) -> str:
    """Write the unit `name`, reload systemd, enable it: one round trip, idempotent."""
    path = f"/etc/systemd/system/{name}"
    return (f"set -e\nprintf '%s' {shlex.quote(text)} > {path}.deploy-tmp\n"
            f"mv -f {path}.deploy-tmp {path}\n"
            f"systemctl daemon-reload\nsystemctl enable {name}\n")
