"""`deploy doctor` on one host as a typed function: the host's prerequisites (one round trip), each with its fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.commands.result import HostRequest, ViewResult
from orchestrator.engine.runner import run_playbook
from orchestrator.engine.step import RunOptions
from orchestrator.hardware.state import HardwareState
from orchestrator.inventory.models import Host, Inventory
from orchestrator.verdicts.host import Finding, FindingStatus, worst_status


@dataclass(frozen=True)
class DoctorResult(ViewResult):
    """Every check's finding and the GPUs' hardware state; it fails when a check fails (warnings pass)."""

    host: Host
    findings: list[Finding]
    hardware: HardwareState | None

    @property
    def status(self) -> FindingStatus:
        return worst_status(self.findings)

    @property
    def exit_code(self) -> int:
        return 1 if self.status == "fail" else 0

    def payload(self) -> dict[str, Any]:
        name = self.host.name
        return {"ok": self.status != "fail", "host": name, "status": self.status,
                "findings": [f.to_dict() for f in self.findings],
                "hardware": self.hardware.to_dict(name) if self.hardware is not None else None,
                "totals": self.totals}

    def detail(self) -> str:
        bad = [f"{f.check} {f.status}" for f in self.findings if f.status != "ok"]
        return self.status + (f": {', '.join(bad)}" if bad else "")


def doctor_host(inventory: Inventory, request: HostRequest) -> DoctorResult:
    """Check one host; changes nothing. A failed read raises its DeployError."""
    report = run_playbook("doctor", request.host, inventory,
                          RunOptions(dry_run=True, tofu=request.tofu, command="deploy doctor"))
    return DoctorResult(report, request.host, report.state.doctor_findings, report.state.hardware)
