"""A fleet run judges each host's typed single-host result, never the document the command prints (issue 34).

Through the real CLI (click's CliRunner) on the example inventory with a second host; the playbook run is replaced
by a report built here (no host is needed), so what the fleet says can only come from the typed result.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.commands.doctor import DoctorResult
from tests.unit.fleet.conftest import deploy


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
