"""A root made for the retired `view` container runtime: `sim up` refuses it, names what to do, changes nothing;
`sim down` still stops it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import sim_hosts
from tests.conftest import sim_skip_reason

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def test_sim_up_refuses_a_view_runtime_root(tmp_path: Path) -> None:
    reason = sim_skip_reason()
    if reason:
        pytest.skip(reason)
    number = sim_hosts.sim_number(sim_hosts.OFFSET_ADDRESS_TAKEN)
    root = tmp_path / "root"
    host_json = root / "hosts" / f"sim-{number}" / "host.json"
    host_json.parent.mkdir(parents=True)
    old = {"name": f"sim-{number}", "address": sim_hosts.address(number), "node": f"sim-{number}",
           "sim_id": "abc123", "runtime": "view"}
    host_json.write_text(json.dumps(old))
    env = {**os.environ, "DEPLOY_INVENTORY": str(tmp_path / "no-inventory")}

    def deploy(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                              env=env, cwd=REPO, timeout=120)

    res = deploy("sim", "up", "--first", str(number), "--root", str(root))
    text = " ".join((res.stdout + res.stderr).split())  # the error is wrapped to the terminal width
    assert res.returncode == 2, text
    assert "Traceback" not in text
    assert "retired 'view' container runtime" in text
    assert f"deploy sim down --root {root}" in text and "deploy sim up" in text
    assert json.loads(host_json.read_text()) == old  # nothing of the root changed
    assert sorted(p.name for p in (root / "hosts" / f"sim-{number}").iterdir()) == ["host.json"]
    assert not (root / "lxc").exists()
    status = deploy("sim", "status", "--root", str(root))
    assert status.returncode == 2 and "retired 'view' container runtime" in " ".join(status.stderr.split())
    down = deploy("sim", "down", "--root", str(root))
    assert down.returncode == 0, down.stderr
