"""`deploy plan group` on fresh hosts with a managed router (issue 25 item 4): the router's container does not exist
yet, so the plan says what `up` would do instead of failing on `pct exec` into a missing container (exit 3)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import pytest

from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import RouterSpec
from orchestrator.remote.ssh import RemoteResult
from orchestrator.router import converge
from tests.shared import EXAMPLE_INVENTORY


class FreshNode:
    """A PVE node where CT 120 does not exist: `pct status` fails, so the guard prints its marker."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    def run(self, command: str, **_: Any) -> RemoteResult:
        self.commands.append(command)
        if "pct status 120" in command and command.startswith("if "):
            return RemoteResult(0, "__CT_NOT_RUNNING__\n", "", 0.0)
        if command.startswith("pct exec 120 "):  # learning the container's address, as real pct answers it
            return RemoteResult(2, "", "Configuration file 'nodes/pve-gpu-1/lxc/120.conf' does not exist\n", 0.0)
        raise AssertionError(f"a plan must not run this on a fresh host: {command}")

    def script(self, command: str, **_: Any) -> RemoteResult:
        raise AssertionError(f"a plan must not read the router's facts in a missing container: {command}")


def test_a_plan_on_a_fresh_host_says_up_would_install_the_router(monkeypatch: pytest.MonkeyPatch) -> None:
    import orchestrator.remote.ssh as ssh

    inv = load_inventory(EXAMPLE_INVENTORY)
    inv = inv.model_copy(update={"router": RouterSpec(runs_on="pve-gpu-1", package="sglang-router")})
    node = FreshNode()
    monkeypatch.setattr(ssh, "SshHost", lambda *a, **k: nullcontext(node))
    monkeypatch.setattr(converge, "router_api_key", lambda _inv: None)
    report = converge.converge_router(inv, ["pve-gpu-1"], ["pve-gpu-1"], dry_run=True)
    assert report is not None and report.exit_code == 0, report and report.error
    assert report.result == "would change" and report.workers == ["pve-gpu-1"]
    assert report.record.summary == ("install sglang-router==0.3.2 in /opt/sglang-router once `up` has created and "
                                     "started CT 120, and start the router (1 worker(s))")
    assert all(c.startswith(("pct exec 120 -- bash -c 'ip -4", "if pct status 120")) for c in node.commands)
