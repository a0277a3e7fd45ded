"""A running sglang-router 0.3.2 migrated to smg 1.13.0 by `deploy up`, end to end (issue 37): the real CLI, two
simulated hosts, both REAL router wheels, the router in the first host's CT 120 (an unprivileged LXC container),
managed by `up`.

Why these tests: the migration must lose no request, and a failed gate must leave 0.3.2 serving with nothing of
the migration left behind. The load is tests/e2e's own clients (non-streaming chat on two threads, streaming
chat on one; each request bounded in tokens and time), through the router's public address for the whole
migration. Same host numbers as test_fleet_router.py (OFFSET_ROUTER_UP): modules run one after another in a
process, so the roots are never up at once. The tests run in file order: the failed gate first, on 0.3.2.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import requests

from tests.e2e.conftest import Result, until
from tests.e2e.fleet_harness import fleet_root
from tests.e2e.test_fleet_roll import Client
from tests.e2e.test_fleet_router import RouterFleet
from tests.e2e.test_fleet_smg import Streams
from tests.sim_hosts import OFFSET_ROUTER_UP

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]
ROUTER_YAML = "router:\n  package: {package}\n  runs_on: {host}\n  policy: round_robin\n  workers: prod\n"
SQUAT = "deploy-test-squat"


@pytest.fixture(scope="module")
def mfleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterFleet]:
    with fleet_root(tmp_path_factory, "deploy-sim-router-mig", OFFSET_ROUTER_UP, 2) as base:
        fleet = RouterFleet(env=base.env, names=base.names, root=base.root, infos=base.infos,
                            router_yaml=ROUTER_YAML.format(package="sglang-router", host=base.names[0]))
        fleet.write_router()
        up = fleet.env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=1200)
        assert up.rc == 0, up.text
        assert _package(fleet) == "sglang_router"
        yield fleet


def _ct(fleet: RouterFleet, command: str) -> str:
    return fleet.host_env(fleet.names[0]).ct(command).stdout.strip()


def _package(fleet: RouterFleet) -> str:
    """The module the router unit's launcher imports (what runs on the public port)."""
    return _ct(fleet, "sed -n 's/^from \\([a-z_]*\\)\\.launch_router.*/\\1/p' /etc/sglang-router/launch.py")


def _left(fleet: RouterFleet) -> dict[str, str]:
    """What a migration may leave in the router's container: the staging unit (state, file) and the nft table."""
    return {"staging": _ct(fleet, "systemctl is-active sglang-router-staging || true"),
            "staging_file": _ct(fleet, "ls /etc/systemd/system/sglang-router-staging.service 2>/dev/null || true"),
            "nft": _ct(fleet, "command -v nft >/dev/null && nft list tables || true")}


def _serves(fleet: RouterFleet) -> bool:
    body = {"model": "glm-5", "max_tokens": 4, "messages": [{"role": "user", "content": "1 + 1?"}]}
    return requests.post(f"{fleet.url}/v1/chat/completions", json=body, timeout=60).status_code == 200


def _up_under_load(fleet: RouterFleet, tail: int = 3000) -> tuple[Result, Client, Streams]:
    """`up group prod` while a non-streaming and a streaming client send through the public address (from before
    it starts until two more requests answered after it): its result (exit 0 checked) and the clients' counts."""
    with Client(fleet.url, resend_closed_keepalive=True) as client, \
            Streams(fleet.url, resend_closed_keepalive=True) as streams:
        assert until(lambda: client.ok >= 2 and streams.ok >= 1, 60), (client.failed[:5], streams.failed[:5])
        res = fleet.env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
        after = client.ok
        assert until(lambda: client.ok >= after + 2, 60), client.failed[:5]
    print(res.stdout[-tail:])  # docs/fleet.md (pytest -s)
    print("requests:", client.ok, "streams:", streams.ok, "sent again after a keep-alive close:",
          client.resent + streams.resent)
    assert res.rc == 0, res.text
    return res, client, streams


def test_a_failed_staging_gate_leaves_0_3_2_serving_and_nothing_behind(mfleet: RouterFleet) -> None:
    """The staging port is taken in the router's container (a real listener): the staging smg cannot start, the
    migration stops with exit 1 and the evidence, 0.3.2 still serves, no staging unit, no nft table."""
    fleet = mfleet
    _ct(fleet, f"systemd-run --unit {SQUAT} python3 -c 'import socket, time; s = socket.socket(); "
               "s.bind((\"0.0.0.0\", 30010)); s.listen(); time.sleep(3600)'")
    try:
        assert until(lambda: ":30010" in _ct(fleet, "ss -Hltn"), 30)
        (fleet.env.inventory / "router.yaml").write_text(ROUTER_YAML.format(package="smg", host=fleet.names[0]))
        res = fleet.env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
    finally:
        _ct(fleet, f"systemctl stop {SQUAT} || true")
    print(res.text[-3000:])  # docs/troubleshooting.md's example of a failed gate (pytest -s)
    assert res.rc == 1, res.text
    for part in ("router: migration: stage smg on :30010", "the staging smg on :30010 failed its gate",
                 "port 30010 is taken in the router's container",
                 "the running sglang-router still serves on :30000"):
        assert part in res.text, res.text
    assert _package(fleet) == "sglang_router" and _serves(fleet)
    assert _left(fleet) == {"staging": "inactive", "staging_file": "", "nft": ""}, _left(fleet)


def test_migration_under_load_loses_no_request(mfleet: RouterFleet) -> None:
    """Streaming and non-streaming clients through the public address during the whole migration: none fails,
    no stream is cut short; afterwards smg runs on the public port, `status group` says so, nothing is left."""
    fleet = mfleet
    (fleet.env.inventory / "router.yaml").write_text(ROUTER_YAML.format(package="smg", host=fleet.names[0]))
    # the router itself stops here (0.3.2, then the staging smg): a client racing the close of its kept-alive
    # connection sends that request again, as HTTP allows and the OpenAI SDK does (closed_before_any_response)
    res, client, streams = _up_under_load(fleet, tail=4000)  # docs/fleet.md's example run (pytest -s)
    assert res.rc == 0, res.text
    assert client.failed == [] and streams.failed == [] and streams.truncated == 0, (
        client.failed[:5], streams.failed[:5], streams.truncated)
    assert client.ok > 10 and streams.ok > 3
    for line in ("router: migration: stage smg on :30010", "router: migration: staging smg ready",
                 "router: migration: new connections on :30000 go to the staging smg",
                 "router: migration: sglang-router finished its requests and stopped in",
                 "router: migration: smg runs as sglang-router on :30000",
                 "router: migration: redirect removed; the staging smg finished its",
                 "changed — migrated sglang-router to smg 1.13.0 (2 worker(s)), no restart"):
        assert line in res.stdout, res.stdout
    assert _package(fleet) == "smg"
    assert _left(fleet) == {"staging": "inactive", "staging_file": "", "nft": ""}, _left(fleet)
    assert _ct(fleet, "pgrep -f [/]opt/sglang-router/bin/python || true") == ""
    status = fleet.env.run("status", "group", "prod")
    assert re.search(rf"router {re.escape(fleet.url)} \({fleet.names[0]} CT 120, smg, unit active\): 2 worker\(s\), "
                     "2 healthy", status.stdout), status.stdout
    again = fleet.env.run("--json", "up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
    assert again.rc == 0 and again.json["router"]["result"] == "ok", again.text


def test_a_migration_killed_after_the_redirect_is_undone_and_redone_by_the_next_up(mfleet: RouterFleet) -> None:
    """Back on 0.3.2 (smg → 0.3.2 is a restart), then `up` with smg SIGKILLed once new connections go to the
    staging smg: the staging smg and the redirect stay and serve, `status group` names them, and the next `up`
    undoes that (0.3.2 still serves) and migrates again, or completes it (0.3.2 was already stopping)."""
    import signal

    fleet = mfleet
    fleet.write_router()  # package: sglang-router
    back = fleet.env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
    assert back.rc == 0 and _package(fleet) == "sglang_router", back.text
    (fleet.env.inventory / "router.yaml").write_text(ROUTER_YAML.format(package="smg", host=fleet.names[0]))
    fleet.env.env["PYTHONUNBUFFERED"] = "1"
    proc = fleet.env.popen("up", "group", "prod", "--skip-bench", "--skip-weights", lock_ttl_s=5)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "migration: new connections on :30000 go to the staging smg" in line:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "".join(seen)
    left = _left(fleet)
    assert left["staging"] == "active" and "deploy_mig" in left["nft"], left
    assert _serves(fleet)  # new connections reach the staging smg, which serves
    status = fleet.env.run("status", "group", "prod")
    assert "an interrupted migration left staging unit sglang-router-staging (active) and nft table ip deploy_mig: " \
           "run deploy up" in status.stdout, status.stdout
    res = fleet.env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
    assert res.rc == 0, res.text
    print(res.stdout[-3000:])  # docs/fleet.md (pytest -s)
    # killed before 0.3.2's stop began (the usual case): undone, then migrated again; a kill that raced into the
    # switch's graceful stop leaves 0.3.2 stopped: completed
    assert ("router: migration: undoing an interrupted migration" in res.stdout
            and "changed — undid an interrupted migration, then migrated sglang-router to smg 1.13.0" in res.stdout
            ) or (
            "router: migration: completing an interrupted migration" in res.stdout), res.stdout
    assert _package(fleet) == "smg" and _serves(fleet)
    assert _left(fleet) == {"staging": "inactive", "staging_file": "", "nft": ""}, _left(fleet)


def test_a_migration_killed_in_its_finish_is_completed_without_stopping_the_serving_smg(mfleet: RouterFleet) -> None:
    """Back on 0.3.2, then the router section without `package:` (smg is the default: `plan` says the running
    0.3.2 would be migrated, issue 50, 14), then `up` SIGKILLed once its finish began (smg serves the public port,
    the staging smg still runs behind a redirect table that no longer redirects): the next `up`, under client
    load, gates the serving smg and finishes; it never stops it (its process is the same before and after) and no
    request fails (issue 50, 3: the resume took the staging unit's `active` for a switch still to do and stopped
    the serving smg: connections refused, 404s)."""
    import signal

    fleet = mfleet
    fleet.write_router()  # package: sglang-router
    back = fleet.env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
    assert back.rc == 0 and _package(fleet) == "sglang_router", back.text
    (fleet.env.inventory / "router.yaml").write_text(ROUTER_YAML.replace("  package: {package}\n", "").format(
        host=fleet.names[0]))
    plan = fleet.env.run("plan", "group", "prod", timeout=600)
    assert plan.rc == 0, plan.text
    assert ("migrate the running sglang-router to smg 1.13.0 (the inventory names no router.package: smg is the "
            "default) with no request dropped") in plan.stdout, plan.stdout
    assert _package(fleet) == "sglang_router" and not _left(fleet)["staging_file"]  # a plan changes nothing
    fleet.env.env["PYTHONUNBUFFERED"] = "1"
    proc = fleet.env.popen("up", "group", "prod", "--skip-bench", "--skip-weights", lock_ttl_s=5)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "migration: new connections on :30000 reach sglang-router again" in line:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "".join(seen)
    assert _package(fleet) == "smg" and _left(fleet)["staging_file"], _left(fleet)
    serving_pid = _ct(fleet, "systemctl show -p MainPID --value sglang-router")
    assert serving_pid not in ("", "0")
    res, client, streams = _up_under_load(fleet)
    assert "router: migration: finishing an interrupted migration" in res.stdout, res.stdout
    assert "smg already serves :30000 as sglang-router: checked, not restarted" in res.stdout, res.stdout
    assert re.search(r"changed — finished what an interrupted migration left \(staging unit sglang-router-staging "
                     r"\(active(, draining)?\) and nft table ip deploy_mig \(no longer redirecting\)\); "
                     r"unit unchanged, router active with 2 worker\(s\)", res.stdout), res.stdout
    assert client.failed == [] and streams.failed == [] and streams.truncated == 0, (
        client.failed[:5], streams.failed[:5], streams.truncated)
    assert _ct(fleet, "systemctl show -p MainPID --value sglang-router") == serving_pid
    assert _package(fleet) == "smg" and _serves(fleet)
    assert _left(fleet) == {"staging": "inactive", "staging_file": "", "nft": ""}, _left(fleet)


@pytest.mark.parametrize(("package", "module", "value"), [("smg", "smg", 61), ("sglang-router", "sglang_router", 62)])
def test_a_flag_change_of_a_running_router_hands_the_port_over_with_no_request_lost(
        mfleet: RouterFleet, package: str, module: str, value: int) -> None:
    """smg (or sglang-router 0.3.2: smg → 0.3.2 is a restart) serves the public port; a `router.flags` change under
    client load: `up` hands the port over through a staging router of the same package (stage, redirect, graceful
    stop, final unit, finish), not a restart, and no request fails (issue 50, 11: flag and version changes of the
    router were plain restarts); the unit it writes lets the grace period run (TimeoutStopSec = 180 + 15; it was
    30, which killed smg while it finished its streams)."""
    fleet = mfleet
    yaml = ROUTER_YAML.format(package=package, host=fleet.names[0])
    (fleet.env.inventory / "router.yaml").write_text(yaml)
    first = fleet.env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
    assert first.rc == 0 and _package(fleet) == module, first.text
    old_pid = _ct(fleet, "systemctl show -p MainPID --value sglang-router")
    (fleet.env.inventory / "router.yaml").write_text(yaml + f"  flags:\n    queue-timeout-secs: {value}\n")
    plan = fleet.env.run("plan", "group", "prod", timeout=600)
    assert (f"hand the public port over to the new router through a staging {package}, no request dropped"
            in plan.stdout), plan.stdout
    res, client, streams = _up_under_load(fleet)
    for line in (f"router: migration: stage {package} on :30010",
                 f"router: migration: {package} runs as sglang-router on :30000",
                 "router: migration: redirect removed;"):
        assert line in res.stdout, res.stdout
    assert client.failed == [] and streams.failed == [] and streams.truncated == 0, (
        client.failed[:5], streams.failed[:5], streams.truncated)
    unit = _ct(fleet, "cat /etc/systemd/system/sglang-router.service")
    assert "TimeoutStopSec=195" in unit and f"--queue-timeout-secs {value}" in unit and _package(fleet) == module, \
        unit
    assert _ct(fleet, "systemctl show -p MainPID --value sglang-router") != old_pid
    assert _left(fleet) == {"staging": "inactive", "staging_file": "", "nft": ""}, _left(fleet)
