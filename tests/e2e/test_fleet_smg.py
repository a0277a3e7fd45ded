"""A fleet roll behind the REAL smg 1.13.0 (the SGLang Model Gateway), end to end (issue 37): the real CLI, three
simulated hosts, smg started on this machine with the health settings deploy's unit gives it, named in the
inventory's router section with `package: smg`.

Why a module of its own: smg drains a removed worker itself (listed `draining`, its active requests counted in
`smg_worker_requests_active` until they finish), and the roll waits on that count; the test drives streaming and
non-streaming requests through smg during a canary roll and checks that none fails, no stream is cut short and
smg never has 0 ready workers, and reports each host's drain time ("out of selection" to "0 active"). It uses the
numbers of tests/e2e/test_fleet.py's fleet (OFFSET_FLEET, OFFSET_FLEET_ROUTER): modules run one after another in a
process, so the roots are never up at once.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests import sim_hosts
from tests.e2e.conftest import until
from tests.e2e.fleet_harness import RoutedFleet, fleet_root, worker_urls
from tests.e2e.test_fleet_roll import CHAT, FLAG, Client, post_chat
from tests.sim_hosts import OFFSET_FLEET, OFFSET_FLEET_ROUTER, claim

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]
DRAIN = re.compile(r"out of selection to 0 active: ([0-9.]+) s \((\S+) active at removal")


@pytest.fixture(scope="module")
def smg_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RoutedFleet]:
    if os.geteuid() != 0:
        pytest.skip("the simulator's router venv lives under /var/cache/deploy-sim (root)")
    from orchestrator.router.release import SMG_HEALTH_FLAGS
    from simulator.router import start_router, stop_router

    with fleet_root(tmp_path_factory, "deploy-sim-smgroll", OFFSET_FLEET, 3) as base:
        up = base.env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=1200)
        assert up.rc == 0, up.text
        urls = worker_urls(base)
        address = sim_hosts.address(claim(OFFSET_FLEET_ROUTER, ports=(30000, 30001)))
        run_dir = tmp_path_factory.mktemp("smg-router")
        health = [a for k, v in SMG_HEALTH_FLAGS.items() for a in (f"--{k}", str(v))]
        try:
            start_router(run_dir, address, 30000, list(urls.values()), policy="round_robin", extra=health,
                         package="smg")
            (base.env.inventory / "router.yaml").write_text(
                f"router:\n  package: smg\n  host: {address}\n  port: 30000\n  policy: round_robin\n"
                "  workers: prod\n  flags:\n    prometheus-port: 30001\n")
            fleet = RoutedFleet(env=base.env, names=base.names, root=base.root, infos=base.infos,
                                router=f"http://{address}:30000", urls=urls)
            assert until(lambda: all(fleet.listed().values()), 120), fleet.listed()
            yield fleet
        finally:
            stop_router(run_dir)


class Streams:
    """Streaming chat completions through the router on one thread: a stream that ends without `data: [DONE]`
    is truncated; each request is bounded (24 tokens, 60 s). `resend_closed_keepalive` as for `Client`."""

    def __init__(self, base: str, resend_closed_keepalive: bool = False) -> None:
        self.base, self.ok, self.truncated, self.resent = base, 0, 0, 0
        self.failed: list[str] = []
        self._resend = resend_closed_keepalive
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _post(self, s: Any) -> Any:
        resp, resent = post_chat(s, self.base, {**CHAT, "stream": True}, self._resend, stream=True)
        self.resent += resent
        return resp

    def _loop(self) -> None:
        import requests

        with requests.Session() as s:
            while not self._stop.is_set():
                try:
                    with self._post(s) as resp:
                        if resp.status_code != 200:
                            self.failed.append(f"{resp.status_code} {resp.text[:200]}")
                            continue
                        lines = [ln for ln in resp.iter_lines(decode_unicode=True) if ln]
                    if lines and lines[-1] == "data: [DONE]":
                        self.ok += 1
                    else:
                        self.truncated += 1
                except Exception as exc:  # every failure counts, whatever its kind
                    self.failed.append(repr(exc))

    def __enter__(self) -> Streams:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=90)


class ReadyWatch:
    """smg's /readiness every 0.2 s: the lowest count of healthy workers it reported during the roll."""

    def __init__(self, base: str) -> None:
        self.base, self.lowest, self.reads = base, 99, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import requests

        while not self._stop.wait(0.2):
            try:
                doc = requests.get(f"{self.base}/readiness", timeout=5).json()
                self.lowest = min(self.lowest, int(doc.get("healthy_workers", 0)))
                self.reads += 1
            except Exception:  # an unanswered probe is no reading
                continue

    def __enter__(self) -> ReadyWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def test_canary_roll_behind_smg_drains_each_host_and_loses_no_request(smg_fleet: RoutedFleet) -> None:
    fleet = smg_fleet
    with ReadyWatch(fleet.router) as ready, Client(fleet.router) as client, Streams(fleet.router) as streams:
        assert until(lambda: client.ok >= 2 and streams.ok >= 1, 60), (client.failed[:5], streams.failed[:5])
        res = fleet.env.run("--json", "roll", "group", "prod", "--set", f"{FLAG}=4", "--canary", "1", "--batch", "1",
                            "--max-unavailable", "1", "--skip-bench", timeout=900)
        after_roll = client.ok
        assert until(lambda: client.ok >= after_roll + 2, 60)
    assert res.rc == 0, res.text
    hosts = {h["host"]: h for h in res.json["hosts"]}
    drains = {}
    for name in fleet.names:
        h = hosts[name]
        assert h["result"] == "rolled" and "back in the router, healthy" in h["router"], h
        m = DRAIN.search(h["router"])
        assert m is not None, h["router"]  # the roll waited on smg's own count
        drains[name] = {"drain_s": float(m.group(1)), "active_at_removal": m.group(2)}
    print("per-host drain (out of selection -> 0 active):", json.dumps(drains))  # the report's figure (pytest -s)
    assert all(fleet.listed().values())
    assert client.failed == [] and streams.failed == [] and streams.truncated == 0, (
        client.failed[:5], streams.failed[:5], streams.truncated)
    assert client.ok > 10 and streams.ok > 3
    assert ready.reads > 10 and ready.lowest >= 1, (ready.reads, ready.lowest)  # never 0 ready workers
    text = fleet.env.run("status", "group", "prod").stdout
    assert text.count("router: healthy") == 3, text


def test_a_single_host_roll_and_rollback_of_a_worker_drain_it_first_and_lose_no_request(
        smg_fleet: RoutedFleet) -> None:
    """`roll host` and `rollback host` of one worker behind smg: a bad flag is refused with smg untouched; the
    roll and the rollback each take the host out of selection, wait for its requests, restart it and add it back;
    streaming and non-streaming clients through smg see no failure and no cut stream (before, the host restarted
    in place and smg sent requests to a server that was stopping)."""
    fleet = smg_fleet
    host = fleet.names[1]
    bad = fleet.env.run("roll", "host", host, "--set", "no-such-server-flag=1", "--skip-bench", timeout=300)
    assert bad.rc == 2 and "out of the router" not in bad.text, bad.text
    unknown = fleet.env.run("rollback", "host", host, "--to", "20991231T000000-deadbeef", timeout=300)
    assert unknown.rc == 2 and "no release '20991231T000000-deadbeef'" in unknown.text, unknown.text
    assert "out of the router" not in unknown.text, unknown.text
    assert all(fleet.listed().values())
    with ReadyWatch(fleet.router) as ready, Client(fleet.router) as client, Streams(fleet.router) as streams:
        assert until(lambda: client.ok >= 2 and streams.ok >= 1, 60), (client.failed[:5], streams.failed[:5])
        roll = fleet.env.run("roll", "host", host, "--set", f"{FLAG}=7", "--skip-bench", timeout=600)
        back = fleet.env.run("rollback", "host", host, timeout=600)
        after = client.ok
        assert until(lambda: client.ok >= after + 2, 60)
    print(roll.stdout, back.stdout)  # docs/roll.md's example run (pytest -s)
    for res in (roll, back):
        assert res.rc == 0, res.text
        assert f"{host} ({fleet.urls[host]}) is out of the router while it restarts" in res.stdout, res.stdout
        assert f"{host} is back in the router, healthy" in res.stdout, res.stdout
    assert client.failed == [] and streams.failed == [] and streams.truncated == 0, (
        client.failed[:5], streams.failed[:5], streams.truncated)
    assert ready.lowest >= 1, ready.lowest
    assert until(lambda: all(fleet.listed().values()), 60), fleet.listed()


def test_up_host_of_a_worker_drains_it_only_when_its_server_restarts(smg_fleet: RoutedFleet) -> None:
    """`up host` of one worker behind smg: a converged host restarts nothing and is not drained; a profile whose
    flags changed makes a new release, so the host is drained first (its plan named the restarting step), converged
    and added back, with no client request failed or stream cut; `--no-drain` is refused for a fleet up."""
    from tests.e2e.conftest import write_profiles

    fleet = smg_fleet
    host = fleet.names[2]
    same = fleet.env.run("up", "host", host, "--skip-bench", "--skip-weights", timeout=600)
    assert same.rc == 0 and "out of the router" not in same.stdout, same.text
    refused = fleet.env.run("up", "group", "prod", "--no-drain", timeout=120)
    assert refused.rc == 2 and "--no-drain is for one host (`up host`)" in refused.stderr, refused.text
    fleet.env.set_profile(flags={FLAG: 9})
    try:
        with ReadyWatch(fleet.router) as ready, Client(fleet.router) as client, Streams(fleet.router) as streams:
            assert until(lambda: client.ok >= 2 and streams.ok >= 1, 60), (client.failed[:5], streams.failed[:5])
            up = fleet.env.run("up", "host", host, "--skip-bench", "--skip-weights", timeout=600)
            after = client.ok
            assert until(lambda: client.ok >= after + 2, 60)
    finally:  # the profile's own flags again, for the module's other tests
        fleet.env.profile_overrides["flags"].pop(FLAG, None)
        write_profiles(fleet.env.inventory, fleet.env.profile_overrides)
    print(up.stdout)  # docs/up.md's example run (pytest -s)
    assert up.rc == 0, up.text
    assert (f"{host} is a router worker and this run restarts its server (server_unit would change): it is drained "
            "from the router as its restart begins") in up.stdout, up.stdout
    assert f"{host} ({fleet.urls[host]}) is out of the router while it restarts" in up.stdout, up.stdout
    assert f"{host} is back in the router, healthy" in up.stdout, up.stdout
    assert client.failed == [] and streams.failed == [] and streams.truncated == 0, (
        client.failed[:5], streams.failed[:5], streams.truncated)
    assert ready.lowest >= 1, ready.lowest
    # the profile's own flags again: another restart, drained again
    back = fleet.env.run("up", "host", host, "--skip-bench", "--skip-weights", timeout=600)
    assert back.rc == 0 and f"{host} is back in the router, healthy" in back.stdout, back.text
    assert until(lambda: all(fleet.listed().values()), 60), fleet.listed()


def test_router_remove_waits_for_a_long_stream_smg_still_counts(smg_fleet: RoutedFleet) -> None:
    """`deploy router remove` of a host with a long stream in flight: smg keeps it `draining`, the command waits
    until smg counts 0 active on it, and the stream ends whole."""
    import requests

    fleet = smg_fleet
    victim = fleet.names[0]
    ends: list[str] = []
    took: list[float] = []

    def stream() -> None:
        began = time.monotonic()
        body = {"model": "glm-5", "prompt": "Count slowly.", "max_tokens": 3000, "ignore_eos": True, "stream": True}
        with requests.post(f"{fleet.router}/v1/completions", json=body, stream=True, timeout=120) as resp:
            lines = [ln for ln in resp.iter_lines(decode_unicode=True) if ln]
        ends.append(lines[-1] if lines else f"{resp.status_code} (no line)")
        took.append(time.monotonic() - began)

    threads = [threading.Thread(target=stream) for _ in fleet.names]  # round robin: one on each host
    for t in threads:
        t.start()
    assert until(lambda: _active(fleet, fleet.urls[victim]) > 0, 30)
    res = fleet.env.run("router", "remove", victim, timeout=300)
    for t in threads:
        t.join(timeout=150)
    print(res.stdout, "streams took", [f"{t:.1f}" for t in took])  # docs/fleet.md's example run (pytest -s)
    assert res.rc == 0, res.text
    m = DRAIN.search(res.stdout)
    assert m is not None and int(m.group(2)) >= 1 and float(m.group(1)) > 1.0, res.stdout
    assert ends == ["data: [DONE]"] * len(fleet.names), ends
    fleet.back_in_router()


def _active(fleet: RoutedFleet, url: str) -> int:
    from orchestrator.router.client import RouterClient

    with RouterClient(fleet.router, metrics_url=fleet.router.replace(":30000", ":30001") + "/metrics") as client:
        return client.active_requests(url) or 0


def test_a_roll_killed_behind_smg_resumes_and_every_host_is_back_in_selection(smg_fleet: RoutedFleet) -> None:
    """SIGKILL while the second host is rolled (drained out of smg by then, or about to be): the fleet still
    serves through smg, `roll group --resume` finishes the roll, and smg lists every host ready again."""
    fleet = smg_fleet
    with ReadyWatch(fleet.router) as ready, Client(fleet.router) as client:
        assert until(lambda: client.ok >= 2, 60), client.failed[:5]
        fleet.roll_killed_on(fleet.names[1], "--set", f"{FLAG}=5")
        killed_ok = client.ok
        assert until(lambda: client.ok >= killed_ok + 2, 60), client.failed[:5]  # still served, one host less
        res = fleet.env.run("--json", "roll", "group", "prod", "--resume", timeout=900)
    assert res.rc == 0, res.text
    assert res.json["roll"]["state"] == "done"
    assert {h["host"]: h["result"] for h in res.json["hosts"]} == {n: "rolled" for n in fleet.names}
    assert until(lambda: all(fleet.listed().values()), 60), fleet.listed()
    assert ready.lowest >= 1, ready.lowest  # never 0 ready workers, through the kill and the resume
    assert client.failed == [], client.failed[:5]  # the killed host had been drained out, or not yet touched


def test_up_host_interrupted_while_its_new_stack_builds_leaves_the_worker_in_the_router(
        smg_fleet: RoutedFleet) -> None:
    """`up host` of a worker whose profile moved to another sglang (a new stack, built beside the running server),
    Ctrl-C while pip builds it: the server was never touched, so the host must still be in the router, serving,
    with nothing said about it being out (issue 50, 6: the drain came before the build, and the interrupted run
    left it out with "it does not run a release that passed its checks"). The drain comes right before the
    restart instead."""
    import signal

    from tests.e2e.conftest import write_profiles
    from tests.e2e.test_stacks import RENAMED

    fleet = smg_fleet
    host = fleet.names[1]
    assert until(lambda: all(fleet.listed().values()), 60), fleet.listed()
    fleet.env.set_profile(sglang_version="0.5.23", flags=RENAMED)
    try:
        fleet.env.env["PYTHONUNBUFFERED"] = "1"
        proc = fleet.env.popen("up", "host", host, "--skip-bench", "--skip-weights", lock_ttl_s=5)
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "pip:" in line:  # the new stack builds beside the running server
                proc.send_signal(signal.SIGINT)
                break
        seen += proc.stdout.readlines()
        proc.wait(timeout=120)
    finally:  # the profile's own stack and flags again, for the module's other tests
        fleet.env.profile_overrides.pop("sglang_version", None)
        for key in RENAMED:
            fleet.env.profile_overrides["flags"].pop(key, None)
        write_profiles(fleet.env.inventory, fleet.env.profile_overrides)
    out = "".join(seen)
    print(out[-3000:])
    assert proc.returncode != 0 and any("pip:" in line for line in seen), out
    assert "stays out of the router" not in out and "is out of the router" not in out, out
    assert fleet.listed()[host], fleet.listed()
    assert until(lambda: all(fleet.listed().values()), 30), fleet.listed()


def test_a_roll_that_turns_a_workers_metrics_off_is_refused_before_any_change(smg_fleet: RoutedFleet) -> None:
    """`roll host H --unset enable-metrics` of a worker: its add-back checks the router's reach by the server's
    request counter on /metrics, so the host could never be put back. Refused (exit 2) before any drain or change
    (issue 50, 8: the roll kept the release, then refused to put the host back)."""
    fleet = smg_fleet
    host = fleet.names[0]
    assert until(lambda: all(fleet.listed().values()), 60), fleet.listed()
    before = fleet.releases()
    res = fleet.env.run("roll", "host", host, "--unset", "enable-metrics", "--skip-bench", timeout=600)
    print(res.text)  # docs/roll.md (pytest -s)
    assert res.rc == 2, res.text
    assert f"{host} is a router worker and `" in res.text and "turns its server's enable-metrics off" in res.text
    assert "nothing was drained or changed" in res.text and "is out of the router while" not in res.text, res.text
    assert fleet.releases() == before and all(fleet.listed().values()), fleet.listed()
