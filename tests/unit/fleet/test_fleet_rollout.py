"""Fleet roll planning (waves), its record on the operator machine, and the drain's in-flight reading. Pure parts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.flags.digest import flags_sha
from orchestrator.fleet.rollout import (
    FleetRoll,
    HostRoll,
    RollSpec,
    RollStore,
    batch_size,
    plan_waves,
    process_alive,
)
from orchestrator.router.drain import in_flight
from tests.shared import EXAMPLE_INVENTORY

HOSTS = [f"h{i}" for i in range(1, 9)]


def test_canary_first_then_waves_of_a_percentage_of_the_whole_fleet() -> None:
    assert plan_waves(HOSTS, canary=1, batch="25%") == [["h1"], ["h2", "h3"], ["h4", "h5"], ["h6", "h7"], ["h8"]]
    assert plan_waves(HOSTS[:4], canary=1, batch="25%") == [["h1"], ["h2"], ["h3"], ["h4"]]
    assert plan_waves(HOSTS[:3], canary=2, batch="10") == [["h1", "h2"], ["h3"]]
    assert plan_waves(HOSTS[:3], canary=0, batch="1") == [["h1"], ["h2"], ["h3"]]
    assert plan_waves(HOSTS[:2], canary=2, batch="50%") == [["h1", "h2"]]


def test_batch_rounds_up_and_never_is_zero() -> None:
    assert batch_size("25%", 3) == 1 and batch_size("34%", 3) == 2 and batch_size("1%", 500) == 5
    assert batch_size("100%", 7) == 7 and batch_size("3", 2) == 3


@pytest.mark.parametrize("batch", ["0", "0%", "150%", "-1", "a", "2.5", ""])
def test_bad_batch_is_refused(batch: str) -> None:
    with pytest.raises(ConfigError, match="--batch"):
        batch_size(batch, 4)


def test_canary_larger_than_the_fleet_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"--canary 5: the targets have 4 host\(s\)"):
        plan_waves(HOSTS[:4], canary=5, batch="1")


def test_flags_sha_is_order_independent_and_changes_with_a_value() -> None:
    a = flags_sha({"tp-size": 8, "num-continuous-decode-steps": 8})
    assert a == flags_sha({"num-continuous-decode-steps": 8, "tp-size": 8}) and len(a) == 12
    assert a != flags_sha({"tp-size": 8, "num-continuous-decode-steps": 4})


def _roll(roll_id: str, hosts: list[str], state: str = "running", pid: int = 0) -> FleetRoll:
    return FleetRoll(id=roll_id, command="deploy roll group prod --set a=1", targets="group prod", inventory="inv",
                     pid=pid, started=roll_id[9:], updated="", state=state,  # type: ignore[arg-type]
                     spec=RollSpec(set=["a=1"]), waves=[hosts], hosts=[HostRoll(host=h, wave=0) for h in hosts])


def test_store_finds_unfinished_and_last_rolls_by_host_overlap(tmp_path: Path) -> None:
    store = RollStore(tmp_path / "rolls")
    assert store.all() == [] and store.unfinished(["a"]) is None and store.last(["a"]) is None
    store.save(_roll("fleetroll-20261130T100000-1", ["a", "b"], state="done"))
    store.save(_roll("fleetroll-20261130T110000-2", ["b", "c"], state="running"))
    store.save(_roll("fleetroll-20261130T120000-3", ["d"], state="failed"))
    assert oct((tmp_path / "rolls").stat().st_mode & 0o777) == "0o700"
    unfinished = store.unfinished(["a", "b"])
    assert unfinished is not None and unfinished.id.endswith("-2")
    assert store.unfinished(["a", "d"]) is None
    last = store.last(["a", "b"])
    assert last is not None and last.id.endswith("-1")  # exactly these hosts beats a newer overlapping one
    other = store.last(["c"])
    assert other is not None and other.id.endswith("-2")
    loaded = store.last(["d"])
    assert loaded is not None and loaded.host("d").state == "pending" and loaded.spec.set == ["a=1"]


def test_a_secret_flag_stays_out_of_the_record_and_resume_still_gets_it(tmp_path: Path) -> None:
    """`--set admin-api-key=…` (a secret by its name) and a value the redactor learnt (a profile's secret_flags):
    the record says <redacted>; only the 0600 replay copy of the unfinished roll holds them, and it goes at the end."""
    from orchestrator.redact import forget_secrets, register_secret

    store = RollStore(tmp_path / "rolls")
    register_secret("profile-marked-VALUE-42")
    try:
        roll = _roll("fleetroll-20261130T100000-1", ["a", "b"])
        roll.command = "deploy roll group prod --set admin-api-key=KEY-abcdef123 --set my-flag=profile-marked-VALUE-42"
        roll.spec = RollSpec(set=["admin-api-key=KEY-abcdef123", "my-flag=profile-marked-VALUE-42", "a=1"])
        store.save(roll)
        record = store.path(roll.id).read_text()
        assert "KEY-abcdef123" not in record and "profile-marked-VALUE-42" not in record
        assert "a=1" in record and "<redacted>" in record
        replay = store.replay_path(roll.id)
        assert oct(replay.stat().st_mode & 0o777) == "0o600"
        assert [r.id for r in store.all()] == [roll.id]  # the replay copy is not a second roll
        resumed = store.unfinished(["a"])
        assert resumed is not None and resumed.spec.set == roll.spec.set and resumed.command == roll.command
        roll.state = "done"
        store.save(roll)
        assert not replay.exists() and "KEY-abcdef123" not in store.path(roll.id).read_text()
        plain = _roll("fleetroll-20261130T110000-2", ["c"])
        store.save(plain)
        assert not store.replay_path(plain.id).exists()
    finally:
        forget_secrets()


def test_an_unreadable_record_is_named(tmp_path: Path) -> None:
    store = RollStore(tmp_path)
    (tmp_path / "fleetroll-x.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"fleetroll-x\.json is unreadable"):
        store.all()


def test_process_alive_is_false_for_a_dead_pid_and_for_this_process() -> None:
    assert process_alive(os.getpid()) is False  # a resumed record names this process: never "still running"
    assert process_alive(0) is False
    assert process_alive(2**22 + 12345) is False


SGLANG_METRICS = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="glm-5"} 3.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="glm-5"} 2.0
sglang:gen_throughput{model_name="glm-5"} 811.5
"""


def test_in_flight_sums_running_and_queued_requests() -> None:
    assert in_flight(SGLANG_METRICS) == 5
    assert in_flight(SGLANG_METRICS.replace("3.0", "0.0").replace("2.0", "0.0")) == 0
    assert in_flight("# nothing\nsglang:gen_throughput 1.0\n") is None


# ---------------------------------------------------------------------------------------- CLI refusals (no host)
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`deploy` against a two-host inventory on a loopback address where nothing listens (never reached)."""
    inv = tmp_path / "inventory"
    shutil.copytree(EXAMPLE_INVENTORY, inv)
    hosts = (inv / "hosts.yaml").read_text().replace("10.1.230.174", "127.0.0.254")
    (inv / "hosts.yaml").write_text(hosts)
    (inv / "groups.yaml").write_text("groups:\n  prod: [pve-gpu-1]\n")
    env = {**os.environ, "DEPLOY_STATE_DIR": str(tmp_path / "state")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator", "--inventory", str(inv), *args],
                              capture_output=True, text=True, cwd=REPO, timeout=60, env=env)

    return run


def test_fleet_only_options_are_refused_for_one_host(cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    res = cli("roll", "host", "pve-gpu-1", "--set", "max-running-requests=64", "--canary", "1", "--rollback-all")
    assert res.returncode == 2 and "--canary, --rollback-all apply to fleet rolls" in res.stderr
    res = cli("rollback", "group", "prod", "--to", "20261130T000000-abcdef12")
    assert res.returncode == 2 and "--to names one host's release" in res.stderr
    res = cli("roll", "group", "prod", "--resume", "--set", "max-running-requests=64")
    assert res.returncode == 2 and "--resume replays the interrupted fleet roll" in res.stderr


def test_resume_and_rollback_without_a_record_say_so(cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    res = cli("roll", "group", "prod", "--resume")
    assert res.returncode == 2 and "no unfinished fleet roll of group prod to resume" in res.stderr
    res = cli("rollback", "group", "prod")
    assert res.returncode == 2 and "no fleet roll of group prod is recorded on this machine" in res.stderr


def test_a_roll_is_refused_while_an_interrupted_one_is_unfinished(
        cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    roll = _roll("fleetroll-20261130T100000-1", ["pve-gpu-1"])
    roll.hosts[0].state = "in_progress"
    RollStore(tmp_path / "state" / "fleet-rolls").save(roll)
    res = cli("roll", "group", "prod", "--set", "max-running-requests=64")
    assert res.returncode == 2, res.stderr
    assert "fleet roll fleetroll-20261130T100000-1" in res.stderr and "did not finish" in res.stderr
    assert "deploy roll group prod --resume" in res.stderr and "deploy rollback group prod" in res.stderr


def test_to_revert_is_every_host_the_roll_moved_off_its_release() -> None:
    roll = _roll("fleetroll-20261130T100000-1", ["a", "b", "c", "d", "e", "f"])
    states = {"a": ("rolled", "r2"), "b": ("in_progress", "r1"), "c": ("failed", "r2"), "d": ("failed", "r1"),
              "e": ("rolled_back", "r1"), "f": ("untouched", "r1")}
    for h in roll.hosts:
        h.state, h.release = states[h.host]  # type: ignore[assignment]
        h.previous_release = "r1"
    assert roll.to_revert() == ["a", "b", "c"]
    roll.host("a").previous_release = None  # already on the flags before this roll: nothing to put back
    assert roll.to_revert() == ["b", "c"]
