"""A fleet run judges each host's typed single-host result, never the document the command prints (issue 34).

Through the real CLI (click's CliRunner) on the example inventory with a second host; the playbook run is replaced
by a report built here (no host is needed), so what the fleet says can only come from the typed result.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from orchestrator.cli import cli
from orchestrator.commands import doctor as doctor_command
from orchestrator.commands.doctor import DoctorResult
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


def test_a_fleet_host_report_is_its_single_host_document(two_hosts: Path, tmp_path: Path,
                                                          doctor_runs: list[str]) -> None:
    one = deploy(two_hosts, tmp_path, "doctor", "host", "pve-gpu-2", "--json")
    fleet = deploy(two_hosts, tmp_path, "doctor", "host", "pve-gpu-1", "pve-gpu-2", "--json")
    assert (one.exit_code, fleet.exit_code) == (1, 1), fleet.output
    doc = json.loads(fleet.output)
    assert [(h["host"], h["result"], h["exit_code"]) for h in doc["hosts"]] == [("pve-gpu-1", "ok", 0),
                                                                                 ("pve-gpu-2", "failed", 1)]
    assert [h["detail"] for h in doc["hosts"]] == ["ok", "fail: iommu fail"]
    assert [h["ssh_round_trips"] for h in doc["hosts"]] == [1, 1]
    assert doc["hosts"][1]["report"] == json.loads(one.output)
    assert sorted(doctor_runs) == ["pve-gpu-1", "pve-gpu-2", "pve-gpu-2"]


def test_the_fleet_reads_the_typed_result_not_the_printed_document(two_hosts: Path, tmp_path: Path,
                                                                   doctor_runs: list[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A document that says nothing of the verdict changes nothing in the fleet's judgement of the host."""
    monkeypatch.setattr(DoctorResult, "payload", lambda self: {"host": self.host.name})
    fleet = deploy(two_hosts, tmp_path, "doctor", "--all", "--json")
    doc = json.loads(fleet.output)
    assert fleet.exit_code == 1, fleet.output
    assert [(h["result"], h["detail"]) for h in doc["hosts"]] == [("ok", "ok"), ("failed", "fail: iommu fail")]
    assert doc["hosts"][1]["report"]["host"] == "pve-gpu-2" and "findings" not in doc["hosts"][1]["report"]
    text = deploy(two_hosts, tmp_path, "doctor", "--all")
    assert "fail: iommu fail" in text.output and text.exit_code == 1
