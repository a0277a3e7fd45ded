"""The typed result of one playbook run, as a single-host command returns it (fleet/outcome.HostResult)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.engine.runner import RunReport
from orchestrator.errors import DeployError
from orchestrator.inventory.models import Host
from orchestrator.runlog import StepRecord


@dataclass(frozen=True)
class HostRequest:
    """A read of one host that takes no other input (status, doctor)."""

    host: Host
    tofu: bool = False


@dataclass(frozen=True)
class RunResult:
    """A command whose document is its run's report (`up`, `rollback`): it keeps a failed run's steps and totals."""

    report: RunReport

    @property
    def error(self) -> DeployError | None:
        return self.report.failure

    @property
    def exit_code(self) -> int:
        return self.report.failure.exit_code if self.report.failure is not None else 0

    @property
    def steps(self) -> list[StepRecord]:
        return self.report.steps

    @property
    def ssh_round_trips(self) -> int | None:
        return self.report.ssh_round_trips

    @property
    def changed(self) -> bool:
        return self.report.changed

    @property
    def dry_run(self) -> bool:
        return self.report.dry_run

    def detail(self) -> str:
        return ""

    def payload(self) -> dict[str, Any]:
        return self.report.to_dict()


@dataclass(frozen=True)
class ViewResult:
    """A command that reads and judges (status, doctor, verify-p2p): its run raised on a failure, so it has none;
    its document gives the totals but no steps, and it changes nothing."""

    report: RunReport

    @property
    def error(self) -> DeployError | None:
        return None

    @property
    def changed(self) -> bool:
        return False

    @property
    def dry_run(self) -> bool:
        return False

    @property
    def steps(self) -> list[StepRecord]:
        return []

    @property
    def ssh_round_trips(self) -> int | None:
        return self.report.ssh_round_trips

    @property
    def totals(self) -> dict[str, Any]:
        """The run's totals as its document gives them."""
        totals: dict[str, Any] = self.report.to_dict()["totals"]
        return totals
