"""Fleet forms end to end: the real CLI against three simulated hosts over real SSH and HTTPS.

One module-scoped root with three hosts (numbered from tests/sim_hosts.py's OFFSET_FLEET), an inventory with groups
(tests/e2e/fleet_harness.py).
Faults are set per test and cleared by the `fleet` fixture, so the tests do not depend on each other's faults;
converged containers are kept between tests (converging takes the longest).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import ConfigError
from tests import sim_hosts
from tests.e2e.conftest import until
from tests.e2e.fleet_harness import FleetHarness, fleet_root
from tests.sim_hosts import OFFSET_FLEET, OFFSET_FLEET_ROUTER, OFFSET_ROUTER_API, claim

pytestmark = pytest.mark.e2e


Fleet = FleetHarness  # the module's fleet: three hosts, groups prod, first-two and bad-first


@pytest.fixture(scope="module")
def fleet_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three simulated hosts and one inventory with groups for the module."""
    with fleet_root(tmp_path_factory, "deploy-sim-fleet", OFFSET_FLEET, 3, lambda names: {
            "prod": names, "first-two": names[:2], "bad-first": [names[1], names[0], names[2]]}) as fleet:
        yield fleet


@pytest.fixture
def fleet(fleet_env: Fleet) -> Fleet:
    """The module's fleet with every host fault cleared (containers are kept: converging is the slow part)."""
    fleet_env.clear_faults()
    return fleet_env


def test_parallel_up_with_one_failing_host(fleet: Fleet) -> None:
    a, bad, c = fleet.names
    fleet.faults(bad, missing_uvm=True)
    res = fleet.env.run("--json", "up", "group", "prod", "--parallel", "2", "--skip-bench", "--skip-weights",
                        timeout=900)
    assert res.rc == 1, res.text  # the failing host's exit code (a check failed)
    doc = res.json
    assert doc["ok"] is False and doc["targets"] == "group prod"
    by_host = {h["host"]: h for h in doc["hosts"]}
    assert list(by_host) == [a, bad, c]
    assert by_host[bad]["result"] == "failed" and by_host[bad]["exit_code"] == 1
    assert by_host[bad]["report"]["step"] == "host_prereqs" and "nvidia-uvm" in by_host[bad]["report"]["what"]
    assert [s["name"] for s in by_host[bad]["report"]["steps"]][-1] == "host_prereqs"
    for name in (a, c):
        host = by_host[name]
        assert host["exit_code"] == 0 and host["result"] in ("changed", "ok"), host
        steps = {s["name"]: s for s in host["report"]["steps"]}
        assert steps["lock"]["summary"].startswith("lock taken") and steps["unlock"]["summary"] == "lock released"
        assert host["ssh_round_trips"] == host["report"]["totals"]["ssh_round_trips"] > 0
        assert fleet.sglang_active(name) == "active"
    assert fleet.sglang_active(bad) != "active"
    summary = doc["fleet"]
    assert summary["hosts"] == 3 and summary["failed"] == 1 and summary["exit_code"] == 1
    engine = summary["engine"]
    assert engine["workers"] == 2 and engine["peak_running"] <= 2
    # a bounded pool: per running host its worker, its SSH transport thread, its lease keep-alive and, while a
    # script goes out on stdin, that command's writer (seen alive on a loaded machine: 9 over the baseline);
    # nothing per host beyond the two running ones (all three at once would be 3 * 4 + 2)
    assert engine["peak_threads"] - engine["baseline_threads"] <= 2 * 4 + 2
    # sockets: per worker the SSH connection and, while a container is created, the PVE API session
    assert 1 <= engine["peak_open_sockets"] - engine["baseline_open_sockets"] <= 2 * 2


def test_fail_fast_skips_hosts_not_started(fleet: Fleet) -> None:
    a, bad, c = fleet.names
    fleet.faults(bad, missing_uvm=True)
    res = fleet.env.run("up", "group", "bad-first", "--parallel", "1", "--fail-fast", "--skip-bench",
                        "--skip-weights", timeout=600)
    assert res.rc == 1, res.text
    out = res.stdout
    assert f"{bad}: host_prereqs" in out and f"{bad}: failed" in out  # plain lines when stdout is not a TTY
    assert f"{a}: started" not in out and f"{c}: started" not in out
    # the summary in a pipe: plain columns, one line per host that starts with its name (progress lines: "NAME: …")
    table = {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0] in (a, bad, c)}
    assert "skipped" in table[a] and "skipped" in table[c] and "failed (exit 1)" in table[bad]
    assert "fleet: 3 host(s): 1 failed, 2 skipped" in out and "exit 1" in out


def test_status_of_a_group_and_of_several_hosts(fleet: Fleet) -> None:
    a, bad, c = fleet.names
    up = fleet.env.run("--json", "up", "host", a, "host", c, "--skip-bench", "--skip-weights", timeout=900)
    assert up.rc == 0, up.text
    assert {h["host"] for h in up.json["hosts"]} == {a, c}
    res = fleet.env.run("--json", "status", "group", "first-two")
    by_host = {h["host"]: h for h in res.json["hosts"]}
    assert by_host[a]["exit_code"] == 0 and by_host[a]["report"]["health"] == "200"
    assert by_host[a]["report"]["release"] and "/health 200" in by_host[a]["detail"]
    if fleet.sglang_active(bad) != "active":  # the failing host of the first test never got a server
        assert res.rc == 1 and by_host[bad]["result"] == "failed" and by_host[bad]["exit_code"] == 1
    text = fleet.env.run("status", "group", "prod")
    assert f"{a}: started" in text.stdout and "/health 200" in text.stdout
    assert "fleet: 3 host(s)" in text.stdout
    single = fleet.env.run("--json", "status", "host", a)  # one host: exactly the single-host document
    assert single.rc == 0 and single.json["host"] == a and "hosts" not in single.json and "fleet" not in single.json

    plan = fleet.env.run("--json", "plan", "host", a, c)  # converged: nothing would change, nothing locked
    assert plan.rc == 0, plan.text
    assert [h["result"] for h in plan.json["hosts"]] == ["ok", "ok"]
    assert all(h["report"]["dry_run"] and h["report"]["summary"] == "no changes" for h in plan.json["hosts"])
    doctor = fleet.env.run("--json", "doctor", "--all", "--parallel", "3")
    assert doctor.rc == 0, doctor.text
    assert {h["host"] for h in doctor.json["hosts"]} == set(fleet.names)
    assert all(h["report"]["status"] in ("ok", "warn") for h in doctor.json["hosts"])


class _Worker(BaseHTTPRequestHandler):
    """The smallest HTTP worker the router accepts (health, model info); the ROUTER under test is the real one."""

    def do_GET(self) -> None:
        body = {"/health": {}, "/get_server_info": {"model_path": "glm-5", "version": "0.5.12.post1"},
                "/get_model_info": {"model_path": "glm-5", "is_generation": True},
                "/v1/models": {"object": "list", "data": [{"id": "glm-5", "object": "model"}]}}.get(self.path)
        data = json.dumps(body if body is not None else {"error": "not found"}).encode()
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_router_worker_api_of_the_pinned_real_router(tmp_path: Path) -> None:
    """The real sglang-router 0.3.2: workers are added, listed and removed through /workers; /add_worker is gone."""
    if os.geteuid() != 0:
        pytest.skip("the simulator's router venv lives under /var/cache/deploy-sim (root)")
    import requests

    from orchestrator.router.client import RouterClient
    from simulator.router import start_router, stop_router

    n = claim(OFFSET_ROUTER_API, 2, ports=(30000,))  # the router on n+1, the stand-in worker on n+2
    worker_addr, router_addr = sim_hosts.address(n + 1), sim_hosts.address(n)
    server = ThreadingHTTPServer((worker_addr, 0), _Worker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://{worker_addr}:{server.server_address[1]}"
    run_dir = tmp_path / "router"
    try:
        start_router(run_dir, router_addr, 30000, policy="round_robin",
                     extra=["--health-check-interval-secs", "1"])
        base = f"http://{router_addr}:30000"
        assert requests.post(f"{base}/add_worker", params={"url": url}, timeout=10).status_code == 404
        with RouterClient(base) as client:
            assert client.healthy() and client.list_workers() == [] and not client.ready()
            assert client.add_worker(url)
            worker = until(lambda: client.find(url))
            assert worker is not None and worker.healthy is True, client.list_workers()
            assert until(client.ready)
            assert client.remove_worker(url)
            assert until(lambda: client.find(url) is None)
            assert client.remove_worker(url) is False
    finally:
        stop_router(run_dir)
        server.shutdown()


@pytest.mark.parametrize("package", ["sglang-router", "smg"])
def test_installed_router_parser_matches_the_packaged_dump(package: str) -> None:
    """The probe run by the real router venv's python sees the same options as the packaged dump of the pinned
    release (sglang-router 0.3.2, smg 1.13.0)."""
    import subprocess

    from orchestrator.resources import probe_text
    from orchestrator.router.release import RouterRelease
    from orchestrator.router.render import probe_command, router_schema, schema_from_probe
    from simulator.router import VERSIONS, ensure_router_venv

    if os.geteuid() != 0:
        pytest.skip("the simulator's router venv lives under /var/cache/deploy-sim (root)")
    release = RouterRelease(package, VERSIONS[package])
    python = str(ensure_router_venv(release.version, package=package) / "bin" / "python")
    out = subprocess.run(probe_command(python, ["--policy", "power_of_two"], release), shell=True,
                         input=probe_text("flags_probe.py"), capture_output=True, text=True, timeout=120).stdout
    installed = schema_from_probe(out, where="this machine", release=release)
    assert set(installed.option_strings) == set(router_schema(release).option_strings)
    assert json.loads(out)["ok"] is True
    with pytest.raises(ConfigError, match=r"inventory pins 0\.0\.1"):
        schema_from_probe(out, where="this machine", release=RouterRelease(package, "0.0.1"))


def test_real_router_routes_to_the_simulated_servers(fleet: Fleet, tmp_path: Path) -> None:
    """The real router in front of two simulated servers (reached at their containers' addresses on the site
    network, nothing on the nodes' addresses): chat completions through it succeed, a removed worker takes no
    traffic, an added one joins when healthy."""
    import requests

    from orchestrator.inventory.loader import load_inventory
    from orchestrator.router.addresses import learn
    from orchestrator.router.client import RouterClient
    from orchestrator.router.places import worker_url
    from simulator.manager.lifecycle import sim_status
    from simulator.router import start_router, stop_router
    from tests.e2e.site import assert_container_urls, assert_no_relay

    a, _bad, c = fleet.names
    up = fleet.env.run("up", "host", a, "host", c, "--skip-bench", "--skip-weights", timeout=900)
    assert up.rc == 0, up.text
    inv = load_inventory(fleet.env.inventory)
    site = learn([(inv.hosts[n], inv.hosts[n].container.vmid) for n in (a, c)])  # read inside each container
    urls = [worker_url(inv, inv.hosts[n], site) for n in (a, c)]
    infos = sim_status(fleet.root)
    assert_container_urls(fleet.root, infos, urls)
    assert_no_relay(infos)
    router_addr = sim_hosts.address(claim(OFFSET_FLEET_ROUTER, ports=(30000,)))  # past sim-253 too
    base = f"http://{router_addr}:30000"
    run_dir = tmp_path / "router"
    router_yaml = fleet.env.inventory / "router.yaml"
    chat = {"model": "glm-5", "max_tokens": 8,
            "messages": [{"role": "user", "content": "What is 17 + 25? Answer with the number only."}]}
    try:
        start_router(run_dir, router_addr, 30000, urls, policy="round_robin",
                     extra=["--health-check-interval-secs", "1"])
        with RouterClient(base) as router:
            workers = until(lambda: [w for w in router.list_workers() if w.healthy])
            assert sorted(w.url for w in workers) == sorted(urls), router.list_workers()
            codes = [requests.post(f"{base}/v1/chat/completions", json=chat, timeout=120).status_code
                     for _ in range(4)]
            assert codes == [200] * 4
            assert router.remove_worker(urls[0])
            assert until(lambda: [w.url for w in router.list_workers()] == [urls[1]])
            assert requests.post(f"{base}/v1/chat/completions", json=chat, timeout=120).status_code == 200
            # `status group` shows what the router thinks of each host's server
            router_yaml.write_text(f"router:\n  package: sglang-router\n  host: {router_addr}\n  port: 30000\n"
                                   "  policy: round_robin\n"
                                   "  workers: prod\n")
            res = fleet.env.run("--json", "status", "group", "prod")
            doc = res.json
            assert doc["router"] == {"url": base, "workers": 1, "ready": True, "problems": []}
            view = {h["host"]: h["router"] for h in doc["hosts"]}
            assert view[a]["listed"] is False and view[c] == {"url": urls[1], "listed": True, "healthy": True,
                                                              "load": view[c]["load"], "serving": True}
            text = fleet.env.run("status", "group", "prod").stdout
            assert "router: not listed" in text and "router: healthy" in text
            assert f"router {base}: 1 worker(s), 1 healthy, 1 serving, ready" in text
            router.add_worker(urls[0])
            assert until(lambda: len([w for w in router.list_workers() if w.healthy]) == 2)
    finally:
        router_yaml.unlink(missing_ok=True)
        stop_router(run_dir)
