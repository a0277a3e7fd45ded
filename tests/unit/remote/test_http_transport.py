"""remote/http.py's real transport, the one code that sends bytes: what goes on the wire (method, path, the bearer
header, the JSON body), how an answer is read, and how each way of getting no answer is named (a TransportError
subclass, exit 3). The peer is a raw socket on 127.0.0.1 (the simulator tests' `ScriptedServer`: canned bytes per
path) or a listener that never answers, so the transport itself is what is tested, not a server library."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from orchestrator.errors import RemoteError
from orchestrator.remote.http import (
    BadUrl,
    HandlerTransport,
    HttpTransport,
    Request,
    Response,
    TimedOut,
    Unreachable,
    bearer,
    send,
)
from tests.sim.software.test_http import ScriptedServer


def _answer(status: str, body: bytes, kind: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            .encode() + body)


@pytest.fixture
def peer() -> Iterator[ScriptedServer]:
    srv = ScriptedServer({"/workers": _answer("202 Accepted", b'{"worker_id": "w1"}')})
    yield srv
    srv.close()


@pytest.mark.parametrize("pooled", [False, True])
def test_a_request_goes_on_the_wire_as_built_and_its_answer_is_read(peer: ScriptedServer, pooled: bool) -> None:
    transport = HttpTransport(pooled=pooled)
    try:
        resp = send(transport, "POST", f"http://127.0.0.1:{peer.port}/workers", timeout_s=5, headers=bearer("sk-k"),
                    json={"url": "http://10.0.0.5:8000"})
    finally:
        transport.close()
    assert (resp.status_code, resp.content_type, resp.json()) == (202, "application/json", {"worker_id": "w1"})
    (raw,) = peer.requests
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /workers HTTP/1.1" and "Authorization: Bearer sk-k" in lines
    assert json.loads(body) == {"url": "http://10.0.0.5:8000"}


def test_a_refused_port_is_unreachable_a_remote_error() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # bound once, never listened on: the kernel refuses it
    with pytest.raises(Unreachable) as caught:
        HttpTransport().send(Request("GET", f"http://127.0.0.1:{port}/health", 5))
    assert isinstance(caught.value, RemoteError) and caught.value.exit_code == 3
    assert caught.value.what.startswith("ConnectionError: ")
    assert type(caught.value.__cause__).__name__ == "ConnectionError"


def test_a_silent_peer_is_timed_out_within_the_request_timeout() -> None:
    import time

    silent = socket.create_server(("127.0.0.1", 0))  # listens, never accepts: the kernel completes the connect
    try:
        began = time.monotonic()
        with pytest.raises(TimedOut, match="ReadTimeout"):
            HttpTransport().send(Request("GET", f"http://127.0.0.1:{silent.getsockname()[1]}/health", 0.5))
        assert time.monotonic() - began < 3.0
    finally:
        silent.close()


def test_a_url_no_request_can_go_to_is_a_bad_url() -> None:
    with pytest.raises(BadUrl):
        HttpTransport().send(Request("POST", "not-a-url/hook", 1))


def test_a_handler_answers_in_this_process_and_gets_the_body_as_the_wire_would_carry_it() -> None:
    seen: list[Request] = []

    def handler(req: Request) -> Response:
        seen.append(req)
        return Response.of_json(200, {"echo": req.body()})

    resp = send(HandlerTransport(handler), "POST", "http://x.test/generate", timeout_s=1, json={"n": (1, 2)})
    assert resp.json() == {"echo": {"n": [1, 2]}} and seen[0].json == {"n": (1, 2)}
