"""A step that meets output its parser cannot read fails as a remote error of that host and step, not a traceback."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.engine.runner import run_playbook_to_end
from orchestrator.engine.step import RunOptions, StepContext
from orchestrator.errors import RemoteError, error_code
from orchestrator.inventory.loader import load_inventory
from orchestrator.parsers import ParseError
from orchestrator.runlog import StepRecord
from orchestrator.steps import REGISTRY, load_all_steps
from tests.shared import EXAMPLE_INVENTORY


def test_a_parse_error_in_a_step_is_a_remote_error_naming_host_step_and_excerpt(
        monkeypatch: pytest.MonkeyPatch) -> None:
    load_all_steps()
    ran: list[str] = []

    def connect(ctx: StepContext, record: StepRecord) -> None:
        ran.append("connect")

    def smoke(ctx: StepContext, record: StepRecord) -> None:
        raise ParseError("not an nvidia-smi topo -m matrix",
                         "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")

    monkeypatch.setitem(REGISTRY, "connect", dataclasses.replace(REGISTRY["connect"], fn=connect))
    monkeypatch.setitem(REGISTRY, "smoke", dataclasses.replace(REGISTRY["smoke"], fn=smoke))
    inv = load_inventory(EXAMPLE_INVENTORY)
    report = run_playbook_to_end("smoke", inv.hosts["pve-gpu-1"], inv, RunOptions())
    err = report.failure
    assert ran == ["connect"] and isinstance(err, RemoteError)
    assert (err.host, err.step, err.exit_code, error_code(err)) == ("pve-gpu-1", "smoke", 3, "remote-error")
    assert err.what.startswith("the host's answer could not be read: not an nvidia-smi topo -m matrix: ")
    assert "couldn't communicate with the NVIDIA driver" in err.what and err.fix
    assert err.details == {"expected": "not an nvidia-smi topo -m matrix",
                           "excerpt": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."}
    assert [(s.name, s.status) for s in report.steps][-1] == ("smoke", "failed")
