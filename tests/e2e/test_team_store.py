"""A fleet run by a team (issue 51), end to end: two operator machines (two state dirs) and one real PostgreSQL
store (tests/pg_server.py), the real CLI, two simulated hosts behind the real sglang-router (the smallest fleet
with a floor: one host out of service at most, so one always serving).

Machine A starts a fleet roll; machine B's overlapping `roll group` is refused at once, naming A's user, machine,
pid and run; A is SIGKILLed and its claims are free as soon as its connection dies; B resumes A's roll (its record
is the store's) and reverts it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.store import pg, store
from tests import sim_hosts
from tests.e2e.conftest import until, wait_lease_expired
from tests.e2e.fleet_harness import RoutedFleet, fleet_root, worker_urls
from tests.pg_server import TeamStore, connect_url
from tests.sim_hosts import OFFSET_FLEET, OFFSET_FLEET_ROUTER

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]
FLAG = "num-continuous-decode-steps"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RoutedFleet]:
    if os.geteuid() != 0:
        pytest.skip("the simulated hosts need root (namespaces, sshd)")
    from simulator.router import start_router, stop_router

    with fleet_root(tmp_path_factory, "deploy-sim-team", OFFSET_FLEET, 2) as base:
        up = base.env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=1200)
        assert up.rc == 0, up.text
        urls = worker_urls(base)
        address = sim_hosts.address(sim_hosts.claim(OFFSET_FLEET_ROUTER, ports=(30000,)))
        run_dir = tmp_path_factory.mktemp("team-router")
        try:
            start_router(run_dir, address, 30000, list(urls.values()), policy="round_robin",
                         extra=["--health-check-interval-secs", "1"])
            (base.env.inventory / "router.yaml").write_text(
                f"router:\n  host: {address}\n  port: 30000\n  policy: round_robin\n  workers: prod\n")
            fleet = RoutedFleet(env=base.env, names=base.names, root=base.root, infos=base.infos,
                                router=f"http://{address}:30000", urls=urls)
            assert until(lambda: all(fleet.listed().values()), 120), fleet.listed()
            yield fleet
        finally:
            stop_router(run_dir)


class Sampler:
    """Every `every` s while a test runs: the router's healthy workers (the fewest seen) and the store's live claims
    (any host held by two runs at once, one of them exclusive: what the claims exist to prevent)."""

    def __init__(self, fleet: RoutedFleet, ts: TeamStore, every: float = 0.05) -> None:
        self.fleet, self.ts, self.every = fleet, ts, every
        self.fewest = len(fleet.names)
        self.samples = 0
        self.overlaps: list[list[tuple[str, str, str, bool]]] = []
        self.held_by: dict[str, set[str]] = {}  # host -> the commands seen holding it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        with connect_url(self.ts.url, self.ts.server.password) as conn:
            last_router = 0.0
            while not self._stop.is_set():
                rows = [(r[0], r[1], r[2], bool(r[3])) for r in conn.execute(
                    "SELECT name, run_id, command, exclusive FROM deploy.claims WHERE backend_pid IN "
                    "(SELECT pid FROM pg_stat_activity)")]
                for name, _, command, _ in rows:
                    self.held_by.setdefault(name, set()).add(command)
                for name in {n for n, _, _, _ in rows}:
                    mine = [r for r in rows if r[0] == name]
                    if len({r[1] for r in mine}) > 1 and any(r[3] for r in mine):
                        self.overlaps.append(mine)
                if time.monotonic() - last_router >= 0.5:
                    last_router = time.monotonic()
                    try:
                        listed = self.fleet.listed()
                    except Exception:  # a router that does not answer lists nobody
                        listed = {}
                    self.fewest = min(self.fewest, sum(listed.values()))
                    self.samples += 1
                self._stop.wait(self.every)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def _machine(fleet: RoutedFleet, ts: TeamStore, state: Path) -> dict[str, str]:
    """An operator machine: its own state dir (this fleet's SSH host keys copied in), the team store named."""
    shutil.copytree(fleet.env.env["DEPLOY_STATE_DIR"], state, ignore=shutil.ignore_patterns(
        "ledger.sqlite*", "claims", "fleet-rolls", "runs", "tunes", "watch"))
    return {**fleet.env.env, **ts.env(), "DEPLOY_STATE_DIR": str(state)}


def _rolls(ts: TeamStore) -> list[dict[str, Any]]:
    with connect_url(ts.url, ts.server.password) as conn:
        rows = conn.execute("SELECT doc FROM deploy.records WHERE kind = 'fleet-rolls'").fetchall()
    return [json.loads(r[0]) for r in rows]


def _live_claims(ts: TeamStore) -> list[tuple[str, str, int]]:
    with connect_url(ts.url, ts.server.password) as conn:
        return [(r[0], r[1], int(r[2])) for r in conn.execute(
            "SELECT name, run_id, pid FROM deploy.claims WHERE backend_pid IN (SELECT pid FROM pg_stat_activity)")]


def _deploy(env: dict[str, str], *args: str, timeout: float = 900) -> tuple[int, str, str, float]:
    """`deploy ARGS` as its own process (an operator machine's): exit code, stdout, stderr, wall time."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started


def test_two_machines_one_store_refuse_overlap_free_a_killed_holder_and_resume_anywhere(
        fleet: RoutedFleet, team_store: TeamStore, tmp_path: Path) -> None:
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
        assert {n for n, _, _ in held} == {*fleet.names, "_router"} and {p for _, _, p in held} == {a.pid}
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


def test_an_unreachable_store_refuses_changes_and_read_only_commands_still_work(fleet: RoutedFleet,
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


def test_overlapping_fleet_rolls_from_two_machines_keep_the_routers_floor(fleet: RoutedFleet, team_store: TeamStore,
                                                                          tmp_path: Path) -> None:
    """Two `roll group` runs started together from two machines over a fleet behind the router: one rolls (one
    host out of the router at a time), the other is refused at once, and the router never lists fewer than the
    floor (2 hosts, at most 1 out of service)."""
    pg.PgStore.open(store.StoreSettings(team_store.url, team_store.password_file)).close()  # the schema, first
    envs = [_machine(fleet, team_store, tmp_path / "a"), _machine(fleet, team_store, tmp_path / "b")]
    before = fleet.releases()
    floor = len(fleet.names) - 1
    with Sampler(fleet, team_store) as sampler:
        procs = [subprocess.Popen([sys.executable, "-m", "orchestrator", "roll", "group", "prod", "--set",
                                   f"{FLAG}={value}", "--batch", "1", "--skip-bench"], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, env=env)
                 for env, value in zip(envs, (4, 6), strict=True)]
        outs = [p.communicate(timeout=900)[0] for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 3], outs
    winner = codes.index(0)
    assert "another deploy command in the team store holds" in outs[1 - winner], outs[1 - winner]
    assert "Traceback" not in "".join(outs)
    print(f"router samples {sampler.samples}, fewest healthy workers {sampler.fewest} (floor {floor})")
    assert sampler.samples >= 10
    assert sampler.fewest < len(fleet.names), "no host ever left the router: the roll drained nothing"
    assert sampler.fewest >= floor, f"the router listed {sampler.fewest} healthy workers, below the floor {floor}"
    assert sampler.overlaps == []
    code, out, err, _ = _deploy(envs[winner], "rollback", "group", "prod")
    assert code == 0, out + err
    assert fleet.releases() == before


def test_the_watch_on_one_machine_and_rolls_from_another_never_hold_a_host_at_once(
        fleet: RoutedFleet, team_store: TeamStore, tmp_path: Path) -> None:
    """The watch runs on machine A and cordons a host whose GPU fell off the bus, then returns it once clean;
    meanwhile machine B rolls that host, a bounded number of times. The store's live claims, sampled every 50 ms,
    never show that host held by both (the 100-trial claim-level soak is in tests/unit/test_team_store.py)."""
    pg.PgStore.open(store.StoreSettings(team_store.url, team_store.password_file)).close()
    env_a = _machine(fleet, team_store, tmp_path / "a")
    env_b = _machine(fleet, team_store, tmp_path / "b")
    bad = fleet.names[1]
    before = fleet.releases()
    log = tmp_path / "watch.log"
    with log.open("w") as sink:
        watch = subprocess.Popen([sys.executable, "-m", "orchestrator", "watch", "group", "prod", "--interval", "5",
                                  "--for", "400"], stdout=sink, stderr=subprocess.STDOUT, text=True, env=env_a)
    results: list[tuple[int, str]] = []
    try:
        with Sampler(fleet, team_store) as sampler:
            time.sleep(3)  # a clean cycle first
            fleet.faults(bad, xid="79@2")
            for value in (11, 12):  # bounded: two rolls of the host while the watch acts on it
                code, out, err, _ = _deploy(env_b, "roll", "host", bad, "--set", f"{FLAG}={value}", "--skip-bench")
                results.append((code, out + err))
            assert until(lambda: not fleet.listed().get(bad, True), 120), (fleet.listed(), log.read_text(), results)
            fleet.faults(bad, xid=None, gpu_lost=None)
            rebooted = fleet.env.run("sim", "reboot", bad, "--root", str(fleet.root))
            assert rebooted.rc == 0, rebooted.text
            code, out, err, _ = _deploy(env_b, "roll", "host", bad, "--set", f"{FLAG}=13", "--skip-bench")
            results.append((code, out + err))
            assert until(lambda: fleet.listed().get(bad, False), 180), (fleet.listed(), log.read_text())
        watch.send_signal(signal.SIGTERM)
        watch.wait(timeout=120)
        said = log.read_text()
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
        fleet.clear_faults()
    # the watch cordoned the host, and the host came back: the watch returned it, or the roll from the other machine
    # (a router worker's roll adds it back after its checks) did and the watch closed its record
    assert f"{bad}: cordoned (" in said, said
    assert f"{bad}: returned:" in said or f"{bad}: back in the router and reads clean" in said, said
    for code, text in results:
        assert "Traceback" not in text, text
        if code == 3:  # refused: the watch held the host (a roll that ran may fail on the host's own fault)
            assert "another deploy command in the team store holds" in text and "deploy watch" in text, text
    commands = sampler.held_by.get(bad, set())
    assert any(c.startswith("deploy watch") for c in commands), commands  # both did hold the host ...
    assert any(c.startswith("deploy roll") for c in commands), commands
    assert sampler.overlaps == [], sampler.overlaps[:3]  # ... never at once
    print(f"{bad} held by: {sorted(commands)}; roll exits {[c for c, _ in results]}")
    after = fleet.releases()
    assert {h: r for h, r in after.items() if h != bad} == {h: r for h, r in before.items() if h != bad}
