"""`deploy status` on one host as a typed function: the status playbook (one round trip) and its judgement."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.commands.result import HostRequest, ViewResult
from orchestrator.engine.runner import ProgressFn, run_playbook
from orchestrator.engine.state import ServerStatus
from orchestrator.engine.step import RunOptions
from orchestrator.errors import DeployError
from orchestrator.hardware.state import HardwareState
from orchestrator.inventory.models import Inventory


@dataclass(frozen=True)
class StatusResult(ViewResult):
    """What the status step read (`info`) and the GPUs' hardware state; healthy or not, and why."""

    info: ServerStatus
    hardware: HardwareState | None

    @property
    def gave_up(self) -> bool:
        """The watchdog spent its restart budget: the server may be stuck."""
        return self.info.watchdog is not None and self.info.watchdog.exhausted

    @property
    def blind(self) -> str:
        """Why the watchdog of a running container does not watch ('' when it does)."""
        wd = self.info.watchdog
        return wd.failing if wd is not None and self.info.container_running else ""

    @property
    def healthy(self) -> bool:
        return (self.info.health == "200" and not self.gave_up and not self.blind
                and not (self.hardware is not None and self.hardware.fatal))

    @property
    def exit_code(self) -> int:
        return 0 if self.healthy else 1

    def payload(self) -> dict[str, Any]:
        return {"ok": self.healthy, "host": self.report.host, **self.info.to_dict(), "totals": self.totals}

    def detail(self) -> str:
        info = self.info
        return (f"release {info.release or 'none'} ({info.verdict or 'unverified'}), "
                f"sglang {info.active or '-'}, /health {info.health or '-'}"
                + (f", watchdog {info.watchdog.state}" if info.watchdog is not None else "")
                + hardware_detail(self.hardware))


def hardware_detail(state: HardwareState | None) -> str:
    """", GPU hardware: GPU 2 reboot_host" when a GPU has a fault, else nothing."""
    faulty = state.faulty if state is not None else ()
    if not faulty:
        return ""
    return ", GPU hardware: " + ", ".join(
        f"GPU {g.index if g.index is not None else g.bus_id} {g.action.value}" for g in faulty)


def status_host(inventory: Inventory, request: HostRequest, *, progress: ProgressFn | None = None,
                say: Callable[[str], None] | None = None) -> StatusResult:
    """Read one host's status; a failed read raises its DeployError."""
    report = run_playbook("status", request.host, inventory, RunOptions(tofu=request.tofu, command="deploy status"),
                          progress=progress, say=say)
    info = report.state.status
    if info is None:
        raise DeployError("the status playbook reported nothing", fix="check that it runs the status step",
                          host=report.host, step="status")
    return StatusResult(report, info, report.state.hardware)
