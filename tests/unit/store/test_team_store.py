"""The team state store (issue 51) against a real PostgreSQL server (tests/pg_server.py): claims as advisory
locks naming their holder, the ledger and the records shared by two operator machines, the schema version, the
password's rules, and what a lost or unreachable store does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError, LockHeld, LockLost, RemoteError
from orchestrator.inventory.loader import load_inventory
from orchestrator.ledger.sqlite import Ledger
from orchestrator.locks import claims
from orchestrator.locks.claims import claim_fleet, claim_hosts
from orchestrator.locks.lease import HostLease
from orchestrator.remote.ssh import SshHost
from orchestrator.store import pg, store
from tests.pg_server import PgServer, TeamStore, free_port
from tests.shared import EXAMPLE_INVENTORY

HOLD = """
import sys, time
from orchestrator.locks.claims import claim_fleet
with claim_fleet(["gpu-1", "gpu-2"], "deploy roll group g --set x=1 --set api-key=s3cret", router=True):
    from orchestrator.store import store
    print("held", store.run_id(), flush=True)
    time.sleep(120)
"""


@pytest.fixture
def machine_a(team_store: TeamStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TeamStore]:
    """This process as operator machine A: its own state dir, the team store named by the environment."""
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path / "a"))
    for k, v in team_store.env().items():
        monkeypatch.setenv(k, v)
    store.reset()
    yield team_store
    store.reset()


def _holder_process(ts: TeamStore, state_dir: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, **ts.env(), "DEPLOY_STATE_DIR": str(state_dir)}
    proc = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line[:1] == ["held"], line
    return proc, line[1]


def test_a_claim_held_from_another_machine_is_refused_naming_user_machine_and_run(machine_a: TeamStore,
                                                                                   tmp_path: Path) -> None:
    proc, run = _holder_process(machine_a, tmp_path / "b")  # machine B: another state dir, the same store
    try:
        started = time.monotonic()
        with pytest.raises(LockHeld) as caught, claim_hosts(["gpu-3", "gpu-2"], "deploy roll group h"):
            pass
        took = time.monotonic() - started
        assert took < 1.0, f"refused after {took:.3f} s"
        print(f"refused {took:.3f} s after the claim was asked for")
        what = caught.value.what
        assert "in the team store holds gpu-2" in what
        assert f"{store.user()}@{store.machine()} pid {proc.pid}" in what and f"(run {run})" in what
        assert "api-key=***" in what and "s3cret" not in what
        with claim_hosts(["gpu-3"], "deploy roll host gpu-3"):  # the refused command released what it took
            rows = {c.name for c in store.current().status().claims}
            assert {"gpu-1", "gpu-2", "_router", "gpu-3"} <= rows
        with pytest.raises(LockHeld, match="holds the router"), claim_fleet([], "deploy router add x", router=True):
            pass
    finally:
        proc.kill()
        proc.wait()
    killed = time.monotonic()
    while True:  # the server frees a dead session's advisory locks when its socket closes
        try:
            with claim_hosts(["gpu-1", "gpu-2"], "after the holder died"):
                print(f"claims free {time.monotonic() - killed:.3f} s after the holder's SIGKILL")
                break
        except LockHeld:
            assert time.monotonic() - killed < 2.0, "the SIGKILLed holder's claims were not freed within 2 s"
            time.sleep(0.05)
    assert {c.name for c in store.current().status().claims} == set()


def test_single_host_claims_are_shared_and_exclude_a_fleet_claim(machine_a: TeamStore) -> None:
    with claim_hosts(["gpu-1"], "deploy roll host gpu-1", exclusive=False):
        other = pg.PgStore.open(store.settings())  # type: ignore[arg-type]  # a second session: another machine
        try:
            h = claims.holder("deploy rollback host gpu-1")
            assert other.claims.take("gpu-1", h, exclusive=False) is None
            who = other.claims.take("gpu-9", h, exclusive=True)
            assert who is None
            refused = pg.PgStore.open(store.settings())  # type: ignore[arg-type]
            try:
                who = refused.claims.take("gpu-1", h, exclusive=True)
                assert isinstance(who, store.Holder) and who.command.startswith("deploy roll")
            finally:
                refused.close()
        finally:
            other.close()


def test_a_claim_and_its_row_take_one_round_trip(machine_a: TeamStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The claim is on every changing command's path (tests/perf/state_store_cost.py): one statement, and the
    row a refused command reads is there as soon as the lock is."""
    pgs = store.current()
    assert isinstance(pgs, pg.PgStore)
    sent: list[str] = []
    execute = pgs.conn.execute
    monkeypatch.setattr(pgs.conn, "execute", lambda sql, *a, **k: sent.append(str(sql)) or execute(sql, *a, **k))
    h = claims.holder("deploy roll host gpu-4")
    assert pgs.claims.take("gpu-4", h, exclusive=True) is None
    assert len(sent) == 1, sent
    other = pg.PgStore.open(store.settings())  # type: ignore[arg-type]
    try:
        who = other.claims.take("gpu-4", h, exclusive=False)
        assert isinstance(who, store.Holder) and who.command == "deploy roll host gpu-4" and who.pid == os.getpid()
        assert [c.name for c in other.status().claims] == ["gpu-4"]  # the refused take wrote no row
    finally:
        other.close()
    pgs.claims.release("gpu-4")
    assert pgs.status().claims == ()


def test_the_ledger_and_records_are_the_teams(machine_a: TeamStore, tmp_path: Path) -> None:
    led = store.current().ledger()
    rec = led.record_run(host="gpu-1", bench=None, source="roll", preset="chat", flags={"api-key": "s3cret"})
    led.link_tune_run("t-1", rec.id, point="p", concurrency=4, purpose="search")
    led.link_tune_run("t-1", rec.id, point="q", concurrency=8, purpose="confirm")  # the upsert
    led.record_event("gpu-1", "cordoned", "Xid 79")
    store.current().records.put("tunes", "t-1", '{"x": 1}')
    # machine B: another state dir, the same store, another process's connection
    out = subprocess.run([sys.executable, "-c", (
        "from orchestrator.store import store\n"
        "led = store.current().ledger()\n"
        "r = led.list_runs(hosts=['gpu-1'])[0]\n"
        "print(r.id, r.by, r.flags['api-key'], led.tune_runs('t-1'), [e.kind for e in led.events('gpu-1')],\n"
        "      store.current().records.get('tunes', 't-1'), led.get_run(r.id[:12]).id == r.id,\n"
        "      led.list_runs(hosts=[]))")],
        capture_output=True, text=True, env={**os.environ, "DEPLOY_STATE_DIR": str(tmp_path / "b")}, check=True)
    assert out.stdout.split(None, 3)[:3] == [rec.id, f"{store.user()}@{store.machine()}", "<redacted>"]
    assert "[('" + rec.id + "', 'q', 8, 'confirm')] ['cordoned'] {\"x\": 1} True []" in out.stdout
    assert not (tmp_path / "a" / "ledger.sqlite").exists()  # nothing on this machine


def test_migrate_copies_this_machines_state_once(machine_a: TeamStore, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEPLOY_STATE_URL")
    store.reset()
    local = Ledger()
    r1 = local.record_run(host="gpu-1", bench=None, source="bench")
    local.record_event("gpu-1", "cordoned", "Xid 79")
    local.link_tune_run("t-1", r1.id, point="p", concurrency=4, purpose="search")
    store.current().records.put("fleet-rolls", "fleetroll-1", '{"id": "fleetroll-1"}')
    remote = pg.PgStore.open(store.StoreSettings(machine_a.url, machine_a.password_file))
    try:
        first = remote.import_local(local.path, store.LocalRecords())
        again = remote.import_local(local.path, store.LocalRecords())
        assert (first.runs, first.tune_runs, first.host_events, first.records["fleet-rolls"]) == (1, 1, 1, 1)
        assert (again.runs, again.tune_runs, again.host_events, again.already) == (0, 0, 0, 4)
        assert remote.ledger().get_run(r1.id).id == r1.id
        assert remote.records.get("fleet-rolls", "fleetroll-1") == '{"id": "fleetroll-1"}'
    finally:
        remote.close()


def test_a_schema_newer_than_the_tool_is_refused(machine_a: TeamStore) -> None:
    s = store.current()
    assert s.status().schema_version == pg.SCHEMA_VERSION
    s.conn.execute("INSERT INTO deploy.schema_version VALUES (%s)", (pg.SCHEMA_VERSION + 1,))  # type: ignore[attr-defined]
    store.reset()
    with pytest.raises(ConfigError, match=f"schema version {pg.SCHEMA_VERSION + 1}, newer than this tool's"):
        store.current()


def test_a_password_in_the_url_or_a_readable_password_file_is_refused(machine_a: TeamStore,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOY_STATE_URL", machine_a.url.replace("deploy@", "deploy:pw@"))
    store.reset()
    with pytest.raises(ConfigError, match="carries a password"):
        store.current()
    monkeypatch.setenv("DEPLOY_STATE_URL", machine_a.url)
    os.chmod(machine_a.password_file, 0o644)
    store.reset()
    with pytest.raises(ConfigError, match="readable by others"):
        store.current()


def test_an_unreachable_store_refuses_a_claim_before_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("DEPLOY_STATE_URL", f"postgresql://deploy@127.0.0.1:{free_port()}/deploy?sslmode=disable")
    store.reset()
    try:
        with pytest.raises(RemoteError) as caught, claim_hosts(["gpu-1"], "deploy roll group g"):
            pass
        assert "cannot be reached" in caught.value.what and "nothing was planned or changed" in caught.value.fix
        assert not (tmp_path / "claims").exists()
    finally:
        store.reset()


def test_a_store_lost_mid_run_stops_the_run_at_its_next_safe_point(pg_server: PgServer, machine_a: TeamStore) -> None:
    with claim_hosts(["gpu-1"], "deploy roll group g"):
        claims.ensure_held()  # held: nothing to say
        pg_server.stop()
        try:
            deadline = time.monotonic() + 3 * pg.HEARTBEAT_S + 2
            while store.current().claims.lost() is None:
                assert time.monotonic() < deadline, "the lost store was not noticed"
                time.sleep(0.1)
            with pytest.raises(LockLost, match="claim of this run in the team store is gone"):
                claims.ensure_held()
            # the next remote command of a run holding a host's lease is where it stops (locks/lease.py)
            lease = HostLease(SshHost(next(iter(load_inventory(EXAMPLE_INVENTORY).hosts.values()))), "deploy roll",
                              ttl_s=60, run_id="run-a")  # never connected: wrap() only renders the command
            with pytest.raises(LockLost, match="stopped before changing anything more"):
                lease.wrap("systemctl restart sglang")
        finally:
            pg_server.start()
    # The run holding them is over; the process goes on (a long-lived `deploy watch`): its next claim reconnects.
    with claim_hosts(["gpu-1"], "deploy watch (cordon gpu-1)"):
        assert store.current().claims.lost() is None


def _inventory(tmp_path: Path, ts: TeamStore) -> Path:
    """`deploy init`'s example host on a closed loopback port (nothing outside this machine is ever dialled),
    a group, and the team store named in deploy.yaml, as a team's shared inventory does."""
    inv = tmp_path / "inv"
    subprocess.run([sys.executable, "-m", "orchestrator", "init", str(inv)], check=True, capture_output=True)
    hosts = (inv / "hosts.yaml").read_text()
    hosts = hosts.replace("    example: true\n", "").replace("10.1.230.174", "127.0.0.1").replace("port: 22", "port: 1")
    (inv / "hosts.yaml").write_text(hosts)
    (inv / "deploy.yaml").write_text(f"state_url: {ts.url}\nstate_password_file: {ts.password_file}\n"
                                     "groups:\n  g: [pve-gpu-1]\n")
    return inv


def test_overlapping_fleet_rolls_from_two_machines_through_the_cli(team_store: TeamStore, tmp_path: Path) -> None:
    """Machine B holds the group's claims; machine A's `deploy roll group g` (the store named by the inventory) is
    refused before any planning, naming B's user, machine and run; once B is SIGKILLed the claims are free."""
    inv = _inventory(tmp_path, team_store)
    env_b = {**os.environ, **team_store.env(), "DEPLOY_STATE_DIR": str(tmp_path / "b")}
    holder = subprocess.Popen([sys.executable, "-c", HOLD.replace('["gpu-1", "gpu-2"]', '["pve-gpu-1"]')],
                              stdout=subprocess.PIPE, text=True, env=env_b)
    env_a = {k: v for k, v in os.environ.items() if not k.startswith("DEPLOY_STATE_")}
    env_a["DEPLOY_STATE_DIR"] = str(tmp_path / "a")
    roll = [sys.executable, "-m", "orchestrator", "--inventory", str(inv), "roll", "group", "g",
            "--set", "mem-fraction-static=0.8"]
    try:
        assert holder.stdout is not None
        run = holder.stdout.readline().split()[1]
        subprocess.run([*roll[:5], "state", "status"], capture_output=True, env=env_a, check=True)  # warm caches
        started = time.monotonic()
        out = subprocess.run(roll, capture_output=True, text=True, env=env_a, timeout=60)
        took = time.monotonic() - started
        said = out.stdout + out.stderr
        assert out.returncode == 3, said
        assert f"{store.user()}@{store.machine()} pid {holder.pid}" in said and f"(run {run})" in said
        assert "nothing was planned or changed" in said and "Traceback" not in said
        # The whole command, the interpreter's start and imports included (the claim's own refusal is bounded by
        # test_a_claim_held_from_another_machine_is_refused_naming_user_machine_and_run: under 1 s).
        print(f"second roll refused after {took:.2f} s (whole CLI process)")
        status = subprocess.run([sys.executable, "-m", "orchestrator", "--json", "--inventory", str(inv), "state",
                                 "status"], capture_output=True, text=True, env=env_a, check=True)
        assert '"name": "pve-gpu-1"' in status.stdout and f'"run": "{run}"' in status.stdout
    finally:
        holder.kill()
        holder.wait()
    status = subprocess.run([sys.executable, "-m", "orchestrator", "--json", "--inventory", str(inv), "state",
                             "status"], capture_output=True, text=True, env=env_a, check=True)
    assert '"claims": []' in status.stdout


RACER = """
import os, sys, time
from orchestrator.errors import LockHeld
from orchestrator.locks.claims import claim_fleet, claim_hosts
who, log, trials = sys.argv[1], sys.argv[2], int(sys.argv[3])
if who == "watch":  # fleet/watch.py: the host and the router, before it cordons
    claim = lambda: claim_fleet(["gpu-1"], "deploy watch (cordon gpu-1)", router=True)
elif who == "fleet-roll":  # cli/fleet.py
    claim = lambda: claim_fleet(["gpu-1"], "deploy roll group g --set x=1", router=True)
else:  # roll.py: a single-host roll claims its host shared
    claim = lambda: claim_hosts(["gpu-1"], "deploy roll host gpu-1 --set x=1", exclusive=False)
done = refused = 0
while done < trials:
    try:
        with claim():
            fd = os.open(log, os.O_WRONLY | os.O_APPEND)
            os.write(fd, f"enter {who}\\n".encode())
            time.sleep(0.002)
            os.write(fd, f"leave {who}\\n".encode())
            os.close(fd)
            done += 1
    except LockHeld:
        refused += 1
    time.sleep(0.001)
print(refused)
"""


@pytest.mark.parametrize("roll", ["fleet-roll", "host-roll"])
def test_the_watch_on_one_machine_and_a_roll_from_another_never_interleave(machine_a: TeamStore, tmp_path: Path,
                                                                           roll: str) -> None:
    """100 trials each: the watch's claim before it cordons (claim_fleet, router included, as fleet/watch.py
    takes it) and a roll's (a fleet roll's exclusive claim, or a single-host roll's shared one, as roll.py takes
    it), from two state dirs racing for one host: never both inside at once."""
    log = tmp_path / "log"
    log.touch()
    procs = [subprocess.Popen([sys.executable, "-c", RACER, who, str(log), "100"], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "DEPLOY_STATE_DIR": str(tmp_path / who)})
             for who in ("watch", roll)]
    refused = [int(p.communicate(timeout=240)[0]) for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    lines = log.read_text().split()
    events = list(zip(lines[::2], lines[1::2], strict=True))
    assert len(events) == 400
    inside = None
    for verb, who in events:
        if verb == "enter":
            assert inside is None, f"{who} entered while {inside} was inside"
            inside = who
        else:
            assert inside == who
            inside = None
    print(f"{roll}: 400 entries, never interleaved; refusals: watch {refused[0]}, {roll} {refused[1]}")


def test_this_machines_state_never_imports_the_driver(tmp_path: Path) -> None:
    """The default costs a command nothing: no DEPLOY_STATE_URL, no pg8000 (claims, ledger, records)."""
    code = ("import sys\n"
            "from orchestrator.locks.claims import claim_hosts\n"
            "from orchestrator.store import store\n"
            "with claim_hosts(['gpu-1'], 'deploy roll group g'):\n"
            "    store.ledger().record_run(host='gpu-1', bench=None)\n"
            "    store.current().records.put('watch', 'g', '{}')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pg8000', 'scramp')))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEPLOY_STATE_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "DEPLOY_STATE_DIR": str(tmp_path)})
    assert out.stdout.strip() == "[]"
    assert (tmp_path / "watch" / "g.json").stat().st_mode & 0o777 == 0o600 and (tmp_path / "ledger.sqlite").exists()


def test_a_claim_in_the_team_store_imports_nothing_of_the_ledger(team_store: TeamStore, tmp_path: Path) -> None:
    """What a converged `up` does with the store (open, check the schema, claim, release) loads the driver and the
    store's own module, not the ledger's (its models and parsers), which the local default never loads there either
    (tests/perf/state_store_cost.py); the store's schema version is its migrations' count."""
    pg.PgStore.open(store.StoreSettings(team_store.url, team_store.password_file)).close()  # the schema exists
    code = ("import sys\n"
            "from orchestrator.locks.claims import claim_hosts\n"
            "with claim_hosts(['gpu-1'], 'deploy up host gpu-1', exclusive=False):\n"
            "    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('orchestrator.store', 'orchestrator.ledger'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, **team_store.env(), "DEPLOY_STATE_DIR": str(tmp_path)})
    assert "orchestrator.store.pg" in out.stdout and "orchestrator.ledger.sqlite" not in out.stdout, out.stdout
    assert len(pg.migrations()) == pg.SCHEMA_VERSION


def test_state_migrate_and_status_through_the_cli(team_store: TeamStore, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEPLOY_STATE_")}
    env |= {"DEPLOY_STATE_DIR": str(tmp_path / "state"), "DEPLOY_STATE_PASSWORD_FILE": str(team_store.password_file)}
    subprocess.run([sys.executable, "-c", "from orchestrator.ledger.sqlite import Ledger\n"
                    "Ledger().record_run(host='gpu-1', bench=None)\n"], env=env, check=True)
    deploy = [sys.executable, "-m", "orchestrator", "--inventory", str(tmp_path / "none")]
    first = subprocess.run([*deploy, "state", "migrate", "--to", team_store.url], capture_output=True, text=True,
                           env=env)
    assert first.returncode == 0, first.stderr
    assert "1 runs" in first.stdout and "0 already there" in first.stdout
    again = subprocess.run([*deploy, "--json", "state", "migrate", "--to", team_store.url], capture_output=True,
                           text=True, env=env)
    assert again.returncode == 0 and '"already_there": 1' in again.stdout and '"runs": 0' in again.stdout
    bad = subprocess.run([*deploy, "state", "migrate", "--to", team_store.url.replace("deploy@", "deploy:pw@")],
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "carries a password" in bad.stderr and "pw@" not in bad.stderr + bad.stdout
    status = subprocess.run([*deploy, "state", "status"], capture_output=True, text=True,
                            env={**env, "DEPLOY_STATE_URL": team_store.url})
    assert status.returncode == 0 and "named by DEPLOY_STATE_URL" in status.stdout
    assert f"schema version: {pg.SCHEMA_VERSION} (this tool's: {pg.SCHEMA_VERSION})" in status.stdout


RECORDS_ON_B = """
from orchestrator.fleet.rollout import RollStore
from orchestrator.fleet.watch import WatchState
from orchestrator.tune import record
roll = RollStore().unfinished(["gpu-2"])
print(roll.id if roll else None, record.load("t-20261202-230000-ab12").host, WatchState("g").load())
"""


def test_roll_tune_and_watch_records_are_read_from_another_machine(machine_a: TeamStore, tmp_path: Path) -> None:
    """What `roll --resume`, `tune --resume` and the watch read, written on machine A, read on machine B."""
    from orchestrator.fleet.rollout import FleetRoll, HostRoll, RollSpec, RollStore
    from orchestrator.fleet.watch import WatchState
    from orchestrator.tune import record

    roll = FleetRoll(id="fleetroll-20261207T100000-1", command="deploy roll group g --set a=1", targets="group g",
                     inventory="inv", pid=1, started="20261207T100000", updated="", spec=RollSpec(set=["a=1"]),
                     waves=[["gpu-1", "gpu-2"]], hosts=[HostRoll(host=h, wave=0) for h in ("gpu-1", "gpu-2")])
    RollStore().save(roll)
    record.save(record.TuneRecord(tune_id="t-20261202-230000-ab12", host="h1", preset="p", slo="ttft_p99<=2s",
                                  over=[], range="8:64:8", started_at="2026-12-02T23:00:00"))
    WatchState("g").save({"gpu-1": {"since": 1.0, "why": "Xid 79"}})
    assert not (tmp_path / "a").exists()  # nothing written on machine A
    out = subprocess.run([sys.executable, "-c", RECORDS_ON_B], capture_output=True, text=True, check=True,
                         env={**os.environ, "DEPLOY_STATE_DIR": str(tmp_path / "b")})
    assert out.stdout.split(None, 2) == [roll.id, "h1", "{'gpu-1': {'since': 1.0, 'why': 'Xid 79'}}\n"]
    with pytest.raises(ConfigError, match="no tune t-20261202-230000-ffff in the team store"):
        record.load("t-20261202-230000-ffff")


def test_a_watch_save_that_loses_the_store_says_so_and_keeps_its_cordons(pg_server: PgServer, machine_a: TeamStore,
                                                                        tmp_path: Path) -> None:
    """The watch cordoned a host (the router holds it out), then the store is gone when it saves: a clear error
    naming the host and where its record is kept; the next start on this machine reads that record and puts it in
    the store once the store is back (the watch never forgets a host it took out)."""
    from orchestrator.fleet.watch import WatchState

    entry = {"since": "2026-12-07T17:00:00+0000", "why": "xid 79", "url": "http://10.0.0.5:30000"}
    watching = WatchState("prod")  # the watch's own, made at its start
    watching.save({})
    pg_server.stop()
    try:
        with pytest.raises(RemoteError) as caught:
            watching.save({"gpu-2": entry})
        err = caught.value
        assert "record of the hosts it cordoned (gpu-2) could not be saved in the team store" in err.what
        kept = tmp_path / "a" / "watch" / "prod.json"
        assert f"kept in {kept}" in err.fix and "stay out of the router" in err.fix
        assert oct(kept.stat().st_mode & 0o777) == "0o600"
        assert watching.load() == {"gpu-2": entry}  # this process's next cycle
    finally:
        pg_server.start()
    store.reset()  # a new start of the watch on this machine
    state = WatchState("prod")
    assert state.load() == {"gpu-2": entry}
    state.save(state.load())
    assert not (tmp_path / "a" / "watch" / "prod.json").exists()
    assert store.current().records.get("watch", "prod") is not None
    assert WatchState("prod").load() == {"gpu-2": entry}


def test_the_command_files_its_runs_in_the_team_store_with_their_verdict(machine_a: TeamStore, tmp_path: Path
                                                                         ) -> None:
    """Issue 47: the command's filing after the run goes to the team's ledger as it did from the step: each run
    names who recorded it, and carries its gates' verdict (schema 2); nothing lands on this machine."""
    from orchestrator.bench.measured import MeasuredRun
    from orchestrator.commands.filing import file_runs
    from orchestrator.engine.runner import RunReport
    from orchestrator.engine.state import RunState
    from orchestrator.runlog import StepRecord
    from tests.unit.commands.test_filing import bench_run

    gated = MeasuredRun(run=bench_run("r-20261201-030405-dddd", 500.0), step="throughput", source="roll",
                        release="rel-2", preset="e2e", flags={"api-key": "s3cret"}, judged_by=("throughput", "gate"))
    report = RunReport(host="gpu-1", playbook="roll", dry_run=False, state=RunState(measured=[gated]),
                       steps=[StepRecord("throughput"), StepRecord("gate", status="failed")])
    said: list[str] = []
    [rec] = file_runs(report, said.append)
    assert said == []
    got = store.current().ledger().get_run(rec.id)
    assert (got.verdict, got.by, got.flags["api-key"]) == ("rejected", f"{store.user()}@{store.machine()}",
                                                           "<redacted>")
    assert not (tmp_path / "a" / "ledger.sqlite").exists()


def test_migrate_copies_a_ledger_from_before_verdicts(machine_a: TeamStore, tmp_path: Path) -> None:
    """A ledger of schema 3 (no verdict column) copies in; its runs have no verdict. One of schema 4 keeps them."""
    import sqlite3

    from orchestrator.ledger.sqlite import MIGRATIONS

    old = tmp_path / "old.sqlite"
    conn = sqlite3.connect(old)
    for migration in MIGRATIONS[:3]:
        conn.executescript(migration)
    conn.execute("INSERT INTO runs (id, host, started_at, source) VALUES ('r-20261130-020000-eeee', 'gpu-1', "
                 "'2026-11-30T02:00:00', 'roll')")
    conn.commit()
    conn.close()
    new = Ledger(tmp_path / "new.sqlite")
    kept = new.record_run(host="gpu-1", bench=None, source="roll", verdict="passed")
    remote = pg.PgStore.open(store.StoreSettings(machine_a.url, machine_a.password_file))
    try:
        assert remote.import_local(old, store.LocalRecords()).runs == 1
        assert remote.import_local(new.path, store.LocalRecords()).runs == 1
        assert remote.ledger().get_run("r-20261130-020000-eeee").verdict is None
        assert remote.ledger().get_run(kept.id).verdict == "passed"
    finally:
        remote.close()
