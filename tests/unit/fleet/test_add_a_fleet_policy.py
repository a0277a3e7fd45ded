"""docs/development.md "… a fleet form or a fleet policy", run: its worked example's policy and the command that
names it are the page's own two code blocks, taken from it and executed here, so the page cannot drift. The command
stands in for `deploy doctor` in the real CLI (click's CliRunner), its playbook run replaced by a report (the fleet
conftest's doctor): the fleet engine picks the policy for every fleet form, refuses the whole fleet with exit 2 before
any host starts when it objects, runs every host when it does not, and a single-host run never consults it."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from orchestrator.cli import COMMANDS
from orchestrator.cli.common import AppContext, common_options, tofu_option
from orchestrator.cli.doctor_cmd import doctor_on
from orchestrator.cli.fleet import fleet_options
from orchestrator.errors import ConfigError
from orchestrator.inventory.models import Host
from tests.shared import doc_examples
from tests.unit.fleet.conftest import deploy


@pytest.fixture
def consulted(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The page's command in place of `deploy doctor`; the host names each call of its policy was given."""
    policy_block, command_block = doc_examples("… a fleet form or a fleet policy")[-2:]
    ns: dict[str, Any] = {"AppContext": AppContext, "Host": Host, "ConfigError": ConfigError}
    exec(policy_block, ns)  # the page's own code is what is under test
    policy = ns["one_entry_per_container"]
    calls: list[list[str]] = []

    def spied(app: AppContext, hosts: list[Host]) -> None:
        calls.append([h.name for h in hosts])
        policy(app, hosts)

    ns.update(click=click, tofu_option=tofu_option, common_options=common_options, fleet_options=fleet_options,
              doctor_on=doctor_on, one_entry_per_container=spied)
    exec(command_block, ns)
    module, attr = COMMANDS["doctor"]  # the CLI looks its commands up by name, when called
    monkeypatch.setattr(importlib.import_module(module), attr, ns["doctor"])
    return calls


def second_host(inv: Path, vmid: int) -> Path:
    """The example host and a second entry on the same node, whose container is CT `vmid`."""
    hosts = yaml.safe_load((inv / "hosts.yaml").read_text())["hosts"]
    first = hosts["pve-gpu-1"]
    second = first | {"container": first["container"] | {"vmid": vmid}}
    (inv / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"pve-gpu-1": first, "pve-gpu-2": second}}))
    return inv


def test_the_policy_refuses_two_entries_of_one_container(local_inv: Path, tmp_path: Path, doctor_runs: list[str],
                                                        consulted: list[list[str]]) -> None:
    inv = second_host(local_inv, 120)  # the first host's own CT
    result = deploy(inv, tmp_path, "doctor", "--all", "--json")
    assert result.exit_code == 2, result.output
    assert "hosts pve-gpu-1 and pve-gpu-2 are one container: CT 120 on 127.0.0.1" in result.output
    assert consulted == [["pve-gpu-1", "pve-gpu-2"]]
    assert doctor_runs == []  # refused before any host started


def test_distinct_containers_run_every_host(local_inv: Path, tmp_path: Path, doctor_runs: list[str],
                                            consulted: list[list[str]]) -> None:
    inv = second_host(local_inv, 121)
    result = deploy(inv, tmp_path, "doctor", "host", "pve-gpu-1", "pve-gpu-2", "--json")
    doc = json.loads(result.output)
    assert [(h["host"], h["result"]) for h in doc["hosts"]] == [("pve-gpu-1", "ok"), ("pve-gpu-2", "failed")]
    assert consulted == [["pve-gpu-1", "pve-gpu-2"]]
    assert sorted(doctor_runs) == ["pve-gpu-1", "pve-gpu-2"]


def test_one_host_is_no_fleet(local_inv: Path, tmp_path: Path, doctor_runs: list[str],
                              consulted: list[list[str]]) -> None:
    """The single-host form runs the command's body (the page's `...`) and never the policy."""
    inv = second_host(local_inv, 120)
    result = deploy(inv, tmp_path, "doctor", "host", "pve-gpu-2", "--json")
    assert consulted == [] and doctor_runs == [], result.output
