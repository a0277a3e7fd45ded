"""The demo's inventory from a fresh checkout: `deploy sim up` makes ./inventory with the simulated hosts and the
example's profiles and presets (never its host), so `plan` and `status --all` reach the simulated host only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import sim_hosts
from tests.conftest import sim_skip_reason
from tests.shared import EXAMPLE_INVENTORY

pytestmark = pytest.mark.e2e


def test_sim_up_in_a_directory_without_inventory_gives_the_demo_what_it_needs(tmp_path: Path) -> None:
    reason = sim_skip_reason()
    if reason:
        pytest.skip(reason)
    number = sim_hosts.sim_number(sim_hosts.OFFSET_SECOND_ROOT)
    host, root, cwd = f"sim-{number}", tmp_path / "root", tmp_path / "checkout"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "DEPLOY_INVENTORY"}
    env |= {"DEPLOY_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "200"}

    def deploy(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                              env=env, cwd=cwd, timeout=120)

    inv = cwd / "inventory"
    try:
        up = deploy("sim", "up", "--first", str(number), "--root", str(root), "--ct-storage", "tmpfs")
        assert up.returncode == 0, up.stderr
        assert "inventory entries written to inventory/sim.yaml" in up.stdout
        assert ("the example's profiles and presets (which the entries use) written to inventory/profiles.yaml, "
                "inventory/presets.yaml") in up.stdout
        assert sorted(p.name for p in inv.iterdir()) == ["presets.yaml", "profiles.yaml", "sim.yaml"]
        for name in ("profiles.yaml", "presets.yaml"):
            assert (inv / name).read_text() == (EXAMPLE_INVENTORY / name).read_text()

        written = yaml.safe_load((inv / "sim.yaml").read_text())
        assert written["groups"] == {"sim": [host]}  # `deploy up group sim` works at once
        assert "router:" not in (inv / "sim.yaml").read_text()  # one host: no router stub
        plan = deploy("plan", "host", host)
        assert plan.returncode == 0, plan.stdout + plan.stderr
        assert "install new unit (13 flags, sglang 0.5.12.post1)" in plan.stdout
        status = deploy("--json", "status", "--all")
        assert [h["host"] for h in json.loads(status.stdout)["hosts"]] == [host]  # never the example's host

        (inv / "profiles.yaml").write_text((inv / "profiles.yaml").read_text() + "# mine\n")
        again = deploy("--json", "sim", "up", "--first", str(number), "--root", str(root))
        assert again.returncode == 0 and json.loads(again.stdout)["example_written"] == []
        assert (inv / "profiles.yaml").read_text().endswith("# mine\n")
    finally:
        down = deploy("sim", "down", "--root", str(root))
    assert down.returncode == 0, down.stderr
    # What `sim up` wrote goes with `sim down`, except the file the user edited, which is named.
    assert sorted(p.name for p in inv.iterdir()) == ["profiles.yaml"]
    assert "kept inventory/profiles.yaml: edited since `deploy sim up` wrote it" in down.stdout


def test_the_router_stub_of_a_simulated_fleet_is_a_valid_router_section_once_uncommented() -> None:
    from orchestrator.inventory.models import RouterSpec
    from simulator.manager.lifecycle import SIM_GROUP, router_stub

    stub = router_stub("sim-1")
    assert all(line.startswith("#") for line in stub.splitlines())  # inert until the operator uncomments it
    section = yaml.safe_load("\n".join(line.removeprefix("# ") for line in stub.splitlines()
                                       if line.startswith("# router") or line.startswith("#   ")))
    spec = RouterSpec(**section["router"])
    assert (spec.runs_on, spec.workers) == ("sim-1", SIM_GROUP)
