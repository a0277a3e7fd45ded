"""`sim up`/`down` on a second root beside the session host: idempotent, and nothing is left running."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.inventory.loader import load_inventory
from simulator.manager.lifecycle import sim_down, sim_status, sim_up
from tests import sim_hosts
from tests.shared import EXAMPLE_INVENTORY

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
FIRST = sim_hosts.sim_number(sim_hosts.OFFSET_SECOND_ROOT)  # disjoint from the session host (tests/sim_hosts.py)
NAME, ADDRESS = f"sim-{FIRST}", sim_hosts.address(FIRST)


def leftovers(root: Path, address: str) -> list[str]:
    found = []
    ps = subprocess.run(["pgrep", "-af", str(root)], capture_output=True, text=True).stdout
    found += [ln for ln in ps.splitlines() if "pgrep" not in ln]
    ss = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout
    found += [ln for ln in ss.splitlines() if f"{address}:" in ln]
    return found


def test_up_down_twice_leaves_nothing(sim_host: Any, tmp_path: Path) -> None:
    root = tmp_path / "root2"
    for _ in range(2):
        infos = sim_up(root, hosts=1, first=FIRST, profile="h200-x2")
        again = sim_up(root, hosts=1, first=FIRST, profile="h200-x2")
        assert [i.sshd_pid for i in infos] == [i.sshd_pid for i in again]  # idempotent: nothing restarted
        info = infos[0]
        assert info.name == NAME and info.address == ADDRESS and info.running
        inv = load_inventory([EXAMPLE_INVENTORY, root])
        host = inv.find_host(NAME)
        assert host.container.expected_gpus == 2 and host.pve.api is not None
        assert host.pve.api.token_secret.read() == info.token_secret_file.read_text().strip()
        assert oct(os.stat(info.token_secret_file).st_mode & 0o777) == "0o600"
        env = {**os.environ, "DEPLOY_SIM_ROOT": str(root)}
        ssh = ["ssh", "-i", str(info.key_file), "-o", f"UserKnownHostsFile={info.known_hosts}", "-o",
               "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-p", "2222", f"root@{info.address}"]
        script = ("pct create 150 local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst --hostname c >/dev/null"
                  " ; pct start 150 && pct exec 150 -- bash -c 'nohup sleep 600 >/dev/null 2>&1 &'"
                  " ; nohup sleep 601 >/dev/null 2>&1 &\n")
        res = subprocess.run([*ssh, "bash -s"], input=script, capture_output=True, text=True, env=env,
                             timeout=60)
        assert res.returncode == 0, res.stderr
        sim_down(root)
        sim_down(root)
        assert leftovers(root, info.address) == []
        assert all(not i.running for i in sim_status(root))
