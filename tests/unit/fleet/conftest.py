"""The fleet tests' doctor: the example inventory with a second host, and the doctor playbook's run replaced by a
report built here (no host is needed), so what a fleet says can only come from the typed result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from orchestrator.cli import cli
from orchestrator.commands import doctor as doctor_command
from orchestrator.engine.runner import RunReport
from orchestrator.engine.state import RunState
from orchestrator.engine.step import RunOptions
from orchestrator.inventory.models import Host, Inventory
from orchestrator.verdicts.host import Finding

FINDINGS = {"pve-gpu-1": [Finding("driver", "ok", "595.58.03")],
            "pve-gpu-2": [Finding("driver", "ok", "595.58.03"),
                          Finding("iommu", "fail", "off", fix="add intel_iommu=on to the kernel command line")]}


@pytest.fixture
def two_hosts(local_inv: Path) -> Path:
    """The example inventory's host on a closed loopback port (`local_inv`: a run that reached the network would
    fail at once, on this machine) and a second one beside it."""
    inv = local_inv
    hosts = yaml.safe_load((inv / "hosts.yaml").read_text())["hosts"]
    first = hosts["pve-gpu-1"]
    second = first | {"pve": first["pve"] | {"node": "pve-gpu-2"}}
    (inv / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"pve-gpu-1": first, "pve-gpu-2": second}}))
    return inv


@pytest.fixture
def doctor_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The doctor playbook's run, replaced by a report with each host's findings; the hosts it ran on."""
    ran: list[str] = []

    def run_playbook(name: str, host: Host, inventory: Inventory, options: RunOptions, **_: Any) -> RunReport:
        assert name == "doctor" and options.dry_run
        ran.append(host.name)
        return RunReport(host.name, "doctor", dry_run=True, ssh_round_trips=1,
                         state=RunState(doctor_findings=FINDINGS[host.name]))

    monkeypatch.setattr(doctor_command, "run_playbook", run_playbook)
    return ran


def deploy(inventory: Path, tmp_path: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--inventory", str(inventory), *args],
                              env={"DEPLOY_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "200"})
