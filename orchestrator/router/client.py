"""The router's worker API over HTTP(S): the only code that talks to a running router, sglang-router or smg.

Both manage workers through `POST /workers` (JSON `{"url": ..., "api_key": ...}`, answered `202` with a
`worker_id`; the worker joins after the router's own health check), `GET /workers` (`{"workers": [...]}`) and
`DELETE /workers/{worker_id}`. The older `POST /add_worker?url=` / `/remove_worker` routes answer 404.
smg 1.13.0 (captured in tests/fixtures/router/smg-1.13.0/) adds to each listed worker a `status`: `ready`,
`not_ready` (its health checks failed; back after the success threshold), `draining` (after a DELETE: no new
request; listed for its fixed 5 s drain settle, whether its active requests finished or not: then smg drops it,
even while requests it forwarded still run), and a `pending` job for a worker being added (shown by
`GET /workers/{id}`, not listed by `GET /workers`); a second POST of a listed URL answers 409
`WORKER_ALREADY_EXISTS`. Its metrics (router/metrics.py) are on their own port, `metrics_url`.

The requests go through a `Transport` (remote/http.py: `HttpTransport` with a pooled session, its connections kept
while the client lives; a handler in unit tests), so the API logic here never touches a socket itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import RemoteError
from orchestrator.remote.http import HttpTransport, Response, Transport, TransportError, bearer, send
from orchestrator.router import metrics

#: How long an add waits for smg to finish draining the same URL out (its drain window is 5 s).
LEAVING_WAIT_S = 30.0


@dataclass(frozen=True)
class RouterWorker:
    id: str
    url: str
    healthy: bool | None
    load: int | None
    raw: dict[str, Any]
    status: str | None = None  # smg's word (ready, not_ready, draining, pending, failed); None on sglang-router

    @property
    def leaving(self) -> bool:
        """smg is draining it after a removal: it gets no new request and leaves the list once idle."""
        return self.status == "draining"


class RouterClient:
    """The router's worker API over HTTP(S). Only this class talks to the router."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout_s: float = 10.0,
                 metrics_url: str | None = None, transport: Transport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        #: smg's Prometheus endpoint (http://HOST:29000/metrics); None: the router exports none deploy reads.
        self.metrics_url = metrics_url
        self.timeout_s = timeout_s
        #: The client's own pooled connection when none is given (closed with the client); a given one is shared:
        #: the workers' checks a Drainer runs go through it too.
        self.transport: Transport = transport or HttpTransport(pooled=True)
        self.api_key = api_key
        self.headers = bearer(api_key)

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> RouterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, *, expect: tuple[int, ...],
              json: dict[str, Any] | None = None) -> Response:
        url = f"{self.base_url}{path}"
        try:
            resp = send(self.transport, method, url, timeout_s=self.timeout_s, headers=self.headers, json=json)
        except TransportError as exc:
            raise RemoteError(f"router {self.base_url}: {method} {path} failed: {exc}",
                              fix="check that the router runs (systemctl status sglang-router) and its address",
                              step="router") from exc
        if resp.status_code not in expect:
            raise RemoteError(f"router {self.base_url}: {method} {path} answered {resp.status_code}: "
                              f"{resp.text[:300]}", fix="see the router's journal (journalctl -u sglang-router)",
                              step="router")
        return resp

    def _json(self, method: str, path: str, resp: Response) -> dict[str, Any]:
        """The answer's JSON object; anything else (an HTML page from a proxy, a list, a string) is a RemoteError
        that says what came back."""
        try:
            data = resp.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            kind = resp.content_type if resp.content_type is not None else "no content type"
            raise RemoteError(f"router {self.base_url}: {method} {path} answered {resp.status_code} with "
                              f"{'a JSON ' + type(data).__name__ if data is not None else 'no JSON'} ({kind}), "
                              f"not a JSON object: {' '.join(resp.text[:200].split()) or '(empty body)'}",
                              fix="check that the router URL (router: in the inventory) reaches sglang-router "
                                  "itself and not a proxy or another service", step="router")
        return data

    def _malformed(self, method: str, path: str, what: str, got: object) -> RemoteError:
        return RemoteError(f"router {self.base_url}: {method} {path} answered JSON of an unexpected shape: "
                           f"{what}, got {str(got)[:200]}",
                           fix="check that the router is sglang-router 0.3.2 (the worker API deploy speaks)",
                           step="router")

    def healthy(self) -> bool:
        """The router's own liveness (`/health`); it does not say whether any worker is healthy (`/readiness`)."""
        try:
            return self._call("GET", "/health", expect=(200, 503)).status_code == 200
        except RemoteError:
            return False

    def ready(self) -> bool:
        """At least one healthy worker (`/readiness` 200, else 503 'insufficient healthy workers')."""
        return self._call("GET", "/readiness", expect=(200, 503)).status_code == 200

    def list_workers(self) -> list[RouterWorker]:
        data = self._json("GET", "/workers", self._call("GET", "/workers", expect=(200,)))
        workers = data.get("workers") or []
        if not isinstance(workers, list):
            raise self._malformed("GET", "/workers", '"workers" should be a list', workers)
        out = []
        for w in workers:
            if not isinstance(w, dict):
                raise self._malformed("GET", "/workers", "each worker should be an object", w)
            status = w.get("status")
            out.append(RouterWorker(id=str(w.get("id", "")), url=str(w.get("url", "")).rstrip("/"),
                                    healthy=w.get("is_healthy"), load=w.get("load"), raw=w,
                                    status=str(status) if status is not None else None))
        return out

    def serving_workers(self) -> list[RouterWorker]:
        """The workers the router still selects from: the list without the ones smg is draining out."""
        return [w for w in self.list_workers() if not w.leaving]

    def router_metrics(self) -> str | None:
        """smg's metrics text, or None when there is no metrics endpoint or it does not answer."""
        if self.metrics_url is None:
            return None
        try:
            resp = send(self.transport, "GET", self.metrics_url, timeout_s=self.timeout_s, headers=self.headers)
        except TransportError:
            return None
        return resp.text if resp.status_code == 200 else None

    def active_requests(self, url: str) -> int | None:
        """Requests the router has in flight on `url`: smg_worker_requests_active when smg's metrics answer, else
        the listed `load` (the same count in smg 1.13.0). None when the router does not list the worker: it
        counts nothing there any more (sglang-router drops a removed worker at once, smg after its ~5 s drain
        window), though requests it forwarded may still run: the server's own gauges tell then."""
        worker = self.find(url)
        if worker is None:
            return None
        text = self.router_metrics()
        value = metrics.active_requests(text, url) if text is not None else None
        if value is not None:
            return value
        return worker.load if isinstance(worker.load, int) else None

    def settled(self, url: str, timeout_s: float, poll_s: float = 0.5) -> RouterWorker | None:
        """The router's entry for `url` once smg no longer drains it (None: not listed); RemoteError when it still
        drains after `timeout_s` (a worker added back while smg drains it would be dropped with the drain)."""
        deadline = time.monotonic() + timeout_s
        worker = self.find(url)
        while worker is not None and worker.leaving:
            if time.monotonic() >= deadline:
                raise RemoteError(f"the router is still draining {url} after {timeout_s:.0f} s: it cannot be added "
                                  "back yet", fix="wait for its requests to finish, then `deploy router add HOST`",
                                  step="router")
            time.sleep(poll_s)
            worker = self.find(url)
        return worker

    def find(self, url: str) -> RouterWorker | None:
        url = url.rstrip("/")
        return next((w for w in self.list_workers() if w.url == url), None)

    def add_worker(self, url: str, api_key: str | None = None) -> str:
        """Queue a worker (202); the router adds it after its own health check. Returns the job/worker id."""
        body: dict[str, Any] = {"url": url}
        if api_key:
            body["api_key"] = api_key
        resp = self._call("POST", "/workers", expect=(200, 201, 202, 409), json=body)
        data = self._json("POST", "/workers", resp)
        if resp.status_code == 409 and (draining := self.find(url)) is not None and draining.leaving:
            # smg still drains it out (a removal a moment ago: "Draining 1 worker(s) for 5s before removal"):
            # counted as listed it would leave with the drain, so it is added again once smg dropped it.
            self.settled(url, LEAVING_WAIT_S)
            resp = self._call("POST", "/workers", expect=(200, 201, 202, 409), json=body)
            data = self._json("POST", "/workers", resp)
        if resp.status_code == 409:  # smg: WORKER_ALREADY_EXISTS (listed already): nothing to add
            listed = self.find(url)
            if listed is None:
                raise RemoteError(f"router {self.base_url}: POST /workers answered 409 for {url}, which it does not "
                                  f"list: {data.get('error', '')}", fix="see `deploy router status`; retry the add",
                                  step="router")
            return listed.id
        return str(data.get("worker_id", ""))

    def remove_worker(self, url: str) -> bool:
        """Remove a worker by URL (the API removes by id); False when the router does not list it."""
        worker = self.find(url)
        if worker is None:
            return False
        self._call("DELETE", f"/workers/{worker.id}", expect=(200, 202, 204))
        return True
