"""Fleet rolls end to end: the real CLI against three simulated hosts behind the real sglang-router.

One module-scoped root with three hosts (the numbers of tests/e2e/test_fleet.py's fleet: the two modules' roots are
never up at once), converged once, and the real router 0.3.2 in front of their servers with a `router:` section in
the inventory. One host is made to fail during a wave with the CT knobs `crash_on_start` + `match=` (the fault
strikes only the server started with the candidate flag), so the previous release still starts on rollback.
Each test rolls a different value of one flag, so every roll is a real change.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import sim_hosts
from tests.e2e.conftest import until, wait_lease_expired
from tests.e2e.fleet_harness import RoutedFleet, fleet_root, worker_urls
from tests.sim_hosts import OFFSET_FLEET, OFFSET_FLEET_ROUTER, claim

# Each test runs 2-4 fleet rolls of 3 hosts through the CLI; under a shared 2-core machine's load that outlasts the
# suite's default 300 s.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]
FLAG = "num-continuous-decode-steps"
CHAT = {"model": "glm-5", "max_tokens": 24,
        "messages": [{"role": "user", "content": "What is 17 + 25? Answer with the number only."}]}


RolledFleet = RoutedFleet  # three converged hosts behind the real router, named in the inventory's router.yaml


@pytest.fixture(scope="module")
def rolled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RolledFleet]:
    if os.geteuid() != 0:
        pytest.skip("the simulator's router venv lives under /var/cache/deploy-sim (root)")
    from simulator.router import start_router, stop_router
    from tests.e2e.site import assert_container_urls, assert_no_relay

    with fleet_root(tmp_path_factory, "deploy-sim-fleetroll", OFFSET_FLEET, 3) as base:
        up = base.env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=1200)
        assert up.rc == 0, up.text
        urls = worker_urls(base)
        assert_container_urls(base.root, base.infos, list(urls.values()))
        assert_no_relay(base.infos)  # the router reaches the servers on the site network, never via a node port
        address = sim_hosts.address(claim(OFFSET_FLEET_ROUTER, ports=(30000,)))
        run_dir = tmp_path_factory.mktemp("fleetroll-router")
        try:
            start_router(run_dir, address, 30000, list(urls.values()), policy="round_robin",
                         extra=["--health-check-interval-secs", "1"])
            (base.env.inventory / "router.yaml").write_text(
                f"router:\n  package: sglang-router\n  host: {address}\n  port: 30000\n  policy: round_robin\n"
                "  workers: prod\n")
            fleet = RolledFleet(env=base.env, names=base.names, root=base.root, infos=base.infos,
                                router=f"http://{address}:30000", urls=urls)
            assert until(lambda: all(fleet.listed().values()), 120), fleet.listed()
            yield fleet
        finally:
            stop_router(run_dir)


@pytest.fixture
def fleet(rolled: RolledFleet) -> RolledFleet:
    rolled.clear_faults(host_knobs=False, ct_knobs=True)
    for record in rolled.state.glob("fleetroll-*.json"):  # a test that failed mid-roll must not refuse the next
        record.unlink()
    rolled.back_in_router()
    return rolled


def closed_before_any_response(exc: BaseException) -> bool:
    """The server closed a kept-alive connection as the request went out: not one byte of a response came back
    (http.client's RemoteDisconnected, under requests' and urllib3's wrappers). HTTP/1.1 lets a client send such a
    request again (RFC 9112 §9.3.1) and LLM clients do (the OpenAI SDK retries connection errors). A router that
    stops gracefully closes its idle keep-alive connections, so a client racing that close sees this however
    well the stop is done; a worker drain never closes the client's connection to the router."""
    import http.client

    todo: list[object] = [exc]
    while todo:
        seen = todo.pop()
        if isinstance(seen, http.client.RemoteDisconnected):
            return True
        if isinstance(seen, BaseException):
            todo += [*seen.args, seen.__cause__, seen.__context__]
    return False


def post_chat(session: Any, base: str, body: dict[str, Any], resend_closed_keepalive: bool,
              **kw: Any) -> tuple[Any, bool]:
    """POST a chat completion; with `resend_closed_keepalive`, once more when `closed_before_any_response`.
    Returns the response and whether it was sent again."""
    import requests

    url = f"{base}/v1/chat/completions"
    try:
        return session.post(url, json=body, timeout=60, **kw), False
    except requests.ConnectionError as exc:
        if not (resend_closed_keepalive and closed_before_any_response(exc)):
            raise
        return session.post(url, json=body, timeout=60, **kw), True


class Client:
    """Chat completions through the router, back to back on two threads, for as long as the test runs.
    `resend_closed_keepalive`: only for a test that stops the router itself: a request whose kept-alive connection
    the stopping router closed before any response is sent once more (counted in `resent`), as real clients do."""

    def __init__(self, base: str, resend_closed_keepalive: bool = False) -> None:
        self.base = base
        self.ok = 0
        self.resent = 0
        self.failed: list[str] = []
        self._resend = resend_closed_keepalive
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(2)]

    def _loop(self) -> None:
        import requests

        with requests.Session() as s:
            while not self._stop.is_set():
                try:
                    resp, resent = post_chat(s, self.base, CHAT, self._resend)
                    self.resent += resent
                    if resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"]:
                        self.ok += 1
                    else:
                        self.failed.append(f"{resp.status_code} {resp.text[:200]}")
                except Exception as exc:  # every failure counts, whatever its kind
                    self.failed.append(repr(exc))

    def __enter__(self) -> Client:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=90)


def cycle_ended(fleet: RolledFleet, after: float, listed: bool = True) -> float | None:
    """When the watch last ended a cycle, if after `after` (wall clock) and, with `listed`, with every host in the
    router: its state file, written at each cycle's end. The tests wait for this, the event, where they slept a
    fixed 6-8 s for "a clean cycle first" (too short under load, too long when idle)."""
    path = Path(fleet.env.env["DEPLOY_STATE_DIR"]) / "watch" / "prod.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):  # not written yet (or being replaced)
        return None
    at = float(doc.get("at", 0))
    if at <= after or (listed and sorted(doc.get("listed", [])) != sorted(fleet.names)):
        return None
    return at


def _hosts(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {h["host"]: h for h in doc["hosts"]}


def test_canary_roll_passes_and_a_client_through_the_router_sees_no_failed_request(fleet: RolledFleet) -> None:
    before = fleet.releases()
    with Client(fleet.router) as client:
        assert until(lambda: client.ok >= 2, 60), client.failed[:5]  # traffic flows before the roll starts
        res = fleet.env.run("--json", "roll", "group", "prod", "--set", f"{FLAG}=4", "--canary", "1", "--batch", "1",
                            "--max-unavailable", "1", "--skip-bench", timeout=900)
        after_roll = client.ok
        assert until(lambda: client.ok >= after_roll + 2, 60)  # and still flows once it is done
    assert res.rc == 0, res.text
    doc = res.json
    assert doc["ok"] is True and doc["roll"]["state"] == "done"
    assert doc["roll"]["waves"] == [[n] for n in fleet.names] and doc["roll"]["router"] == fleet.router
    hosts = _hosts(doc)
    after = fleet.releases()
    shas = {h["flags_sha"] for h in hosts.values()}
    assert len(shas) == 1 and None not in shas
    for name in fleet.names:
        h = hosts[name]
        assert h["result"] == "rolled" and h["release"] == after[name] != before[name], h
        assert h["previous_release"] == before[name] and h["previous_flags_sha"] != h["flags_sha"]
        assert "removed from the router" in h["router"] and "back in the router, healthy" in h["router"], h
        names = [s["name"] for s in h["report"]["steps"]]
        assert names[-5:] == ["smoke", "correctness", "throughput", "gate", "unlock"]
    assert all(fleet.listed().values())
    assert client.ok > 10 and client.failed == [], (client.ok, client.failed[:5])
    text = fleet.env.run("status", "group", "prod").stdout
    assert text.count("router: healthy") == 3


def test_canary_failure_leaves_the_rest_untouched(fleet: RolledFleet) -> None:
    canary, b, c = fleet.names
    before = fleet.releases()
    bad = fleet.env.run("roll", "group", "prod", "--set", "num-continuous-decode-stpes=2", "--skip-bench")
    assert bad.rc == 2, bad.text  # refused by every host's own parser before any host is drained or restarted
    assert "refused on 3 host(s) before any was changed" in bad.stderr and "did you mean" in bad.text
    assert fleet.releases() == before and all(fleet.listed().values())
    fleet.ct_faults(canary, crash_on_start=True, match=f"--{FLAG} 2")
    res = fleet.env.run("--json", "roll", "group", "prod", "--set", f"{FLAG}=2", "--skip-bench", timeout=900)
    assert res.rc == 1, res.text
    doc = res.json
    assert doc["ok"] is False and doc["roll"]["state"] == "failed"
    hosts = _hosts(doc)
    assert hosts[canary]["result"] == "rolled back" and hosts[canary]["release"] == before[canary]
    assert "left out of the router" in hosts[canary]["router"]
    for name in (b, c):
        assert hosts[name]["result"] == "untouched" and hosts[name]["report"] is None
        assert hosts[name]["release"] == before[name]
    assert fleet.releases() == before
    assert fleet.listed() == {canary: False, b: True, c: True}
    text = fleet.env.run("roll", "group", "prod", "--set", f"{FLAG}=2", "--skip-bench", "--canary", "9")
    assert text.rc == 2 and "--canary 9: the targets have 3 host(s)" in text.stderr


def test_wave_failure_with_rollback_all(fleet: RolledFleet) -> None:
    a, b, bad = fleet.names
    before = fleet.releases()
    fleet.ct_faults(bad, crash_on_start=True, match=f"--{FLAG} 5")
    res = fleet.env.run("--json", "roll", "group", "prod", "--set", f"{FLAG}=5", "--batch", "1", "--rollback-all",
                        "--skip-bench", timeout=1200)
    assert res.rc == 1, res.text
    hosts = _hosts(res.json)
    assert hosts[bad]["result"] == "rolled back" and "rolled back to" in hosts[bad]["detail"]
    for name in (a, b):
        assert hosts[name]["result"] == "reverted" and hosts[name]["release"] == before[name], hosts[name]
        assert hosts[name]["flags_sha"] == hosts[name]["previous_flags_sha"]
    assert fleet.releases() == before
    assert fleet.listed() == {a: True, b: True, bad: False}


def test_an_interrupted_fleet_roll_is_refused_then_resumed_then_reverted(fleet: RolledFleet) -> None:
    a, b, c = fleet.names
    before = fleet.releases()
    fleet.roll_killed_on(b, "--set", f"{FLAG}=6")
    again = fleet.env.run("roll", "group", "prod", "--set", f"{FLAG}=7", "--skip-bench")
    assert again.rc == 2, again.text
    assert "did not finish" in again.stderr and "--resume" in again.stderr
    assert "deploy rollback group prod" in again.stderr
    # No wait for the killed host jobs' leases: this machine proves their runs dead (their process is gone), so
    # the resume takes each lease over at once.
    res = fleet.env.run("--json", "roll", "group", "prod", "--resume", timeout=900)
    assert res.rc == 0, res.text
    hosts = _hosts(res.json)
    assert res.json["roll"]["state"] == "done"
    assert hosts[a]["report"] is None and hosts[a]["result"] == "rolled"  # done before the kill: skipped
    brief = {n: {k: v for k, v in h.items() if k != "report"} | {"report": h["report"] is not None}
             for n, h in hosts.items()}
    assert hosts[b]["report"] is not None and hosts[c]["report"] is not None, json.dumps(brief)
    now = fleet.releases()
    assert all(now[n] == hosts[n]["release"] != before[n] for n in fleet.names)
    assert all(fleet.listed().values())
    back = fleet.env.run("--json", "rollback", "group", "prod", timeout=900)
    assert back.rc == 0, back.text
    assert {h["host"]: h["result"] for h in back.json["hosts"]} == {n: "reverted" for n in fleet.names}
    assert fleet.releases() == before
    assert all(fleet.listed().values())


def test_hosts_already_on_the_flags_are_skipped_and_not_reverted(fleet: RolledFleet) -> None:
    a, b, c = fleet.names
    single = fleet.env.run("roll", "host", a, "--set", f"{FLAG}=9", "--skip-bench", timeout=600)
    assert single.rc == 0, single.text
    before = fleet.releases()
    res = fleet.env.run("--json", "roll", "group", "prod", "--set", f"{FLAG}=9", "--batch", "2", "--skip-bench",
                        timeout=900)
    assert res.rc == 0, res.text
    hosts = _hosts(res.json)
    assert res.json["roll"]["waves"] == [[a], [b, c]]
    assert hosts[a]["result"] == "rolled" and hosts[a]["report"] is None and hosts[a]["release"] == before[a]
    assert hosts[a]["detail"] == "already on these flags: nothing to roll"
    assert {h["flags_sha"] for h in hosts.values()} == {hosts[a]["flags_sha"]}
    back = fleet.env.run("--json", "rollback", "group", "prod", timeout=900)
    assert back.rc == 0, back.text
    result = {h["host"]: h["result"] for h in back.json["hosts"]}
    assert result == {a: "rolled", b: "reverted", c: "reverted"}
    now = fleet.releases()
    assert now[a] == before[a] and now[b] == before[b] and now[c] == before[c]
    assert fleet.env.run("rollback", "host", a, timeout=600).rc == 0  # leave the fleet on one flag set


def test_a_second_roll_is_refused_and_sigterm_ends_the_first_through_its_cleanup(fleet: RolledFleet) -> None:
    """Issue 21 items 4 and 8: the second of two overlapping fleet rolls is refused before it plans anything
    (exit 3, the holder named, no record); SIGTERM ends the first through the workers' own cleanup (leases
    released, every host serving and in the router or reported), exit 143; --resume then finishes it."""
    before = fleet.releases()
    proc = fleet.env.popen("roll", "group", "prod", "--set", f"{FLAG}=3", "--batch", "1", "--skip-bench")
    try:
        def rolling() -> bool:
            docs = [json.loads(p.read_text()) for p in fleet.state.glob("fleetroll-*.json")]
            return any(d["state"] == "running" and any(h["state"] == "in_progress" for h in d["hosts"])
                       for d in docs)

        assert until(rolling, 600), proc.stdout.read() if proc.stdout else ""
        second = fleet.env.run("roll", "group", "prod", "--set", f"{FLAG}=7", "--skip-bench")
        assert second.rc == 3, second.text
        assert "another deploy command on this machine holds" in second.stderr and f"pid {proc.pid}" in second.stderr
        assert len(list(fleet.state.glob("fleetroll-*.json"))) == 1  # the refused roll saved no record
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, out
    assert "terminated (SIGTERM)" in out and "deploy roll group prod --resume" in out
    for name in fleet.names:  # released on the way out, not left to expire
        wait_lease_expired(fleet.host_env(name), timeout_s=3)
    assert all(fleet.listed().values()), (fleet.listed(), out)
    res = fleet.env.run("--json", "roll", "group", "prod", "--resume", timeout=900)
    assert res.rc == 0, res.text
    assert all(fleet.listed().values())
    back = fleet.env.run("--json", "rollback", "group", "prod", timeout=900)
    assert back.rc == 0, back.text
    assert fleet.releases() == before and all(fleet.listed().values())


def test_a_tune_of_a_router_worker_takes_it_out_of_the_router_and_no_client_request_fails(
        fleet: RolledFleet) -> None:
    """Issue 38: a tune restarts its host once per point and once to restore; behind the router those restarts met
    clients (4 failed requests in the chaos soak). Now the host is drained for the tune and added back after."""
    from tests.e2e.test_tune import add_preset

    add_preset(fleet.env)
    name = fleet.names[0]
    before = fleet.releases()[name]
    with Client(fleet.router) as client:
        assert until(lambda: client.ok >= 2, 60), client.failed[:5]
        res = fleet.env.run("tune", "host", name, "--slo", "ttft_p99<=30s", "--over", f"{FLAG}=3",
                            "--range", "8:16:8", "--preset", "tune", "--confirm", "1", timeout=900)
        after_tune = client.ok
        assert until(lambda: client.ok >= after_tune + 2, 60)
    assert res.rc == 0, res.text
    assert f"{name} ({fleet.urls[name]}) is out of the router while it restarts" in res.text, res.text
    assert f"{name} is back in the router, healthy after" in res.text, res.text
    assert fleet.releases()[name] == before and all(fleet.listed().values())
    assert client.ok > 5 and client.failed == [], (client.ok, client.failed[:5])


def test_watch_cordons_a_host_whose_gpu_fell_off_the_bus_and_returns_it_once_clean(fleet: RolledFleet) -> None:
    """Issue 39: `deploy watch` reads every host's sensors each cycle; an Xid 79 (GPU off the bus) takes that host
    out of the router with no operator command, the others keep serving, and the host comes back by itself once
    its sensors read clean. The time from the fault to the host out of the router is printed."""
    bad = fleet.names[1]
    started = time.time()
    proc = fleet.env.popen("watch", "group", "prod", "--interval", "5", "--for", "240")
    try:
        with Client(fleet.router) as client:
            assert until(lambda: client.ok >= 2, 60), client.failed[:5]
            assert until(lambda: cycle_ended(fleet, started), 120)  # a clean cycle first
            fleet.faults(bad, xid="79@2")
            injected = time.monotonic()
            assert until(lambda: not fleet.listed().get(bad, True), 120), fleet.listed()
            cordoned_s = time.monotonic() - injected
            assert [n for n, ok in fleet.listed().items() if ok] == [n for n in fleet.names if n != bad]
            # The remedy Xid 79 asks for: a host reboot (a new kernel log; the GPU back on the bus).
            fleet.faults(bad, xid=None, gpu_lost=None)
            rebooted = fleet.env.run("sim", "reboot", bad, "--root", str(fleet.root))
            assert rebooted.rc == 0, rebooted.text
            cleared = time.monotonic()
            assert until(lambda: fleet.listed().get(bad, False), 120), fleet.listed()
            returned_s = time.monotonic() - cleared
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        fleet.clear_faults()
    print(f"fault -> out of the router: {cordoned_s:.1f} s; reboot done -> back in: {returned_s:.1f} s "
          "(interval 5 s)")
    assert f"{bad}: cordoned (" in out and f"{bad}: returned:" in out, out
    assert "GPU 2 (00000000:75:00.0): xid 79 (reboot_host)" in out, out
    assert client.failed == [], client.failed[:5]
    assert cordoned_s <= 60


class WatchRun:
    """`deploy watch group prod` in the background, its lines read as they come (each with its arrival time)."""

    def __init__(self, fleet: RolledFleet, *args: str) -> None:
        self.fleet, self.started = fleet, time.time()
        self.proc = fleet.env.popen("watch", "group", "prod", "--interval", "5", *args)
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def clean_cycle(self) -> float:
        """Until this watch ended a cycle with every host listed; when it did (wall clock)."""
        at = until(lambda: cycle_ended(self.fleet, self.started), 120)
        assert at, self.text
        return float(at)

    def seen(self, text: str) -> float | None:
        return next((t for t, line in self.lines if text in line), None)

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=10)
        return self.proc.returncode


class RouterSampler:
    """The router's healthy workers every 0.5 s: the fewest of the other hosts ever listed, and when the faulty host
    left and came back."""

    def __init__(self, fleet: RolledFleet, bad: str) -> None:
        self.fleet, self.bad = fleet, bad
        self.fewest_others = len(fleet.names) - 1
        self.out_at: float | None = None
        self.back_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                listed = self.fleet.listed()
            except Exception:  # a router that does not answer lists nobody
                listed = {}
            self.fewest_others = min(self.fewest_others, sum(ok for n, ok in listed.items() if n != self.bad))
            if not listed.get(self.bad, False) and self.out_at is None:
                self.out_at = time.monotonic()
            if listed.get(self.bad, False) and self.out_at is not None and self.back_at is None:
                self.back_at = time.monotonic()
            self._stop.wait(0.5)

    def __enter__(self) -> RouterSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def test_watch_remedies_each_catalog_action_under_the_health_policy(fleet: RolledFleet) -> None:
    """Issue 39 items 1-5 through the real CLI: a restart-class Xid is drained, sglang restarted, verified and the
    host returned, and the Xid is not read again (the cursor); an Xid 79 under the default policy stays out with the
    policy's line; with `health: {reboot: true}` the same host is rebooted by the watch (`systemctl reboot` on the
    node), verified and returned with no command while the other two stay listed; a failed row remap is kept out
    with no reboot. Each event is in `deploy history`."""
    bad = fleet.names[2]
    health = fleet.env.inventory / "health.yaml"
    (Path(fleet.env.env["DEPLOY_STATE_DIR"]) / "watch" / "prod.json").unlink(missing_ok=True)
    boot = fleet.host_env(bad).ssh("cat /proc/sys/kernel/random/boot_id").stdout.strip()
    try:
        # restart_unit (Xid 13), the default policy: drained, restarted, verified, returned; the Xid then unread.
        watch = WatchRun(fleet)
        with RouterSampler(fleet, bad) as sampler:
            watch.clean_cycle()
            fleet.faults(bad, xid="13@1")
            assert until(lambda: watch.seen(f"{bad}: returned:") is not None, 300), watch.text
        assert sampler.fewest_others == 2, watch.text
        doctor = fleet.env.run("--json", "doctor", "host", bad)
        hardware = doctor.json["hardware"]
        assert hardware["action"] == "none", hardware  # the remedied Xid 13 is behind the stored cursor
        # a whole cycle after the return (two cycle ends after it): the same Xid does not drain it again
        returned = time.time()
        first = until(lambda: cycle_ended(fleet, returned, listed=False), 120)
        assert first and until(lambda: cycle_ended(fleet, first, listed=False), 120), watch.text
        assert watch.stop() == 0, watch.text
        assert watch.text.count(f"{bad}: cordoned (") == 1 and f"{bad}: remedied (restart) in " in watch.text
        print("\n".join(line for _, line in watch.lines if line.startswith(bad)))
        # reboot_host (Xid 79), the default policy: out, with the policy's line, and held.
        watch = WatchRun(fleet)
        fleet.faults(bad, xid="79@2")
        assert until(lambda: watch.seen("a reboot is not automatic (health.reboot: false)") is not None, 120), \
            watch.text
        assert until(lambda: watch.seen(f"{bad}: still out of the router") is not None, 60), watch.text
        assert watch.stop() == 1, watch.text  # the last cycle left a host out with a fault
        assert fleet.host_env(bad).ssh("cat /proc/sys/kernel/random/boot_id").stdout.strip() == boot
        # The same host, once the policy allows a reboot: the watch reboots it, verifies it and returns it.
        health.write_text("health:\n  reboot: true\n  reboot_timeout_s: 300\n")
        with RouterSampler(fleet, bad) as sampler:
            began = time.monotonic()
            watch = WatchRun(fleet)
            assert until(lambda: watch.seen(f"{bad}: returned:") is not None, 540), watch.text
        rebooted = watch.seen(f"{bad}: remedied (reboot)")
        assert rebooted is not None, watch.text
        assert sampler.fewest_others == 2, watch.text
        assert watch.stop() == 0, watch.text
        assert fleet.host_env(bad).ssh("cat /proc/sys/kernel/random/boot_id").stdout.strip() != boot
        back = sampler.back_at
        print(f"reboot remedy: watch start -> remedied {rebooted - began:.1f} s, -> back in the router "
              f"{(back or 0) - began:.1f} s; fewest other hosts listed: {sampler.fewest_others}")
        print("\n".join(line for _, line in watch.lines if line.startswith(bad)))
        # The figure: reboots allowed from the start, clients through the router, an Xid 79 on a serving host.
        with RouterSampler(fleet, bad) as sampler, Client(fleet.router) as client:
            watch = WatchRun(fleet)
            assert until(lambda: client.ok >= 2, 60), client.failed[:5]
            watch.clean_cycle()
            fleet.faults(bad, xid="79@2")
            injected = time.monotonic()
            assert until(lambda: sampler.back_at is not None, 540), watch.text
        assert watch.stop() == 0, watch.text
        remedied = watch.seen(f"{bad}: remedied (reboot)")
        assert remedied is not None and sampler.out_at is not None and sampler.back_at is not None, watch.text
        assert sampler.fewest_others == 2, watch.text
        print(f"reboot under policy: fault -> out {sampler.out_at - injected:.1f} s, -> remedied "
              f"{remedied - injected:.1f} s, -> back {sampler.back_at - injected:.1f} s; fewest other hosts listed "
              f"{sampler.fewest_others}; client requests ok {client.ok}, failed {len(client.failed)}")
        print("\n".join(line for _, line in watch.lines if line.startswith(bad)))
        # isolate_gpu (a failed remap), even with reboots allowed: kept out, never rebooted.
        boot = fleet.host_env(bad).ssh("cat /proc/sys/kernel/random/boot_id").stdout.strip()
        watch = WatchRun(fleet)
        fleet.faults(bad, remap="3:failed")
        assert until(lambda: watch.seen("cannot be repaired in place (isolate_gpu)") is not None, 120), watch.text
        assert until(lambda: watch.seen(f"{bad}: still out of the router") is not None, 60), watch.text
        fleet.faults(bad, remap=None)  # the GPU swapped
        assert until(lambda: watch.seen(f"{bad}: returned:") is not None, 120), watch.text
        assert watch.stop() == 0, watch.text
        assert fleet.host_env(bad).ssh("cat /proc/sys/kernel/random/boot_id").stdout.strip() == boot
        assert "remedy: reboot" not in watch.text
        events = [e["kind"] for e in fleet.env.run("--json", "history", "host", bad).json["events"]]
        cycle = ["cordoned", "remedy", "remedied", "returned"]
        assert events[-14:] == [*cycle, "cordoned", *cycle[1:], *cycle, "cordoned", "returned"], events
    finally:
        health.unlink(missing_ok=True)
        fleet.faults(bad, xid=None, gpu_lost=None, remap=None)
        fleet.clear_faults()


class LongRequest:
    """One long streamed chat completion straight to a host's server (not through the router): in flight there, so
    a drain of that host waits for it (the server's own running-request gauge)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import requests

        body = {**CHAT, "max_tokens": 4000, "stream": True, "ignore_eos": True}
        try:
            with requests.post(f"{self.url}/v1/chat/completions", json=body, stream=True, timeout=120) as r:
                for _ in r.iter_lines():
                    pass
        except Exception:  # the request only holds the drain; its end is not judged
            pass

    def __enter__(self) -> LongRequest:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(timeout=150)


def _present(fleet: RolledFleet, name: str) -> bool:
    """Whether the router lists the host's URL at all (healthy or not)."""
    from orchestrator.router.client import RouterClient

    with RouterClient(fleet.router) as client:
        return client.find(fleet.urls[name]) is not None


def _remedy_s(watch: WatchRun, host: str) -> float:
    import re

    found = re.search(rf"{host}: remedied \(restart\) in ([0-9.]+) s", watch.text)
    assert found is not None, watch.text
    return float(found.group(1))


def test_a_watch_killed_mid_cordon_and_mid_remedy_leaves_the_host_to_its_next_cycle(fleet: RolledFleet) -> None:
    """Issue 50 item 1 through the real CLI: a watch interrupted (Ctrl-C) while it drains a host with a restart-class
    Xid, and one killed (SIGKILL) while that host's remedy runs. Each time `deploy status group` says the host is
    cordoned by a watch that is not running (exit 1), and the next watch owns the host: it remedies it and puts it
    back within one interval plus the remedy (plus the cycle's reads and the add-back's health wait). Before: the
    state file was written at the end of a cycle only, and the host stayed out of the router for good."""
    bad, interval = fleet.names[0], 5.0
    state = Path(fleet.env.env["DEPLOY_STATE_DIR"]) / "watch" / "prod.json"
    state.unlink(missing_ok=True)
    figures: list[str] = []
    try:
        for point, xid in (("mid-cordon", "13@1"), ("mid-remedy", "13@3")):
            watch = WatchRun(fleet, "--drain-timeout", "90")
            watch.clean_cycle()  # every host recorded as listed
            if point == "mid-cordon":
                with LongRequest(fleet.urls[bad]):
                    time.sleep(1)
                    fleet.faults(bad, xid=xid)
                    assert until(lambda: not _present(fleet, bad), 120, 0.1, 0.1), watch.text
                    watch.proc.send_signal(signal.SIGINT)  # Ctrl-C while the drain waits for the long request
                    assert watch.stop() == 130, watch.text
            else:
                fleet.faults(bad, xid=xid)
                assert until(lambda w=watch: w.seen(f"{bad}: remedy: restart") is not None, 120), watch.text
                watch.proc.kill()  # a crash while the restart runs
                watch.stop()
            killed = time.monotonic()
            entry = json.loads(state.read_text())["cordoned"][bad]
            assert entry.get("phase") == "cordoning" if point == "mid-cordon" else entry.get("remedying"), entry
            assert not _present(fleet, bad)
            status = fleet.env.run("status", "group", "prod")
            assert status.rc == 1, status.text
            assert f"{bad} is out of the router, cordoned by a deploy watch of group prod that is not running" \
                in status.stdout, status.text
            began = time.monotonic()
            watch = WatchRun(fleet)
            assert until(lambda w=watch: w.seen(f"{bad}: returned:") is not None, 300), watch.text
            back_at = watch.seen(f"{bad}: returned:") or 0.0
            back_s = back_at - began
            remedy_s = _remedy_s(watch, bad)
            assert watch.stop() == 0, watch.text
            assert fleet.listed()[bad], fleet.listed()
            assert json.loads(state.read_text())["cordoned"] == {}
            figures.append(f"killed {point}: next watch started -> {bad} back in the router {back_s:.1f} s "
                           f"(kill -> back {back_at - killed:.1f} s; its remedy {remedy_s:.1f} s, "
                           f"interval {interval:g} s)")
            # one interval plus the remedy, plus the cycle's status reads and the add-back's wait for health
            assert back_s <= interval + remedy_s + 60, figures[-1]
            fleet.faults(bad, xid=None)
        print("\n".join(figures))
    finally:
        fleet.faults(bad, xid=None)
        fleet.clear_faults()
