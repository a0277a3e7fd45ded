"""remote/http.py's real transport, the one code that sends bytes: what goes on the wire (method, path, the bearer
header, the JSON body), how an answer is read, and how each way of getting no answer is named (a TransportError
subclass, exit 3). The peer is a raw socket on 127.0.0.1 that answers one canned response (or never answers), so
the transport itself is what is tested, not a server library."""

from __future__ import annotations

import json
import socket
import threading
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


class Peer:
    """One TCP listener: reads each request on a connection, answers `reply` (None: never answers)."""

    def __init__(self, reply: bytes | None) -> None:
        self.reply = reply
        self.got: list[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                body += conn.recv(65536)
            self.got.append(head + b"\r\n\r\n" + body)
            if self.reply is None:
                conn.recv(1)  # hold the connection open, silent, until the client gives up
                return
            conn.sendall(self.reply)

    def close(self) -> None:
        self.sock.close()


def _answer(status: str, body: bytes, kind: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            .encode() + body)


@pytest.fixture
def peer(request: pytest.FixtureRequest) -> Iterator[Peer]:
    p = Peer(getattr(request, "param", _answer("202 Accepted", b'{"worker_id": "w1"}')))
    yield p
    p.close()


@pytest.mark.parametrize("pooled", [False, True])
def test_a_request_goes_on_the_wire_as_built_and_its_answer_is_read(peer: Peer, pooled: bool) -> None:
    transport = HttpTransport(pooled=pooled)
    try:
        resp = send(transport, "POST", f"{peer.url}/workers", timeout_s=5, headers=bearer("sk-k"),
                    json={"url": "http://10.0.0.5:8000"})
    finally:
        transport.close()
    assert (resp.status_code, resp.content_type, resp.json()) == (202, "application/json", {"worker_id": "w1"})
    (raw,) = peer.got
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


@pytest.mark.parametrize("peer", [None], indirect=True)
def test_a_silent_peer_is_timed_out_within_the_request_timeout(peer: Peer) -> None:
    import time

    began = time.monotonic()
    with pytest.raises(TimedOut, match="ReadTimeout"):
        HttpTransport().send(Request("GET", f"{peer.url}/health", 0.5))
    assert time.monotonic() - began < 3.0


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
