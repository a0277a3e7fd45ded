"""The one HTTP transport this machine's code talks through: the router's API, the workers' own endpoints and the
notify: webhook (issue 47), as httpx's: a client builds a `Request`, a `Transport` sends it and gives a `Response`.

Why a seam of one method: the code that reads the answers (router/client.py, router/checks.py, router/drain.py,
monitoring/notify.py) never touches a socket, so unit tests pass a `HandlerTransport` (a function request →
response, no server, no port) and the real `HttpTransport` is the only code here that sends bytes. A request that
gets no answer (refused, reset, timed out, a TLS failure, a URL that cannot be sent to) is a `TransportError`, a
RemoteError (exit 3) whose subclass says which; callers that turn it into their own words catch it.

The PVE API (remote/pve.py, proxmoxer) and the programs that run inside containers (probes/, the watchdog's and
the profile's probes, router/migrate.py's script: standard library only) keep their own HTTP: they are not this
machine's clients of these services.
"""

from __future__ import annotations

import json as jsonlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.errors import RemoteError

if TYPE_CHECKING:  # requests loads only when a real request is sent (~0.06 s of CPU a command that sends none)
    import requests


@dataclass(frozen=True)
class Request:
    """One HTTP request: method, absolute URL, headers, an optional JSON body and how long to wait for the answer."""

    method: str
    url: str
    timeout_s: float
    headers: dict[str, str] = field(default_factory=dict)
    json: Any = None

    def body(self) -> Any:
        """The JSON body as the server reads it (a round trip through JSON text, as on the wire)."""
        return None if self.json is None else jsonlib.loads(jsonlib.dumps(self.json))


@dataclass(frozen=True)
class Response:
    """One HTTP answer as the clients read it: status, body text and content type (None: the header is absent)."""

    status_code: int
    text: str = ""
    content_type: str | None = None

    def json(self) -> Any:
        """The body as JSON; ValueError when it is none."""
        return jsonlib.loads(self.text)

    @classmethod
    def of_json(cls, status_code: int, body: object) -> Response:
        return cls(status_code, jsonlib.dumps(body), "application/json")


class TransportError(RemoteError):
    """No answer came; the subclass says why, the text says what the transport saw."""


class Unreachable(TransportError):
    """Refused, reset or no route: nothing answers at that address (is its server running?)."""


class TimedOut(TransportError):
    """Connected, or trying to, but no answer within the request's timeout."""


class TlsFailed(TransportError):
    """The TLS handshake failed (an untrusted or mismatched certificate)."""


class BadUrl(TransportError):
    """A URL no request can be sent to (no scheme, no host)."""


class Transport(Protocol):
    """How a client's requests reach a server: `HttpTransport` here, `HandlerTransport` in unit tests."""

    def send(self, request: Request) -> Response: ...

    def close(self) -> None: ...


class HttpTransport:
    """The real one, on requests. `pooled`: one session whose connections live until `close` (a client that asks
    one server many times, the router's); else each request opens and closes its own connection (the workers'
    checks and the webhook, asked once in a while). `verify`: requests' TLS setting (True: the system's CAs; a
    path: that CA bundle; False: no check)."""

    def __init__(self, *, pooled: bool = False, verify: bool | str = True) -> None:
        self.pooled = pooled
        self.verify = verify
        self._session: requests.Session | None = None

    def send(self, request: Request) -> Response:
        import requests

        try:
            if self.pooled:
                if self._session is None:
                    self._session = requests.Session()
                resp = self._session.request(request.method, request.url, timeout=request.timeout_s,
                                             headers=request.headers or None, json=request.json, verify=self.verify)
            else:
                resp = requests.request(request.method, request.url, timeout=request.timeout_s,
                                        headers=request.headers or None, json=request.json, verify=self.verify)
        except requests.Timeout as exc:
            raise TimedOut(f"{type(exc).__name__}: {exc}") from exc
        except requests.exceptions.SSLError as exc:
            raise TlsFailed(f"{type(exc).__name__}: {exc}") from exc
        except requests.ConnectionError as exc:
            raise Unreachable(f"{type(exc).__name__}: {exc}") from exc
        except (requests.RequestException, ValueError) as exc:  # ValueError: a URL requests cannot send to
            raise BadUrl(f"{type(exc).__name__}: {exc}") from exc
        return Response(resp.status_code, resp.text, resp.headers.get("Content-Type"))

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


#: A server in a unit test: what it answers to a request (or a TransportError it raises: refused, timed out).
Handler = Callable[[Request], Response]


class HandlerTransport:
    """Requests answered by a function, in this process: no socket, no port, no thread (httpx's MockTransport)."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    def send(self, request: Request) -> Response:
        return self.handler(request)

    def close(self) -> None:
        return None


def send(transport: Transport, method: str, url: str, *, timeout_s: float, headers: dict[str, str] | None = None,
         json: Any = None) -> Response:
    """One request through `transport`."""
    return transport.send(Request(method, url, timeout_s, dict(headers or {}), json))


def bearer(key: str | None) -> dict[str, str]:
    """The Authorization header of an API key (sglang, sglang-router and smg all take `Bearer KEY`); none without."""
    return {"Authorization": f"Bearer {key}"} if key else {}
