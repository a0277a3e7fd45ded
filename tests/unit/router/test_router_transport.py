"""RouterClient's request and response handling on an in-memory transport (issue 34: a narrow seam; issue 47: the one
transport of remote/http.py): what it sends (method, path, body, the bearer key on every request) and how it reads
what comes back, with no socket. The real transport's own behaviour (refused ports, timeouts) is
tests/unit/remote/test_http_transport.py's."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from orchestrator.errors import RemoteError
from orchestrator.remote.http import Request, Response, Unreachable
from orchestrator.router.client import RouterClient

BASE = "http://router.test:30000"
KEY = "router-key-0123456789"


@dataclass
class MemoryRouter:
    """sglang-router 0.3.2's worker API as a dict; every request it got, in order."""

    workers: dict[str, str] = field(default_factory=dict)  # id -> url
    got: list[tuple[str, str, dict[str, str], dict[str, Any] | None]] = field(default_factory=list)
    down: bool = False
    closed: bool = False

    def send(self, request: Request) -> Response:
        method, url, headers, json = request.method, request.url, request.headers, request.json
        if self.down:
            raise Unreachable("connection refused")
        path = url.removeprefix(BASE)
        self.got.append((method, path, dict(headers), json))
        if (method, path) == ("GET", "/workers"):
            listed = [{"id": i, "url": u, "is_healthy": True, "load": 0} for i, u in self.workers.items()]
            return _json(200, {"workers": listed})
        if (method, path) == ("POST", "/workers") and json is not None:
            wid = f"w{len(self.workers) + 1}"
            self.workers[wid] = json["url"]
            return _json(202, {"worker_id": wid})
        if method == "DELETE" and path.startswith("/workers/"):
            self.workers.pop(path.rsplit("/", 1)[1])
            return Response(204, "")
        if (method, path) == ("GET", "/readiness"):
            return Response(200 if self.workers else 503, "")
        return Response(404, "not found", "text/plain")

    def close(self) -> None:
        self.closed = True


def _json(status: int, body: object) -> Response:
    return Response(status, json.dumps(body), "application/json")


def test_add_list_remove_send_the_key_on_every_request() -> None:
    router = MemoryRouter()
    with RouterClient(BASE, KEY, transport=router) as client:
        assert not client.ready()
        assert client.add_worker("http://10.0.0.5:8000", api_key="worker-key") == "w1"
        assert [(w.id, w.url, w.healthy) for w in client.list_workers()] == [("w1", "http://10.0.0.5:8000", True)]
        assert client.ready()
        assert client.remove_worker("http://10.0.0.5:8000/") and not client.remove_worker("http://10.0.0.6:8000")
    assert router.closed and router.workers == {}
    assert [(m, p) for m, p, _, _ in router.got] == [
        ("GET", "/readiness"), ("POST", "/workers"), ("GET", "/workers"), ("GET", "/readiness"),
        ("GET", "/workers"), ("DELETE", "/workers/w1"), ("GET", "/workers")]
    assert all(h == {"Authorization": f"Bearer {KEY}"} for _, _, h, _ in router.got)
    assert router.got[1][3] == {"url": "http://10.0.0.5:8000", "api_key": "worker-key"}


def test_no_key_sends_no_authorization_header() -> None:
    router = MemoryRouter()
    RouterClient(BASE, transport=router).list_workers()
    assert router.got[0][2] == {}


@pytest.mark.parametrize(("answer", "said"), [
    (Response(200, "<html>login</html>", "text/html"), "answered 200 with no JSON (text/html)"),
    (Response(200, "[1, 2]", "application/json"), "answered 200 with a JSON list (application/json)"),
    (Response(200, "", None), "with no JSON (no content type), not a JSON object: (empty body)"),
])
def test_an_answer_that_is_not_a_json_object_says_what_came(answer: Response, said: str) -> None:
    class Odd(MemoryRouter):
        def send(self, request: Request) -> Response:
            return answer

    with pytest.raises(RemoteError) as caught:
        RouterClient(BASE, transport=Odd()).list_workers()
    assert said in caught.value.what and caught.value.step == "router"


def test_no_answer_is_a_remote_error_naming_the_request_and_the_fix() -> None:
    client = RouterClient(BASE, transport=MemoryRouter(down=True), metrics_url=f"{BASE}/metrics")
    with pytest.raises(RemoteError) as caught:
        client.list_workers()
    assert caught.value.what == f"router {BASE}: GET /workers failed: connection refused"
    assert "systemctl status sglang-router" in caught.value.fix
    assert not client.healthy() and client.router_metrics() is None  # liveness and metrics: False/None, no raise
