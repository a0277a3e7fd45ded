"""A fleet run by a team (issue 51), end to end: two operator machines (two state dirs) and one real PostgreSQL
store (tests/pg_server.py), the real CLI, two simulated hosts.

Machine A starts a fleet roll; machine B's overlapping `roll group` is refused at once, naming A's user, machine,
pid and run; A is SIGKILLed and its claims are free as soon as its connection dies; B resumes A's roll (its record
is the store's) and reverts it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from orchestrator.state import pg, store
from tests.e2e.conftest import until, wait_lease_expired
from tests.e2e.fleet_harness import FleetHarness, fleet_root
from tests.pg_server import TeamStore
from tests.sim_hosts import OFFSET_FLEET

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]
FLAG = "num-continuous-decode-steps"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetHarness]:
    if os.geteuid() != 0:
        pytest.skip("the simulated hosts need root (namespaces, sshd)")
    with fleet_root(tmp_path_factory, "deploy-sim-team", OFFSET_FLEET, 2) as base:
        up = base.env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=1200)
        assert up.rc == 0, up.text
        yield base


def _machine(fleet: FleetHarness, ts: TeamStore, state: Path) -> dict[str, str]:
    """An operator machine: its own state dir (this fleet's SSH host keys copied in), the team store named."""
    shutil.copytree(fleet.env.env["DEPLOY_STATE_DIR"], state, ignore=shutil.ignore_patterns(
        "ledger.sqlite*", "claims", "fleet-rolls", "runs", "tunes", "watch"))
    return {**fleet.env.env, **ts.env(), "DEPLOY_STATE_DIR": str(state)}


def _rolls(ts: TeamStore) -> list[dict[str, Any]]:
    with psycopg.connect(ts.url, password=ts.server.password) as conn:
        rows = conn.execute("SELECT doc FROM deploy.records WHERE kind = 'fleet-rolls'").fetchall()
    return [json.loads(r[0]) for r in rows]


def _live_claims(ts: TeamStore) -> list[tuple[str, str, int]]:
    with psycopg.connect(ts.url, password=ts.server.password) as conn:
        return [(r[0], r[1], int(r[2])) for r in conn.execute(
            "SELECT name, run_id, pid FROM deploy.claims WHERE backend_pid IN (SELECT pid FROM pg_stat_activity)")]


def _deploy(env: dict[str, str], *args: str, timeout: float = 900) -> tuple[int, str, str, float]:
    """`deploy ARGS` as its own process (an operator machine's): exit code, stdout, stderr, wall time."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started


def test_two_machines_one_store_refuse_overlap_free_a_killed_holder_and_resume_anywhere(
        fleet: FleetHarness, team_store: TeamStore, tmp_path: Path) -> None:
    pg.PgStore.open(store.StoreSettings(team_store.url, team_store.password_file)).close()  # the schema, first
    env_a = _machine(fleet, team_store, tmp_path / "a")
    env_b = _machine(fleet, team_store, tmp_path / "b")
    before = fleet.releases()
    a = subprocess.Popen([sys.executable, "-m", "orchestrator", "roll", "group", "prod", "--set", f"{FLAG}=3",
                          "--batch", "1", "--skip-bench"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env={**env_a, "DEPLOY_LOCK_TTL_S": "15"})
    try:
        def rolling() -> bool:
            return any(d["state"] == "running" and any(h["state"] == "in_progress" for h in d["hosts"])
                       for d in _rolls(team_store))

        assert until(rolling, 600), a.stdout.read() if a.stdout else ""
        held = _live_claims(team_store)
        assert {n for n, _, _ in held} == set(fleet.names) and {p for _, _, p in held} == {a.pid}
        run = held[0][1]
        code, out, err, took = _deploy(env_b, "roll", "group", "prod", "--set", f"{FLAG}=7", "--skip-bench")
        said = out + err
        assert code == 3, said
        assert "another deploy command in the team store holds" in said
        assert f"{store.user()}@{store.machine()} pid {a.pid}" in said and f"(run {run})" in said
        assert len(_rolls(team_store)) == 1  # the refused roll saved no record
        print(f"machine B's roll refused after {took:.2f} s (its whole process)")
    finally:
        a.kill()
        a.wait()
    killed = time.monotonic()
    while _live_claims(team_store):
        assert time.monotonic() - killed < 2.0, "the SIGKILLed holder's claims outlived its connection by 2 s"
        time.sleep(0.02)
    print(f"claims free {time.monotonic() - killed:.3f} s after the SIGKILL")
    # Machine B cannot prove A's host runs dead (another machine's): their leases run out (15 s) first.
    for name in fleet.names:
        wait_lease_expired(fleet.host_env(name), timeout_s=60)
    code, out, err, _ = _deploy(env_b, "--json", "roll", "group", "prod", "--resume")
    assert code == 0, out + err
    doc = json.loads(out)
    assert doc["roll"]["state"] == "done" and doc["roll"]["id"] == _rolls(team_store)[0]["id"]
    assert all(h["result"] == "rolled" for h in doc["hosts"])
    code, out, err, _ = _deploy(env_b, "--json", "rollback", "group", "prod")
    assert code == 0, out + err
    assert fleet.releases() == before
    assert not (tmp_path / "b" / "fleet-rolls").exists()  # the record lives in the store only


def test_an_unreachable_store_refuses_changes_and_read_only_commands_still_work(fleet: FleetHarness,
                                                                                tmp_path: Path) -> None:
    from tests.pg_server import free_port

    env = {**fleet.env.env, "DEPLOY_STATE_URL": f"postgresql://deploy@127.0.0.1:{free_port()}/deploy?sslmode=disable"}
    before = fleet.releases()
    code, out, err, _ = _deploy(env, "roll", "group", "prod", "--set", f"{FLAG}=5", "--skip-bench")
    assert code == 3, out + err
    assert "the team state store" in err and "cannot be reached" in err and "nothing was planned or changed" in err
    assert "Traceback" not in out + err
    code, out, err, _ = _deploy(env, "up", "host", fleet.names[0], "--skip-bench", "--skip-weights")
    assert code == 3 and "cannot be reached" in err, out + err
    assert fleet.releases() == before
    code, out, err, _ = _deploy(env, "--json", "status", "group", "prod")
    assert code == 0, out + err
    assert {h["host"]: h["report"]["release"] for h in json.loads(out)["hosts"]} == before
    code, out, err, _ = _deploy(env, "plan", "host", fleet.names[0])
    assert code == 0, out + err
