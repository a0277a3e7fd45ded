"""The router as a managed part, end to end: the real CLI, two simulated hosts, the REAL router, once with each
package deploy drives (sglang-router 0.3.2 and smg 1.13.0, `router.package`).

One module-scoped root with two hosts (tests/sim_hosts.py OFFSET_ROUTER_UP) and an inventory whose router runs in
the first host's server container (CT 120), a real LXC container: `up` makes the router's venv there and
pip-installs the router from the host's package index, as on a site without a venv of its own. The servers
have an API key, so the router's key file and its use towards the workers are exercised. The tests run in file
order: the first one converges everything.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.e2e.conftest import until
from tests.e2e.fleet_harness import FleetHarness, fleet_root
from tests.e2e.site import assert_container_urls, assert_no_relay
from tests.sim_hosts import OFFSET_ROUTER_UP

pytestmark = pytest.mark.e2e
KEY = "sk-fleet-router-e2e-7f3a9c"
CHAT = {"model": "glm-5", "max_tokens": 8,
        "messages": [{"role": "user", "content": "What is 17 + 25? Answer with the number only."}]}


@dataclass
class RouterFleet(FleetHarness):
    """Two hosts whose router runs in the first host's server container, managed by `up`."""

    router_yaml: str = ""
    package: str = "sglang-router"

    @property
    def version(self) -> str:
        from simulator.router import VERSIONS

        return VERSIONS[self.package]

    @property
    def url(self) -> str:
        """The router in host A's CT 120, at that container's address on the site network (no relay)."""
        return f"http://{self.address(self.names[0])}:30000"

    def address(self, name: str) -> str:
        """Host `name`'s CT 120 address, read from inside the container by the tool's own code (a DHCP lease)."""
        from orchestrator.inventory.loader import load_inventory
        from orchestrator.router.addresses import learn

        host = load_inventory(self.env.inventory).hosts[name]
        return learn([(host, host.container.vmid)]).of(host, host.container.vmid)

    def write_router(self, extra_flags: str = "") -> None:
        (self.env.inventory / "router.yaml").write_text(self.router_yaml + extra_flags)


@pytest.fixture(scope="module", params=["sglang-router", "smg"])
def rfleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterFleet]:
    with fleet_root(tmp_path_factory, "deploy-sim-router-up", OFFSET_ROUTER_UP, 2) as base:
        key_file = base.env.inventory.parent / "api-key"
        key_file.write_text(KEY + "\n")
        key_file.chmod(0o600)
        base.env.set_profile(api_key={"file": str(key_file)})
        names = base.names
        router_yaml = (f"router:\n  package: {request.param}\n  runs_on: {names[0]}\n  policy: round_robin\n"
                       "  workers: prod\n  flags:\n    health-check-interval-secs: 1\n")
        fleet = RouterFleet(env=base.env, names=names, root=base.root, infos=base.infos, router_yaml=router_yaml,
                            package=request.param)
        fleet.write_router()
        yield fleet


def _cmdlines() -> list[bytes]:
    out = []
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            out.append(p.read_bytes())
        except OSError:  # the process ended meanwhile
            continue
    return out


def _chat(url: str, key: str | None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return requests.post(f"{url}/v1/chat/completions", json=CHAT, headers=headers, timeout=120).status_code


def test_up_brings_the_router_up_with_both_workers_then_changes_nothing(rfleet: RouterFleet) -> None:
    env, (a, b) = rfleet.env, rfleet.names
    res = env.run("--json", "up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
    assert res.rc == 0, res.text
    router = res.json["router"]
    assert router["result"] == "changed" and router["place"] == f"{a} CT 120", router
    assert router["workers"] == [a, b] and router["left_out"] == []
    details = router["step"]["details"]
    assert details["validated_with"] == f"{rfleet.package} {rfleet.version} in CT 120"
    assert details["health"] == {"health": 200, "readiness": 200, "healthy_workers": 2,
                                 "through_router": "a generation through the router was answered"}
    # The key: a 0600 file in the container, used by the router towards clients and workers, never in an argv.
    assert env.ct("stat -c %a /etc/sglang-router/api-key").stdout.strip() == "600"
    assert KEY not in env.ct("cat /etc/systemd/system/sglang-router.service").stdout
    argvs = _cmdlines()
    # The router retitles itself (setproctitle); its argv came from the unit, which holds no key.
    title = b"smg::router" if rfleet.package == "smg" else b"sglang::router"
    assert any(c.startswith(title) for c in argvs), "the router process is not running"
    assert not any(KEY.encode() in c for c in argvs)
    assert KEY not in res.stdout + res.stderr
    assert _chat(rfleet.url, KEY) == 200 and _chat(rfleet.url, None) == 401
    # The router lists its workers at their containers' addresses on the site network, and it reaches B's from
    # A's container over that network; the nodes' addresses forward nothing.
    from orchestrator.router.client import RouterClient
    from simulator.manager.lifecycle import sim_status

    with RouterClient(rfleet.url, KEY) as client:
        listed = sorted(w.url for w in client.list_workers())
    assert listed == sorted(f"http://{rfleet.address(n)}:8000" for n in (a, b))
    infos = sim_status(rfleet.root)
    assert_container_urls(rfleet.root, infos, listed)
    assert_no_relay(infos)
    assert_no_relay(infos, 30000)

    again = env.run("--json", "up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
    assert again.rc == 0, again.text
    router = again.json["router"]
    assert router["result"] == "ok" and router["step"]["changes"] == [], router
    assert router["step"]["summary"] == "unit unchanged, router active with 2 worker(s)"
    text = env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
    assert f"router {a} CT 120 {rfleet.url}: ok — unit unchanged, router active with 2 worker(s)" in text.stdout


def test_a_failing_host_leaves_the_router_live_and_comes_back_without_a_restart(rfleet: RouterFleet) -> None:
    """A host whose `up` fails is taken out of the router through its worker API, and put back by the next `up`;
    the router process is never restarted for a change of its worker set (that would drop requests in flight)."""
    env, (a, b) = rfleet.env, rfleet.names
    pid = env.ct("systemctl show -p MainPID --value sglang-router").stdout.strip()
    rfleet.faults(b, missing_uvm=True)
    try:
        res = env.run("--json", "up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
    finally:
        rfleet.faults(b, missing_uvm=False)
    assert res.rc == 1, res.text  # the failing host's exit code
    router = res.json["router"]
    assert router["workers"] == [a] and router["left_out"] == [b] and router["exit_code"] == 0, router
    assert router["step"]["summary"].startswith(f"change the workers live (-http://{rfleet.address(b)}:8000")
    assert _chat(rfleet.url, KEY) == 200
    back = env.run("--json", "up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
    assert back.rc == 0, back.text
    assert back.json["router"]["step"]["summary"].startswith(
        f"change the workers live (+http://{rfleet.address(b)}:8000; 2 worker(s)), no restart")
    assert back.json["router"]["step"]["details"]["health"]["healthy_workers"] == 2
    assert env.ct("systemctl show -p MainPID --value sglang-router").stdout.strip() == pid


def test_a_worker_missing_from_the_live_router_is_put_back_by_up_and_by_router_add(rfleet: RouterFleet) -> None:
    """Issue 25 item 1: a host taken out through the worker API (an interrupted fleet roll) while the unit still
    names it. `up group` used to send nothing and time out; now it reconciles the live list, and `deploy router`
    shows, removes (never the last healthy worker) and adds back a checked host."""
    from orchestrator.router.client import RouterClient

    env, (a, b) = rfleet.env, rfleet.names
    url_b = f"http://{rfleet.address(b)}:8000"
    with RouterClient(rfleet.url, KEY) as client:
        assert client.remove_worker(url_b)
        assert until(lambda: client.find(url_b) is None, 30)  # smg drains it first (listed `draining`)
    status = env.run("--json", "router", "status", "prod")
    assert status.rc == 0, status.text
    assert {r["host"]: r["listed"] for r in status.json["workers"]} == {a: True, b: False}
    status_text = env.run("router", "status").stdout
    assert f"not listed: {b} (put back with `deploy router add HOST`)" in status_text
    res = env.run("--json", "up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
    assert res.rc == 0, res.text
    router = res.json["router"]
    assert router["result"] == "changed" and router["live"] == {"added": [b], "removed": [], "refused": {}}, router
    assert router["step"]["details"]["health"]["healthy_workers"] == 2
    removed = env.run("--json", "router", "remove", b, timeout=300)
    assert removed.rc == 0, removed.text
    last = env.run("router", "remove", a, "--timeout", "2", timeout=300)
    assert last.rc == 1 and "last healthy worker" in last.stdout, last.text
    added = env.run("router", "add", b, timeout=300)
    assert added.rc == 0, added.text
    assert f"{b}: added, listed healthy; a request through the router reached it" in added.stdout, added.text
    print(status_text, last.text, added.text, sep="\n")  # docs/fleet.md's example run (pytest -s)
    with RouterClient(rfleet.url, KEY) as client:
        assert {w.url: w.healthy for w in client.list_workers()}[url_b] is True
    assert _chat(rfleet.url, KEY) == 200


def test_a_bad_router_flag_is_refused_before_any_change(rfleet: RouterFleet) -> None:
    env = rfleet.env
    snapshot = "sha256sum /etc/systemd/system/sglang-router.service; ls /var/lib/deploy/releases"
    before = env.ct(snapshot).stdout
    rfleet.write_router("    log-level: verbose\n")
    try:
        res = env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=300)
    finally:
        rfleet.write_router()
    assert res.rc == 2, res.text
    assert "--log-level: invalid choice 'verbose'; choose from debug, info, warn, error" in res.stderr
    assert "router preflight" in res.stderr
    assert "connect" not in res.stdout  # no host started
    assert env.ct(snapshot).stdout == before


def test_status_group_shows_the_router_unit_and_its_view_of_each_worker(rfleet: RouterFleet) -> None:
    env, a = rfleet.env, rfleet.names[0]
    res = env.run("--json", "status", "group", "prod")
    assert res.rc == 0, res.text
    doc = res.json
    errors = doc["router"].pop("request_errors", None)  # smg's own counters, by error type (its metrics port)
    assert doc["router"] == {"url": rfleet.url, "workers": 2, "ready": True, "runs_on": a, "vmid": 120,
                             "unit": "active", "package": rfleet.package, "problems": []}
    assert isinstance(errors, dict) if rfleet.package == "smg" else errors is None, errors
    for host in doc["hosts"]:
        assert host["router"]["listed"] is True and host["router"]["healthy"] is True, host
        assert host["router"].get("circuit") == ("closed" if rfleet.package == "smg" else None), host
    text = env.run("status", "group", "prod").stdout
    assert (f"router {rfleet.url} ({a} CT 120, {rfleet.package}, unit active): 2 worker(s), 2 healthy, 2 serving, "
            "ready") in text
    assert text.count("router: healthy") == 2


def test_bench_group_drives_load_through_the_router_and_reports_each_host(rfleet: RouterFleet) -> None:
    env, names = rfleet.env, rfleet.names
    res = env.run("--json", "bench", "group", "prod", "--sweep", "max-concurrency=8,64", timeout=600)
    assert res.rc == 0, res.text
    doc = res.json
    assert doc["client"] == names[0] and [p["overrides"] for p in doc["points"]] == [
        {"max-concurrency": "8"}, {"max-concurrency": "64"}]
    for point in doc["points"]:
        total = point["total"]
        assert point["router"] == rfleet.url and total["failed"] in (0, None)
        hosts = {h["host"]: h for h in point["hosts"]}
        assert sorted(hosts) == names
        for h in hosts.values():  # round_robin: both servers took a share, and both hosts' GPUs were sampled
            assert h["output_tokens"] > 0 and h["output_tok_s"] > 0, h
            assert h["mean_power_w"] > 0 and h["j_per_token"] > 0 and h["tok_s_per_w"] > 0, h
        # Shares come from the servers' own counters: they add up to what the client received (the router's
        # health checks and bench_serving's warm-up add a few tokens).
        attributed = sum(h["output_tokens"] for h in hosts.values())
        assert total["output_tokens"] <= attributed <= total["output_tokens"] * 1.05
        assert total["mean_power_w"] == pytest.approx(sum(h["mean_power_w"] for h in hosts.values()), abs=0.1)
        assert total["j_per_token"] == pytest.approx(total["energy_j"] / total["output_tokens"], rel=1e-3)
    fast, slow = doc["points"][1]["total"], doc["points"][0]["total"]
    assert fast["output_tok_s"] > slow["output_tok_s"]  # more concurrency, more throughput on the simulator
    text = env.run("bench", "group", "prod", timeout=600).stdout
    assert f"through the router {rfleet.url} (client {names[0]}" in text
    assert all(any(line.startswith(n) for line in text.splitlines()) for n in (*names, "total"))
    print(text)  # the docs' real output (pytest -s)
    if rfleet.package == "smg":  # smg's own view: what it sent to each worker, its errors, its breakers
        for point in doc["points"]:
            seen = point["router_metrics"]
            hosts = {h["host"]: h for h in point["hosts"]}
            assert seen["errors"] == {} and seen["unlisted"] == {} and seen["error"] is None, seen
            sent = [hosts[n]["router_requests"] for n in names]
            assert all(n > 0 for n in sent) and sum(sent) == seen["sent"], (sent, seen)
            # round_robin: an even split; the client's requests (with bench_serving's warm-up) are all counted
            assert abs(sent[0] - sent[1]) <= 1 and seen["sent"] >= point["total"]["completed"], (sent, point)
            assert {hosts[n]["circuit"] for n in names} == {"closed"}
        line = next(ln for ln in text.splitlines() if ln.startswith("  router (smg): requests sent per worker"))
        assert all(f"{n} " in line for n in names) and "request errors none; circuit breakers closed" in line, line
    else:  # sglang-router 0.3.2 exports no per-worker totals
        assert all(p["router_metrics"] is None for p in doc["points"])
        assert "router (smg)" not in text
