"""smg (the SGLang Model Gateway) through the one router adapter (issue 37): its worker list, metrics and 409 read from
responses captured from the real smg 1.13.0 binary (tests/fixtures/router/smg-1.13.0/), and the drain and re-
registration against a handler router (remote/http.py, no socket) that answers with those captured shapes and behaves
as the real one did on loopback: DELETE leaves the worker listed `draining` with its active requests counted until
they finish or its drain window (about 5 s) ends, then drops it; a worker whose health checks failed is listed
`not_ready`."""

from __future__ import annotations

import copy
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest

from orchestrator.errors import ConfigError, RemoteError
from orchestrator.inventory.models import RouterSpec
from orchestrator.remote.http import HandlerTransport, Request, Response, Transport, bearer
from orchestrator.router import metrics
from orchestrator.router.client import RouterClient
from orchestrator.router.drain import Drainer
from orchestrator.router.reconcile import Worker, reconcile
from orchestrator.router.release import SMG_HEALTH_FLAGS, RouterRelease, release_of
from orchestrator.router.render import render_router, router_schema
from tests.shared import fixture
from tests.unit.fleet.test_router_safety import KEY, FakeWorker, Net, _worker

SMG = "router/smg-1.13.0"
URLS = ["http://127.0.0.141:8000", "http://127.0.0.142:8000"]


def _captured(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(fixture(f"{SMG}/{name}"))
    return data


@dataclass
class _Canned:
    """An in-memory transport that answers every request with one captured body (the router's real bytes)."""

    status: int
    body: str

    def send(self, request: Request) -> Response:
        return Response(self.status, self.body, "application/json")

    def close(self) -> None:
        return None


def _client(status: int, name: str) -> RouterClient:
    return RouterClient("http://smg.test:30000", transport=_Canned(status, fixture(f"{SMG}/{name}")))


def test_the_real_smg_worker_list_is_read_with_its_status() -> None:
    ready = _client(200, "workers-ready.json").list_workers()
    assert [(w.url, w.status, w.healthy, w.leaving) for w in ready] == [
        ("http://127.0.0.1:18002", "ready", True, False), ("http://127.0.0.1:18001", "ready", True, False)]
    draining = _client(200, "workers-draining.json")
    assert {w.url: (w.status, w.healthy, w.load) for w in draining.list_workers()} == {
        "http://127.0.0.1:18001": ("draining", False, 2), "http://127.0.0.1:18002": ("ready", True, 2)}
    assert [w.url for w in draining.serving_workers()] == ["http://127.0.0.1:18002"]
    dead = {w.url: (w.status, w.healthy) for w in _client(200, "workers-not-ready.json").list_workers()}
    assert dead["http://127.0.0.1:18001"] == ("not_ready", False)


def test_smg_metrics_are_read_by_worker_with_their_real_names() -> None:
    text = fixture(f"{SMG}/metrics-draining.txt")
    assert metrics.active_requests(text, "http://127.0.0.1:18001") == 2
    assert metrics.active_requests(text, "http://127.0.0.1:18001/") == 2
    assert metrics.active_requests(text, "http://127.0.0.1:18003") is None
    assert metrics.per_worker(text, metrics.HEALTH) == {"http://127.0.0.1:18001": 0.0, "http://127.0.0.1:18002": 1.0}
    assert set(metrics.per_worker(text, metrics.CB_STATE).values()) == {0.0}
    assert metrics.errors_by_type("smg_router_request_errors_total{error_type=\"no_workers\"} 3\n"
                                  "smg_router_request_errors_total{error_type=\"no_workers\",model=\"m\"} 1\n"
                                  "# smg_router_request_errors_total{error_type=\"x\"} 9\n") == {"no_workers": 4.0}


# ------------------------------------------------------------------------------------------------ a live smg
@dataclass
class FakeSmg:
    """smg 1.13.0's worker API as seen on the real binary, each worker the captured object with its url, id,
    status and load set; `active[url]` are the router's requests in flight there (the metrics' gauge)."""

    workers: dict[str, dict[str, Any]] = field(default_factory=dict)
    active: dict[str, int] = field(default_factory=dict)
    window_s: float = 60.0  # smg 1.13.0 drops a draining worker after about 5 s, whatever it still runs
    deleted_at: dict[str, float] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    turn: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    net: Net = field(default_factory=Net)
    url: str = ""

    @property
    def http(self) -> Transport:
        return HandlerTransport(self.net)

    def put(self, url: str, status: str = "ready") -> None:
        w = copy.deepcopy(_captured("workers-ready.json")["workers"][0])
        w.update(url=url, id=f"id-{url[-5:]}", status=status, is_healthy=status == "ready", load=0)
        self.workers[url] = w

    def tick(self) -> None:
        """smg drops a draining worker once it has no active request, or its drain window is over."""
        now = time.monotonic()
        with self.lock:
            for url in [u for u, w in self.workers.items() if w["status"] == "draining" and (
                    not self.active.get(u) or now - self.deleted_at.get(u, now) > self.window_s)]:
                del self.workers[url]
            for url, w in self.workers.items():
                w["load"] = self.active.get(url, 0)

    def metrics_text(self) -> str:
        return "".join(f'smg_worker_requests_active{{worker="{u}"}} {self.active.get(u, 0)}\n' for u in self.workers)


def _smg(r: FakeSmg) -> FakeSmg:
    def answer(req: Request) -> Response:
        path = urlsplit(req.url).path
        if req.method == "GET":
            r.tick()
            if path == "/workers":
                return Response.of_json(200, {"workers": list(r.workers.values()), "total": len(r.workers)})
            if path == "/metrics":
                return Response(200, r.metrics_text(), "text/plain")
            return Response(200, "OK", "text/plain")
        if req.method == "DELETE":
            wid = path.rsplit("/", 1)[-1]
            r.calls.append(f"DELETE {wid}")
            url = next((u for u, w in r.workers.items() if w["id"] == wid), None)
            if url is not None:
                r.workers[url].update(status="draining", is_healthy=False)
                r.deleted_at[url] = time.monotonic()
            return Response.of_json(202 if url else 404, _captured("delete-accepted.json"))
        body = req.body() or {}
        r.calls.append(f"POST {path}")
        if path == "/workers":
            if body["url"] in r.workers:
                return Response.of_json(409, _captured("post-duplicate-409.json"))
            r.put(body["url"])
            return Response.of_json(202, {**_captured("post-accepted.json"), "worker_id": r.workers[body["url"]]["id"]})
        ready = [u for u, w in r.workers.items() if w["status"] == "ready"]
        r.turn += 1
        resp = r.net(Request("POST", f"{ready[r.turn % len(ready)]}{path}", 5.0, bearer(KEY), body))
        return Response.of_json(resp.status_code, resp.json())

    r.url = r.net.place(answer)
    return r


@pytest.fixture
def smg() -> tuple[FakeSmg, list[FakeWorker]]:
    router = FakeSmg()
    workers = [_worker(router.net, FakeWorker()) for _ in range(3)]
    _smg(router)
    for w in workers:
        router.put(w.url)
    return router, workers


def _drainer(router: FakeSmg, timeout_s: float = 5.0) -> Drainer:
    client = RouterClient(router.url, KEY, timeout_s=5.0, metrics_url=f"{router.url}/metrics", transport=router.http)
    return Drainer(client, drain_timeout_s=timeout_s, join_timeout_s=5.0, poll_s=0.05, http=router.http)


def test_the_drain_waits_until_smg_has_no_active_request_on_the_worker(smg) -> None:
    router, (a, _b, _c) = smg
    router.active[a.url] = 3  # two streams and a completion the router had sent there
    threading.Timer(0.6, lambda: router.active.update({a.url: 0})).start()
    began = time.monotonic()
    result = _drainer(router).drain(a.url)
    assert result.removed and a.url not in router.workers
    assert result.router_drain_s is not None and 0.5 <= result.router_drain_s < time.monotonic() - began + 0.01
    assert "(3 active at removal, by the router's count)" in result.note


def test_the_drain_waits_on_the_server_once_smg_dropped_a_worker_that_still_runs_requests(smg) -> None:
    """smg 1.13.0 drops a draining worker after about 5 s while its requests still run (they complete): its
    count then says nothing, and the server's own gauge is waited on."""
    router, (a, _b, _c) = smg
    router.window_s, router.active[a.url], a.running = 0.2, 1, 1

    def finish_after_removal() -> None:  # 0.8 s after smg took the DELETE, however long the safety check took
        while a.url not in router.deleted_at:
            time.sleep(0.01)
        time.sleep(0.8)
        a.running = 0

    threading.Thread(target=finish_after_removal, daemon=True).start()
    result = _drainer(router).drain(a.url)
    assert a.url not in router.workers
    assert result.router_drain_s is not None and result.router_drain_s >= 0.75
    assert "the router dropped it from its list before they ended, the server's own count was waited on" in (
        result.note)


def test_the_drain_stops_at_its_timeout_while_smg_still_counts_requests(smg) -> None:
    router, (a, _b, _c) = smg
    router.active[a.url] = 1
    with pytest.raises(RemoteError, match=r"still has 1 active request\(s\).*smg_worker_requests_active"):
        _drainer(router, timeout_s=0.5).drain(a.url)


def test_a_worker_smg_is_draining_does_not_stop_the_next_drain(smg) -> None:
    """smg lists a worker it drains with is_healthy false: that one is leaving, not a sick worker."""
    router, (a, b, _c) = smg
    router.workers[a.url].update(status="draining", is_healthy=False)
    router.active[a.url] = 1
    assert _drainer(router).drain(b.url).removed


def test_a_second_add_of_a_url_smg_lists_is_not_an_error(smg) -> None:
    """smg answers 409 WORKER_ALREADY_EXISTS (the captured body; sglang-router never did): the listed id comes back."""
    router, (a, _b, _c) = smg
    client = RouterClient(router.url, KEY, transport=router.http)
    assert client.add_worker(a.url) == f"id-{a.url[-5:]}"
    router.workers.clear()
    router.put(a.url)
    router.workers[a.url]["url"] = "http://elsewhere:1"  # answers 409 for a URL it then does not list
    with pytest.raises(RemoteError, match=r"409.*does not list"):
        client.add_worker(a.url)


def test_restore_registers_again_a_worker_smg_left_not_ready(smg) -> None:
    router, (a, _b, _c) = smg
    router.workers[a.url].update(status="not_ready", is_healthy=False)
    _drainer(router).restore(a.url, KEY)
    assert router.workers[a.url]["status"] == "ready"
    assert [c for c in router.calls if not c.startswith("POST /generate")] == [f"DELETE id-{a.url[-5:]}",
                                                                                "POST /workers"]


def test_restore_waits_out_a_drain_smg_has_not_finished(smg) -> None:
    router, (a, _b, _c) = smg
    router.workers[a.url].update(status="draining", is_healthy=False)
    router.active[a.url] = 1
    threading.Timer(0.4, lambda: router.active.update({a.url: 0})).start()
    _drainer(router).restore(a.url, KEY)
    assert router.workers[a.url]["status"] == "ready" and "POST /workers" in router.calls


def test_an_add_while_smg_drains_the_same_url_waits_and_adds_it_again(smg) -> None:
    """`up` right after a removal (its live change): smg answers 409 while it drains the URL out; taken as
    "listed", the worker left with the drain and `up` waited 120 s for it (seen on the real smg)."""
    router, (a, _b, _c) = smg
    router.workers[a.url].update(status="draining", is_healthy=False)
    router.active[a.url] = 1
    threading.Timer(0.4, lambda: router.active.update({a.url: 0})).start()
    RouterClient(router.url, KEY, transport=router.http).add_worker(a.url, KEY)
    time.sleep(0.1)
    router.tick()
    assert router.workers[a.url]["status"] == "ready"


def test_up_puts_back_a_worker_smg_was_draining_once_smg_dropped_it(smg) -> None:
    """A reconcile right after a removal: smg still lists the worker `draining`; counting it as listed would let
    it leave with the drain, so the worker is added once smg dropped it."""
    router, (a, _b, _c) = smg
    router.workers[a.url].update(status="draining", is_healthy=False)
    router.active[a.url] = 1
    threading.Timer(0.4, lambda: router.active.update({a.url: 0})).start()
    done = reconcile(RouterClient(router.url, KEY, transport=router.http), [Worker("a", a.url, KEY)], [],
                     http=router.http)
    assert done.added == ["a"] and router.workers[a.url]["status"] == "ready"


# ------------------------------------------------------------------------------------------------ the unit
def test_the_inventory_selects_smg_and_its_pinned_release() -> None:
    spec = RouterSpec(package="smg", runs_on="a")
    assert (spec.version, spec.venv, spec.host) == ("1.13.0", "/opt/smg", "0.0.0.0")
    assert release_of(spec) == RouterRelease("smg", "1.13.0")
    # issue 50, 14: an inventory that names no package gets smg; sglang-router 0.3.2 only when named
    assert (RouterSpec().package, RouterSpec().version, RouterSpec().venv) == ("smg", "1.13.0", "/opt/smg")
    old = RouterSpec(package="sglang-router")
    assert (old.package, old.version, old.venv) == ("sglang-router", "0.3.2", "/opt/sglang-router")
    with pytest.raises(ValueError, match="package"):
        RouterSpec(package="sglang-gateway")


def test_the_smg_unit_runs_smg_with_health_settings_that_do_not_wait_a_minute() -> None:
    spec = RouterSpec(package="smg", runs_on="a", flags={"health-check-interval-secs": 2})
    bundle = render_router(spec, router_schema(release_of(spec)), URLS, "s3cret")
    argv = list(bundle.argv)
    assert argv[argv.index("--health-check-interval-secs") + 1] == "2"  # router.flags wins
    assert argv[argv.index("--health-check-timeout-secs") + 1] == str(SMG_HEALTH_FLAGS["health-check-timeout-secs"])
    assert int(argv[argv.index("--health-check-timeout-secs") + 1]) > 20  # above sglang's own /health timeout
    assert "from smg.launch_router import launch_router, parse_router_args" in bundle.launcher.content
    assert "smg 1.13.0" in bundle.unit.content and "s3cret" not in bundle.unit.content
    old = render_router(RouterSpec(package="sglang-router"), router_schema(RouterRelease("sglang-router", "0.3.2")),
                        URLS, None)
    assert "--health-check-timeout-secs" not in old.argv
    assert "from sglang_router.launch_router import" in old.launcher.content
    with pytest.raises(ConfigError, match=r"no packaged flag schema for smg 9\.9\.9 \(known: 1\.13\.0\)"):
        router_schema(RouterRelease("smg", "9.9.9"))
