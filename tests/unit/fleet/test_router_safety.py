"""Router safety in fleet rolls (issue 22 §3), the live reconcile (issue 25 item 1) and the per-host claim (issue 21
item 4), against handlers passed as the HTTP transport (remote/http.py, no socket): a router with sglang-router
0.3.2's worker API that forwards `/generate` round robin to the workers it routes to, and workers with sglang's
`/generate` and `sglang:num_requests_total` on `/metrics`. The production code sends every request through the
transport it is given, so a request that went around it would reach no fake (their ports are never bound) and fail
the test.
"""

from __future__ import annotations

import getpass
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from orchestrator.cli import cli
from orchestrator.cli.common import AppContext
from orchestrator.commands.roll import RollOutcome, RollResult
from orchestrator.errors import CheckFailed, Interrupted, LockHeld
from orchestrator.fleet.engine import HostEvents, HostOutcome
from orchestrator.fleet.fleet_roll import fleet_roll, fleet_rollback
from orchestrator.fleet.rollout import FleetRoll, HostRoll, RollSpec, RollStore
from orchestrator.fleet.targets import TargetSpec
from orchestrator.inventory.models import Inventory
from orchestrator.locks.claims import ROUTER, claim_fleet, claim_hosts, claims_dir
from orchestrator.remote.http import HandlerTransport, Request, Response, Transport, Unreachable, bearer
from orchestrator.router.client import RouterClient
from orchestrator.router.drain import Drainer
from orchestrator.router.reconcile import Worker, reconcile
from orchestrator.ui.output import Output
from tests.unit.fleet.test_router_answers import _inventory

KEY = "sk-unit-router-key"


@dataclass
class Net:
    """The fakes by their address (`http://127.0.0.1:PORT`, a port nothing binds): a request to an address no fake
    answers at is refused, as a stopped server's port is."""

    servers: dict[str, Callable[[Request], Response]] = field(default_factory=dict)
    ports: Iterator[int] = field(default_factory=lambda: itertools.count(41001))

    def place(self, server: Callable[[Request], Response]) -> str:
        url = f"http://127.0.0.1:{next(self.ports)}"
        self.servers[url] = server
        return url

    def __call__(self, request: Request) -> Response:
        parts = urlsplit(request.url)
        server = self.servers.get(f"{parts.scheme}://{parts.netloc}")
        if server is None:
            raise Unreachable(f"ConnectionError: {parts.netloc}: connection refused")
        return server(request)


@dataclass
class FakeWorker:
    """An sglang server's surface: /generate (key required), /metrics (no key), /health."""

    broken: bool = False
    health: int = 200  # what its own GET /health answers
    served: int = 0
    running: int = 0  # its sglang:num_running_reqs gauge
    key: str | None = KEY
    metrics: bool = True  # --enable-metrics: off, /metrics is FastAPI's 404
    url: str = ""

    def __call__(self, req: Request) -> Response:
        path = urlsplit(req.url).path
        authorized = not self.key or req.headers.get("Authorization") == f"Bearer {self.key}"
        if req.method == "GET":
            if path == "/metrics" and not self.metrics:
                return Response.of_json(404, {"detail": "Not Found"})
            if path == "/metrics":
                return Response(200, f'sglang:num_requests_total{{model_name="m"}} {float(self.served)}\n'
                                     f'sglang:num_running_reqs{{model_name="m"}} {float(self.running)}\n',
                                "text/plain")
            if path == "/health" and not authorized:
                return Response.of_json(401, {"error": "Unauthorized"})  # real sglang: every route needs the key
            if path == "/health":
                return Response(self.health, "", "text/plain")
            return Response(200, "ok", "text/plain")
        req.body()
        if not authorized:
            return Response.of_json(401, {"error": "Unauthorized"})
        if self.broken:
            return Response.of_json(500, {"error": "scheduler died"})
        self.served += 1
        return Response.of_json(200, {"text": " 42", "meta_info": {}})


@dataclass
class FakeRouter:
    """sglang-router's worker API; `/generate` goes round robin over the workers in `routes_to` (default: all
    listed), so a router that lists a worker but never reaches it can be made."""

    net: Net
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)  # url → {"id", "is_healthy"}
    routes_to: list[str] | None = None
    turn: int = 0
    url: str = ""

    @property
    def http(self) -> Transport:
        """The transport the code under test is given: every fake of this net answers through it."""
        return HandlerTransport(self.net)

    def __call__(self, req: Request) -> Response:
        path = urlsplit(req.url).path
        if req.method == "GET" and path == "/workers":
            return Response.of_json(200, {"workers": [{"id": v["id"], "url": u, "is_healthy": v["is_healthy"],
                                                       "load": 0} for u, v in self.workers.items()]})
        if req.method == "GET":
            return Response(200, "ok", "text/plain")
        if req.method == "DELETE":
            wid = path.rsplit("/", 1)[-1]
            url = next((u for u, v in self.workers.items() if v["id"] == wid), None)
            if url is not None:
                del self.workers[url]
            return Response.of_json(200 if url else 404, {"ok": url is not None})
        body = req.body() or {}
        if path == "/workers":
            self.workers[body["url"]] = {"id": f"w{len(self.workers) + 1}-{body['url'][-5:]}", "is_healthy": True}
            return Response.of_json(202, {"worker_id": self.workers[body["url"]]["id"]})
        targets = [u for u in (self.routes_to if self.routes_to is not None else list(self.workers))
                   if self.workers.get(u, {}).get("is_healthy")]
        if not targets:
            return Response.of_json(503, {"error": "no healthy worker"})
        self.turn += 1
        resp = self.net(Request("POST", f"{targets[self.turn % len(targets)]}{path}", 5.0, bearer(KEY), body))
        return Response.of_json(resp.status_code, resp.json())


def _worker(net: Net, w: FakeWorker) -> FakeWorker:
    w.url = net.place(w)
    return w


def _router(r: FakeRouter) -> FakeRouter:
    r.url = r.net.place(r)
    return r


@pytest.fixture
def pool() -> tuple[FakeRouter, list[FakeWorker]]:
    net = Net()
    workers = [_worker(net, FakeWorker()) for _ in range(3)]
    return _router(FakeRouter(net)), workers


def _listed(router: FakeRouter, *workers: FakeWorker, healthy: bool = True) -> None:
    for w in workers:
        router.workers[w.url] = {"id": f"id-{w.url[-5:]}", "is_healthy": healthy}


def _client(router: FakeRouter, timeout_s: float = 10.0) -> RouterClient:
    return RouterClient(router.url, KEY, timeout_s=timeout_s, transport=router.http)


def _drainer(router: FakeRouter, timeout_s: float = 1.0) -> Drainer:
    return Drainer(_client(router, 5.0), drain_timeout_s=timeout_s, join_timeout_s=5.0, poll_s=0.1,
                   http=router.http)


def test_the_last_healthy_worker_is_never_drained(pool) -> None:
    router, (a, b, _c) = pool
    _listed(router, a)
    _listed(router, b, healthy=False)
    with pytest.raises(CheckFailed, match="unhealthy"):  # a sick worker elsewhere stops the wave first
        _drainer(router).drain(a.url)
    del router.workers[b.url]
    with pytest.raises(CheckFailed, match=r"last healthy worker.*waited 1 s"):
        _drainer(router).drain(a.url)
    assert a.url in router.workers  # nothing was removed
    _listed(router, b)
    assert _drainer(router).drain(a.url).removed and a.url not in router.workers


def _stop(router: FakeRouter, w: FakeWorker) -> None:
    """Its server stopped: the port refuses connections (the router may still list it healthy)."""
    del router.net.servers[w.url]


def test_a_removal_asks_the_other_workers_themselves_not_the_routers_cached_flag(pool) -> None:
    """Issue 37 item 1: with sglang stopped on the other worker, the router still listed it healthy and `router
    remove` took out the only serving worker (rc 0, then 500s). Now each other worker's own /health is asked."""
    router, (a, b, c) = pool
    _listed(router, a, b)  # the router's cached flag: b healthy
    _stop(router, b)
    with pytest.raises(CheckFailed) as caught:
        _drainer(router).drain(a.url)
    err = caught.value
    assert err.exit_code == 1 and a.url in router.workers  # refused, nothing removed
    assert f"{a.url} is not removed: would leave the router no serving worker ({b.url} not serving)" in err.what
    assert f"Asked of each worker: {b.url}: GET /health failed: ConnectionError (refused or unreachable" in err.what
    assert err.details["workers"] == [{"url": b.url, "serving": False, "answered": err.details["workers"][0][
        "answered"]}] and str(err.details["workers"][0]["answered"]).startswith("GET /health failed")
    c.health = 503  # a server that says it cannot serve (starting, or its 1-token check timed out)
    _listed(router, c)
    with pytest.raises(CheckFailed, match=f"{c.url}: GET /health answered 503"):
        _drainer(router).drain(a.url)
    del router.workers[b.url]
    c.health = 200
    assert _drainer(router).drain(a.url).removed and a.url not in router.workers  # c serves: a may go


def test_a_worker_that_does_not_serve_itself_may_be_removed_while_it_is_the_last_listed(pool) -> None:
    """Nothing to protect: the router lists it healthy, but its own /health fails, so it carries no traffic."""
    router, (a, _b, _c) = pool
    _listed(router, a)
    a.health = 503
    result = _drainer(router).drain(a.url)
    assert result.removed and a.url not in router.workers


def test_removal_judgement_is_pure() -> None:
    from orchestrator.router.serving import Answer, judge

    answers = {"http://a": Answer("http://a", True, "GET /health answered 200"),
               "http://b": Answer("http://b", True, "GET /health answered 200")}
    both = judge("http://a", [("http://a", True), ("http://b", False)], answers)
    assert [x.url for x in both.sick] == ["http://b"] and both.protects_traffic
    assert both.evidence() == "http://b: the router lists it unhealthy; GET /health answered 200"
    alone = judge("http://a", [("http://a", True)], answers)
    assert alone.protects_traffic and alone.evidence() == "the router lists no other worker"
    unlisted = judge("http://a", [("http://b", True)], answers)
    assert unlisted.me is None and not unlisted.protects_traffic


def test_a_worker_that_does_not_answer_is_not_added_back(pool) -> None:
    router, (a, b, _c) = pool
    _listed(router, a)
    b.broken = True
    with pytest.raises(CheckFailed, match="did not answer a generation before being added back: POST /generate "
                                          "answered 500"):
        _drainer(router).restore(b.url, KEY)
    assert b.url not in router.workers


def test_a_worker_listed_healthy_that_the_router_never_reaches_fails_the_add(pool) -> None:
    router, (a, b, _c) = pool
    _listed(router, a)
    router.routes_to = [a.url]  # e.g. the router reaches another address than the one the worker serves on
    with pytest.raises(CheckFailed, match=r"listed .* healthy, but 6 requests through the router answered, none "
                                          r"reached"):
        _drainer(router).restore(b.url, KEY)
    assert b.url not in router.workers  # taken out again, not left listed
    router.routes_to = None
    drainer = _drainer(router)
    drainer.restore(b.url, KEY)
    assert drainer.last_reach is not None and drainer.last_reach.reached and b.served >= 1


def test_under_cache_aware_a_re_added_worker_the_router_does_not_pick_yet_stays_in_with_a_note(pool) -> None:
    """The real sglang-router 0.3.2 with cache_aware sent 0 of 12 random prompts to a worker added back through
    POST /workers (the others had room): that is the policy, so the worker stays in and the note says so. A
    request that fails through the router still fails the add."""
    router, (a, b, _c) = pool
    _listed(router, a)
    router.routes_to = [a.url]
    drainer = Drainer(_client(router, 5.0), join_timeout_s=5.0, poll_s=0.1, policy="cache_aware", http=router.http)
    drainer.restore(b.url, KEY)
    assert b.url in router.workers
    assert drainer.last_reach is not None and not drainer.last_reach.reached
    assert "not verified that a request through the router reaches it: cache_aware" in drainer.last_reach.note


def test_reconcile_adds_checked_workers_and_removes_the_others(pool) -> None:
    router, (a, b, c) = pool
    _listed(router, a, c)
    b_worker, c_worker = Worker("b", b.url, KEY), Worker("c", c.url, KEY)
    with _client(router) as client:
        dry = reconcile(client, [Worker("a", a.url, KEY), b_worker], [c_worker], dry_run=True, http=router.http)
        assert (dry.added, dry.removed, dry.already) == (["b"], ["c"], ["a"]) and len(router.workers) == 2
        b.broken = True
        refused = reconcile(client, [b_worker], [], http=router.http)
        assert refused.added == [] and "answered 500" in refused.refused["b"] and b.url not in router.workers
        b.broken = False
        done = reconcile(client, [Worker("a", a.url, KEY), b_worker], [c_worker], http=router.http)
    assert done.text() == "added b; removed c" and set(router.workers) == {a.url, b.url}


def test_reconcile_and_the_add_back_refuse_alike_a_worker_without_metrics(pool) -> None:
    """Issue 50, 8: the add-back refused a worker whose /metrics is off (it cannot check the router's reach), and
    `up group`'s live reconcile then added it without that check. Both refuse it now, before adding it."""
    router, (a, b, _c) = pool
    _listed(router, a)
    b.metrics = False
    with _client(router) as client:
        done = reconcile(client, [Worker("a", a.url, KEY), Worker("b", b.url, KEY)], [], http=router.http)
        assert done.added == [] and b.url not in router.workers, done
        assert done.refused["b"] == (f"{b.url}/metrics gives no sglang:num_requests_total (enable-metrics off?): "
                                     "cannot tell whether the router reaches this worker")
    with pytest.raises(CheckFailed, match=r"failed its check before being added back: .*enable-metrics off"):
        _drainer(router).restore(b.url, KEY)
    assert b.url not in router.workers


# ---------------------------------------------------------------------------------------------- claims
HOLD = """
import sys, time
from orchestrator.locks.claims import claim_hosts
with claim_hosts(["gpu-1"], "deploy roll group g --set x=1"):
    print("held", flush=True)
    time.sleep(60)
"""
HOLD_SHARED = HOLD.replace('"deploy roll group g --set x=1")', '"deploy roll host gpu-1 --set x=1", exclusive=False)')


def test_a_host_claimed_by_another_process_is_refused_naming_the_holder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "DEPLOY_STATE_DIR": str(tmp_path)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld) as caught, claim_hosts(["gpu-2", "gpu-1"], "deploy roll host gpu-1"):
            pass
        assert f"pid {proc.pid} running 'deploy roll group g --set x=1'" in caught.value.what
        assert caught.value.exit_code == 3
        with claim_hosts(["gpu-2"], "deploy roll host gpu-2"), claim_hosts(["gpu-2"], "again, same process"):
            pass  # not held elsewhere; re-entrant within one process
    finally:
        proc.kill()
        proc.wait()
    with claim_hosts(["gpu-1"], "after the holder died"):  # the kernel dropped the dead holder's flock
        assert (claims_dir() / "gpu-1.claim").stat().st_mode & 0o777 == 0o600


def test_single_host_runs_share_a_claim_that_a_fleet_command_cannot_take(tmp_path: Path, monkeypatch) -> None:
    """Two single-host runs on one host meet at the host's lease (which names the run); a fleet roll is refused."""
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", HOLD_SHARED], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "DEPLOY_STATE_DIR": str(tmp_path)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with claim_hosts(["gpu-1"], "deploy rollback host gpu-1", exclusive=False):
            pass
        with pytest.raises(LockHeld, match="holds gpu-1: gpu-1: a single-host roll or rollback"), \
                claim_hosts(["gpu-1"], "deploy roll group g"):
            pass
    finally:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------------------------------------- fleet rolls
@dataclass
class _App:
    inventory: Inventory
    inventory_paths: str = "inventory"
    out: Output = field(default_factory=lambda: Output(as_json=False, console=Console(record=True, width=250)))
    http: Transport | None = None


class _Rolled(RollOutcome):
    """A roll's outcome as the fleet reads it, without a run report behind it."""

    previous = "r-old"
    previous_flags_sha = "sha-old"
    release = "r-new"
    flags_sha = "sha-new"
    already_on = None


@dataclass
class _Rolls:
    """HostRolls' surface: plans pass, rolls are kept, reverts succeed; what was reverted is kept."""

    reverted: list[str] = field(default_factory=list)
    current: dict[str, str] = field(default_factory=dict)  # host → its current release (default: r-new)

    def releases(self, name: str) -> tuple[str | None, list[str]]:
        return self.current.get(name, "r-new"), ["r-new", *self.current.values()]

    def plan(self, name: str, events: HostEvents) -> tuple[RollOutcome, HostOutcome]:
        return _Rolled(name, RollResult.PLANNED), HostOutcome(name, "would change")

    def roll(self, name: str, events: HostEvents) -> tuple[RollOutcome, HostOutcome]:
        return _Rolled(name, RollResult.KEPT), HostOutcome(name, "changed")

    def revert(self, name: str, events: HostEvents, to_release: str) -> HostOutcome:
        self.reverted.append(f"{name}->{to_release}")
        return HostOutcome(name, "changed")


def _fleet_inventory(router: FakeRouter, a: FakeWorker, b: FakeWorker) -> Inventory:
    # round_robin: a policy under which "no request through the router reached it" means a broken path (under
    # cache_aware it is the policy's choice: test_under_cache_aware_…)
    return _inventory(router.url, worker_urls={"gpu-1": a.url, "gpu-2": b.url}, policy="round_robin")


@pytest.fixture
def fleet(pool, tmp_path, monkeypatch):
    router, (a, b, _c) = pool
    a.key = b.key = None
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path / "state"))
    rolls = _Rolls()
    monkeypatch.setattr("orchestrator.fleet.fleet_roll._host_rolls", lambda *args, **kw: rolls)
    return router, a, b, rolls, _App(_fleet_inventory(router, a, b), http=router.http), RollStore(tmp_path / "rolls")


def test_a_host_the_router_does_not_reach_after_its_roll_is_rolled_back_and_the_roll_stops(fleet) -> None:
    router, a, b, rolls, app, store = fleet
    _listed(router, a, b)
    router.routes_to = [b.url]  # lists gpu-1 healthy once added back, never sends it a request
    code = fleet_roll(app, TargetSpec(groups=("g",)), RollSpec(set=["max-running-requests=64"]), tofu=False,
                      resume=False, drain_timeout_s=2.0, store=store)
    (roll,) = store.all()
    assert code == 1 and roll.state == "failed", app.out.console.export_text()
    one, two = roll.hosts
    assert one.state == "rolled_back" and one.release == "r-old" and rolls.reverted == ["gpu-1->r-old"]
    assert "none reached" in one.router and "rolled back, and still out of the router" in one.router
    assert two.state == "untouched" and a.url not in router.workers  # the wave stopped; gpu-1 stays out


def test_resume_puts_back_a_rolled_host_the_router_does_not_list(fleet) -> None:
    router, a, b, _rolls, app, store = fleet
    _listed(router, b)  # gpu-1 was rolled, then the roll was killed before its add-back
    roll = FleetRoll(id="fleetroll-20261201T000000-1", command="deploy roll group g", targets="group g",
                     inventory="inventory", pid=0, started="2026-12-01T00:00:00Z", updated="",
                     spec=RollSpec(set=["max-running-requests=64"]), waves=[["gpu-1"], ["gpu-2"]],
                     hosts=[HostRoll(host="gpu-1", wave=0, state="rolled", previous_release="r-old",
                                     release="r-new"), HostRoll(host="gpu-2", wave=1)])
    store.save(roll)
    code = fleet_roll(app, TargetSpec(groups=("g",)), None, tofu=False, resume=True, drain_timeout_s=2.0,
                      store=store)
    text = app.out.console.export_text()
    assert code == 0, text
    one = store.all()[0].host("gpu-1")
    assert "was not in the router: added back" in one.router and "reached it" in one.router
    assert set(router.workers) == {a.url, b.url} and a.served >= 1


def test_a_sigtermed_host_back_in_the_router_has_one_router_statement(fleet, monkeypatch) -> None:
    """Issue 38: a host whose roll was stopped by SIGTERM before its candidate was installed was drained, then
    added back on its previous release, and its router column said both "left out of the router after the failure
    (add it back once checked)" and "was not in the router: added back, healthy"."""
    router, a, b, _rolls, app, store = fleet
    _listed(router, a, b)

    @dataclass
    class _Stopped(_Rolls):
        cancel: threading.Event | None = None

        def roll(self, name: str, events: HostEvents) -> tuple[RollOutcome, HostOutcome]:
            assert self.cancel is not None
            self.cancel.set()  # SIGTERM arrives while this host's roll runs: it stops before installing
            return (_Rolled(name, RollResult.FAILED, error=Interrupted("terminated")),
                    HostOutcome(name, "failed", exit_code=130, detail="interrupted"))

    stopped = _Stopped()
    monkeypatch.setattr("orchestrator.fleet.fleet_roll._host_rolls",
                        lambda inv, spec, tofu, cancel=None: setattr(stopped, "cancel", cancel) or stopped)
    fleet_roll(app, TargetSpec(groups=("g",)), RollSpec(set=["max-running-requests=64"]), tofu=False,
               resume=False, drain_timeout_s=2.0, store=store)
    one = store.all()[0].host("gpu-1")
    assert one.detail.startswith("interrupted: still on its previous release") and a.url in router.workers
    assert one.router.startswith("removed from the router; ") and "checked and added back, healthy after" in one.router
    assert "left out" not in one.router and "failure" not in one.router and "was not in the router" not in one.router


def test_rollback_group_ends_with_every_host_back_in_the_router_or_says_which_is_not(fleet) -> None:
    router, a, b, rolls, app, store = fleet
    _listed(router, b)
    roll = FleetRoll(id="fleetroll-20261201T000000-2", command="deploy roll group g", targets="group g",
                     inventory="inventory", pid=0, started="2026-12-01T00:00:00Z", updated="", state="failed",
                     spec=RollSpec(set=["max-running-requests=64"]), waves=[["gpu-1"], ["gpu-2"]],
                     hosts=[HostRoll(host="gpu-1", wave=0, state="rolled_back", previous_release="r-old",
                                     release="r-old", exit_code=1),
                            HostRoll(host="gpu-2", wave=1, state="rolled", previous_release="r-old",
                                     release="r-new")])
    store.save(roll)
    a.broken = True  # gpu-1 does not serve: it stays out and the command says so
    code = fleet_rollback(app, TargetSpec(groups=("g",)), tofu=False, drain_timeout_s=1.0, store=store)
    text = app.out.console.export_text()
    assert code == 1 and "NOT back in the router: gpu-1" in text and "answered 500" in text
    assert "last healthy worker" in text  # gpu-2 is not drained while gpu-1 is out
    assert a.url not in router.workers and b.url in router.workers and rolls.reverted == []
    a.broken = False
    roll = store.all()[0]
    roll.state = "failed"
    roll.host("gpu-2").state = "rolled"
    store.save(roll)
    code = fleet_rollback(app, TargetSpec(groups=("g",)), tofu=False, drain_timeout_s=2.0, store=store)
    assert code == 0, app.out.console.export_text()
    assert set(router.workers) == {a.url, b.url} and store.all()[0].state == "reverted"
    assert rolls.reverted == ["gpu-2->r-old"]


HOLD_G = HOLD.replace('["gpu-1"]', '["gpu-2"]')


def test_an_overlapping_fleet_roll_is_refused_and_leaves_no_record(fleet, tmp_path) -> None:
    router, a, b, rolls, app, store = fleet
    _listed(router, a, b)
    proc = subprocess.Popen([sys.executable, "-c", HOLD_G], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "DEPLOY_STATE_DIR": str(tmp_path / "state")})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld, match=f"holds gpu-2: .*pid {proc.pid}"):
            fleet_roll(app, TargetSpec(groups=("g",)), RollSpec(set=["max-running-requests=64"]), tofu=False,
                       resume=False, drain_timeout_s=2.0, store=store)
    finally:
        proc.kill()
        proc.wait()
    assert store.all() == [] and rolls.reverted == [] and set(router.workers) == {a.url, b.url}


def test_rollback_group_refuses_a_host_whose_record_is_stale_unless_forced(fleet) -> None:
    """Issue 21 item 11: single-host releases came after the fleet roll; reverting would silently drop them."""
    router, a, b, rolls, app, store = fleet
    _listed(router, a, b)
    roll = FleetRoll(id="fleetroll-20261201T000000-3", command="deploy roll group g", targets="group g",
                     inventory="inventory", pid=0, started="2026-12-01T00:00:00Z", updated="", state="done",
                     spec=RollSpec(set=["max-running-requests=64"]), waves=[["gpu-1"], ["gpu-2"]],
                     hosts=[HostRoll(host=n, wave=i, state="rolled", previous_release="r-old", release="r-new")
                            for i, n in enumerate(["gpu-1", "gpu-2"])])
    store.save(roll)
    rolls.current["gpu-2"] = "r-zlater"  # `deploy roll host gpu-2` ran after the fleet roll
    code = fleet_rollback(app, TargetSpec(groups=("g",)), tofu=False, drain_timeout_s=2.0, store=store)
    text = app.out.console.export_text()
    assert code == 2, text
    assert rolls.reverted == ["gpu-1->r-old"]
    detail = store.all()[0].host("gpu-2").detail
    assert "runs r-zlater, not r-new" in detail and "later release(s): r-zlater" in detail and "--force" in detail
    roll = store.all()[0]
    roll.state, roll.host("gpu-1").state = "done", "reverted"
    store.save(roll)
    forced = fleet_rollback(app, TargetSpec(groups=("g",)), tofu=False, drain_timeout_s=2.0, store=store,
                            force=True)
    assert forced == 0 and rolls.reverted == ["gpu-1->r-old", "gpu-2->r-old"]


# ---------------------------------------------------------------------------------------------- deploy router
def _deploy(inventory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", "--inventory", str(inventory), *args],
                          capture_output=True, text=True, timeout=60)


def test_deploy_router_refuses_bad_input_before_any_request(tmp_path: Path) -> None:
    from tests.shared import EXAMPLE_INVENTORY

    res = _deploy(EXAMPLE_INVENTORY, "router", "status")
    assert res.returncode == 2 and "the inventory has no router: section" in res.stderr, res.stderr
    inv = tmp_path / "inv"
    shutil.copytree(EXAMPLE_INVENTORY, inv)
    (inv / "router.yaml").write_text("router:\n  url: http://127.0.0.1:9\n  workers: g\n")
    (inv / "groups.yaml").write_text("groups:\n  g: []\n")
    res = _deploy(inv, "router", "add", "pve-gpu-1")
    assert res.returncode == 2 and "pve-gpu-1: not among the router's workers" in res.stderr, res.stderr
    res = _deploy(inv, "--json", "router", "add", "nosuch")
    assert res.returncode == 2 and json.loads(res.stdout)["error"] == "config-error"
    assert "Traceback" not in res.stderr


class _InterruptedAfterInstall(_Rolled):
    installed = "r-cand"  # the candidate this roll made current before the interruption
    flags_sha = "sha-cand"


@dataclass
class _InterruptedRolls(_Rolls):
    """gpu-1's roll stops at a step boundary after installing its candidate, the run being cancelled (a signal)."""

    cancel: threading.Event | None = None
    interrupt: bool = True

    def roll(self, name: str, events: HostEvents) -> tuple[RollOutcome, HostOutcome]:
        if name == "gpu-1" and self.interrupt:
            assert self.cancel is not None
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: the engine's calling thread sets the cancel event
            assert self.cancel.wait(10)
            self.interrupt = False
            what = "stopped before unlock: the fleet run was interrupted"
            return (_InterruptedAfterInstall(name, RollResult.FAILED, error=Interrupted(what)),
                    HostOutcome(name, "failed", exit_code=130, detail=what))
        return super().roll(name, events)


def test_a_host_interrupted_after_its_candidate_was_installed_is_left_to_resume_on_that_candidate(
        fleet, monkeypatch) -> None:
    """Found by the chaos soak (seed 6, fault 38): a SIGTERM landed while gpu-1's roll was between its gate and its
    unlock. The record called the host failed, on its previous release, while it ran the candidate; --resume then
    skipped it and ended `done` with exit 130. Now the record names the candidate and --resume finishes the host."""
    router, a, b, _rolls, app, store = fleet
    _listed(router, a, b)
    rolls = _InterruptedRolls()

    def host_rolls(inventory: Inventory, spec: RollSpec, tofu: bool, cancel: threading.Event | None = None):
        rolls.cancel = cancel
        return rolls

    monkeypatch.setattr("orchestrator.fleet.fleet_roll._host_rolls", host_rolls)
    with pytest.raises(KeyboardInterrupt):
        fleet_roll(app, TargetSpec(groups=("g",)), RollSpec(set=["max-running-requests=64"]), tofu=False,
                   resume=False, drain_timeout_s=2.0, store=store)
    (roll,) = store.all()
    assert roll.state == "running"  # unfinished: --resume takes it
    one = roll.host("gpu-1")
    assert (one.state, one.release, one.flags_sha, one.exit_code) == ("in_progress", "r-cand", "sha-cand", 0)
    assert "--resume checks it" in one.detail
    code = fleet_roll(app, TargetSpec(groups=("g",)), None, tofu=False, resume=True, drain_timeout_s=2.0,
                      store=store)
    (roll,) = store.all()
    assert code == 0 and roll.state == "done", app.out.console.export_text()
    assert [h.state for h in roll.hosts] == ["rolled", "rolled"] and set(router.workers) == {a.url, b.url}


# ---------------------------------------------------------------------------------------------- one claim (item 3)
HOLD_ROLL = """
import sys, time
from orchestrator.locks.claims import claim_hosts
# What `roll group g` claims behind a router (claim_fleet): its hosts and the router's claim, "_router".
with claim_hosts(["gpu-1", "gpu-2", "_router"], "deploy roll group g --set x=1"):
    print("held", flush=True)
    time.sleep(60)
"""


@dataclass(frozen=True)
class _Ran:
    """A command run in this process, read as a subprocess's result."""

    returncode: int
    stdout: str
    stderr: str


def _deploy_here(router: FakeRouter, inventory: Path, *args: str) -> _Ran:
    """`deploy --inventory INV ARGS` run in this process through click, its HTTP through the router's handlers."""
    res: Result = CliRunner().invoke(cli, ["--inventory", str(inventory), *args],
                                     obj=AppContext(str(inventory), False, http=router.http))
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return _Ran(res.exit_code, res.stdout, res.stderr)


def test_router_add_and_up_group_are_refused_while_a_fleet_roll_holds_the_router(fleet, tmp_path,
                                                                                  monkeypatch) -> None:
    """Issue 37 item 3: only `roll` claimed, so `router add` (and `up group`'s live reconcile) could put back a host
    the roll had drained, before its gates. Now they take the roll's claim, the router's included, and are refused
    before any request: the drained host stays out."""
    import yaml

    router, a, b, _rolls, app, _store = fleet
    _listed(router, b)  # the roll drained gpu-1 and is gating it
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "inventory.yaml").write_text(yaml.safe_dump(app.inventory.model_dump(mode="json", exclude_unset=True)))
    env = {**os.environ, "DEPLOY_STATE_DIR": str(tmp_path / "state"), "DEPLOY_PVE_TOKEN_SECRET": "unit-not-used"}
    proc = subprocess.Popen([sys.executable, "-c", HOLD_ROLL], stdout=subprocess.PIPE, text=True, env=env)
    monkeypatch.setenv("DEPLOY_PVE_TOKEN_SECRET", "unit-not-used")  # the fleet fixture set DEPLOY_STATE_DIR
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        for args in (("router", "add", "gpu-1"), ("up", "group", "g", "--skip-bench")):
            res = _deploy_here(router, inv, *args)  # in this process: a request would reach the fakes
            assert res.returncode == 3, (args, res.stdout, res.stderr)
            held = "gpu-1, the router" if args[0] == "router" else "gpu-1, gpu-2, the router"
            assert f"another deploy command on this machine holds {held}: gpu-1: " in res.stderr, res.stderr
            assert f"the router: {getpass.getuser()}@" in res.stderr
            assert f"pid {proc.pid} running 'deploy roll group g --set x=1'" in res.stderr
            assert "Traceback" not in res.stderr
        assert set(router.workers) == {b.url} and a.served == 0  # gpu-1 not checked, not added back
    finally:
        proc.kill()
        proc.wait()
    with claim_fleet(["gpu-1"], "after the roll", router=True):  # the roll's claim went with it
        assert {p.name for p in claims_dir().iterdir()} >= {"gpu-1.claim", f"{ROUTER}.claim"} and ROUTER == "_router"


# ---------------------------------------------------------------------------------------------- status (item 2)
def _status_view(app: _App) -> dict[str, Any]:
    from orchestrator.cli.router_view import router_view

    view = router_view(app, [HostOutcome("gpu-1", "ok"), HostOutcome("gpu-2", "ok")])  # type: ignore[arg-type]
    assert view is not None
    return view


def test_status_group_exits_non_zero_when_the_router_is_down_stale_or_serves_nothing(fleet, tmp_path) -> None:
    """Issue 37 item 2: `status group` said "2 worker(s), 2 healthy, ready" and exited 0 with the router down, with
    a listed URL that is no host's any more, and with no listed worker serving."""
    import yaml

    router, a, b, _rolls, app, _store = fleet
    _listed(router, a, b)
    assert _status_view(app)["exit_code"] == 0
    a.health = b.health = 503  # the router's cached flag says healthy; neither server serves
    view = _status_view(app)
    assert view["exit_code"] == 1 and "0 serving, ready" in view["text"]
    assert f"problem: no worker the router lists serves ({a.url}: GET /health answered 503" in view["text"]
    a.health = b.health = 200
    moved = _worker(router.net, FakeWorker(key=None))  # gpu-2's container moved: the router lists its old address
    _stop(router, moved)
    _listed(router, moved)
    view = _status_view(app)
    assert view["exit_code"] == 1 and view["router"]["problems"][0]["fix"].startswith(
        f"`deploy router remove {moved.url}`")
    assert f"problem: the router lists {moved.url}, which is no inventory host's current address" in view["text"]
    # `router status` says the same and exits 1; the command it names repairs it.
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "inventory.yaml").write_text(yaml.safe_dump(app.inventory.model_dump(mode="json", exclude_unset=True)))

    def deploy(*args: str) -> _Ran:  # DEPLOY_STATE_DIR: the fleet fixture's
        return _deploy_here(router, inv, *args)

    res = deploy("router", "status")
    assert res.returncode == 1 and f"problem: the router lists {moved.url}" in res.stdout, res.stdout + res.stderr
    print(res.stdout)  # docs/troubleshooting.md's example (pytest -s)
    fixed = deploy("router", "remove", moved.url, "--timeout", "5")
    assert fixed.returncode == 0 and moved.url not in router.workers, fixed.stdout + fixed.stderr
    assert deploy("router", "status").returncode == 0
    down = _App(_inventory("http://127.0.0.1:9", worker_urls={"gpu-1": a.url, "gpu-2": b.url}), http=router.http)
    view = _status_view(down)  # nothing listens on port 9: GET /workers fails
    assert view["exit_code"] == 3 and "problem: router http://127.0.0.1:9 is down or unreachable" in view["text"]
