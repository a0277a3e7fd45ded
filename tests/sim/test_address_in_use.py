"""`deploy sim up` where the address is taken (a demo left running): exit 2 with the commands that fix it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import sim_hosts
from tests.conftest import sim_skip_reason

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def test_sim_up_on_a_taken_address_names_sim_down_and_first(tmp_path: Path) -> None:
    reason = sim_skip_reason()
    if reason:
        pytest.skip(reason)
    number = sim_hosts.sim_number(sim_hosts.OFFSET_ADDRESS_TAKEN)
    addr = sim_hosts.address(number)
    root = tmp_path / "root"
    env = {**os.environ, "DEPLOY_INVENTORY": str(tmp_path / "no-inventory")}  # no sim.yaml copy into the repo

    def deploy(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                              env=env, cwd=REPO, timeout=120)

    with socket.socket() as other:  # stands in for the demo's sshd
        other.bind((addr, 2222))
        other.listen()
        try:
            res = deploy("sim", "up", "--first", str(number), "--root", str(root))
            as_json = deploy("--json", "sim", "up", "--first", str(number), "--root", str(root))
        finally:
            deploy("sim", "down", "--root", str(root))
    text = " ".join((res.stdout + res.stderr).split())  # the error is wrapped to the terminal width
    assert res.returncode == 2, text
    assert "Traceback" not in text
    assert f"{addr}:2222 is already in use" in text and f"sim-{number}" in text
    assert "deploy sim down" in text and "deploy sim up --first N" in text and "DEPLOY_SIM_FIRST" in text
    assert as_json.returncode == 2
    assert '"step": "sim up"' in as_json.stdout and "deploy sim down" in as_json.stdout
