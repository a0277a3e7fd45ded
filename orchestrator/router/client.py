"""The router's worker API over HTTP(S): the only code that talks to a running router.

sglang-router 0.3.2 manages workers through `POST /workers` (JSON `{"url": ..., "api_key": ...}`, answered `202`
with a `worker_id`; the worker joins after the router's own health check), `GET /workers` (`{"workers": [...]}`)
and `DELETE /workers/{worker_id}`. The older `POST /add_worker?url=` / `/remove_worker` routes answer 404.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests

from orchestrator.errors import RemoteError


@dataclass(frozen=True)
class RouterWorker:
    id: str
    url: str
    healthy: bool | None
    load: int | None
    raw: dict[str, Any]


class RouterClient:
    """The router's worker API over HTTP(S). Only this class talks to the router."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout_s: float = 10.0,
                 session: requests.Session | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.session = session or requests.Session()
        self.api_key = api_key
        if api_key:
            self.session.headers["Authorization"] = f"Bearer {api_key}"

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> RouterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, *, expect: tuple[int, ...], **kwargs: Any) -> requests.Response:
        url = f"{self.base_url}{path}"
        try:
            resp = self.session.request(method, url, timeout=self.timeout_s, **kwargs)
        except requests.RequestException as exc:
            raise RemoteError(f"router {self.base_url}: {method} {path} failed: {exc}",
                              fix="check that the router runs (systemctl status sglang-router) and its address",
                              step="router") from exc
        if resp.status_code not in expect:
            raise RemoteError(f"router {self.base_url}: {method} {path} answered {resp.status_code}: "
                              f"{resp.text[:300]}", fix="see the router's journal (journalctl -u sglang-router)",
                              step="router")
        return resp

    def _json(self, method: str, path: str, resp: requests.Response) -> dict[str, Any]:
        """The answer's JSON object; anything else (an HTML page from a proxy, a list, a string) is a RemoteError
        that says what came back."""
        try:
            data = resp.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            kind = resp.headers.get("Content-Type", "no content type")
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
            out.append(RouterWorker(id=str(w.get("id", "")), url=str(w.get("url", "")).rstrip("/"),
                                    healthy=w.get("is_healthy"), load=w.get("load"), raw=w))
        return out

    def find(self, url: str) -> RouterWorker | None:
        url = url.rstrip("/")
        return next((w for w in self.list_workers() if w.url == url), None)

    def add_worker(self, url: str, api_key: str | None = None) -> str:
        """Queue a worker (202); the router adds it after its own health check. Returns the job/worker id."""
        body: dict[str, Any] = {"url": url}
        if api_key:
            body["api_key"] = api_key
        resp = self._call("POST", "/workers", expect=(200, 201, 202), json=body)
        return str(self._json("POST", "/workers", resp).get("worker_id", ""))

    def remove_worker(self, url: str) -> bool:
        """Remove a worker by URL (the API removes by id); False when the router does not list it."""
        worker = self.find(url)
        if worker is None:
            return False
        self._call("DELETE", f"/workers/{worker.id}", expect=(200, 202, 204))
        return True
