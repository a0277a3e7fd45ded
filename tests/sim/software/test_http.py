"""The stand-in's HTTP/1.1 layer (sglang/_sim/http_server.py, http_client.py) on loopback, byte by byte.

The server runs as a subprocess (http_app.py) and is read with raw sockets, so the framing itself is checked
(persistent connections, Content-Length and chunked bodies, the end of a chunked stream), then with the clients that
talk to the real stand-in (requests, urllib, curl). The bench's client runs in a subprocess against a socket
server here that sends scripted bytes.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest
import requests

from .conftest import STANDIN

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """(port, stderr file) of http_app.py."""
    err = tmp_path_factory.mktemp("http") / "stderr"
    with open(err, "w") as fh:
        proc = subprocess.Popen([sys.executable, str(HERE / "http_app.py")], stdout=subprocess.PIPE, stderr=fh,
                                env={"PYTHONPATH": str(STANDIN), "PATH": "/usr/bin:/bin"}, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    yield port, err
    proc.terminate()
    assert proc.wait(10) == 0


@pytest.fixture
def port(app: tuple[int, Path]) -> int:
    return app[0]


def connect(port: int) -> tuple[socket.socket, BinaryIO]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return sock, sock.makefile("rb")


def read_head(f: BinaryIO) -> tuple[str, dict[str, str]]:
    status = f.readline().decode("latin-1").rstrip("\r\n")
    headers: dict[str, str] = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.lower()] = value.strip()
    return status, headers


def read_chunks(f: BinaryIO) -> list[bytes]:
    """A chunked body's chunks, up to and including the empty last chunk and its final CRLF."""
    out = []
    while True:
        size = int(f.readline().split(b";")[0], 16)
        data = f.read(size)
        assert f.read(2) == b"\r\n"
        out.append(data)
        if size == 0:
            return out


def exchange(f: BinaryIO, sock: socket.socket, raw: bytes) -> tuple[str, dict[str, str], bytes]:
    sock.sendall(raw)
    status, headers = read_head(f)
    return status, headers, f.read(int(headers.get("content-length", "0")))


def at_eof(sock: socket.socket, f: BinaryIO) -> bool:
    """True when the server closed the connection (nothing more to read)."""
    sock.settimeout(5)
    return f.read(1) == b""


GET_HELLO = b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"


def test_keep_alive_two_requests_on_one_connection(port: int) -> None:
    sock, f = connect(port)
    with sock:
        status, headers, body = exchange(f, sock, GET_HELLO)
        assert (status, body) == ("HTTP/1.1 200 OK", b"hello")
        assert headers["content-type"] == "text/plain; charset=utf-8" and "connection" not in headers
        assert headers["server"] == "uvicorn" and headers["date"].endswith(" GMT")
        status, headers, body = exchange(f, sock, b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc")
        assert status == "HTTP/1.1 200 OK" and json.loads(body)["body"] == "abc"
    # http.client keeps the socket only when the server kept the connection
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/hello")
    assert conn.getresponse().read() == b"hello"
    first = conn.sock
    conn.request("GET", "/hello")
    assert conn.getresponse().read() == b"hello" and conn.sock is first
    conn.close()


def test_a_repeated_field_reads_as_its_first_value(port: int) -> None:
    """sglang-router 0.3.2 sends a worker the client's Authorization and its own: a handler sees the first, as with
    aiohttp and Starlette (joined with ", " the API key check would fail)."""
    sock, f = connect(port)
    with sock:
        raw = (b"POST /echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer k\r\nauthorization: Bearer k\r\n"
               b"Content-Length: 0\r\n\r\n")
        assert json.loads(exchange(f, sock, raw)[2])["authorization"] == "Bearer k"


def test_pipelined_requests_are_answered_in_order(port: int) -> None:
    sock, f = connect(port)
    with sock:
        sock.sendall(GET_HELLO + b"POST /echo?x=1 HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi" + GET_HELLO)
        bodies = []
        for _ in range(3):
            _, headers = read_head(f)
            bodies.append(f.read(int(headers["content-length"])))
        assert bodies[0] == bodies[2] == b"hello"
        assert json.loads(bodies[1])["query"] == "x=1" and json.loads(bodies[1])["body"] == "hi"


def test_request_bodies_by_content_length_chunked_and_after_100_continue(port: int) -> None:
    sock, f = connect(port)
    with sock:
        raw = ("é" * 5000).encode()
        _, _, out = exchange(f, sock, b"PUT /echo HTTP/1.1\r\nContent-Length: %d\r\n\r\n%b" % (len(raw), raw))
        assert json.loads(out)["length"] == len(raw)
        chunked = (b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
        status, _, out = exchange(f, sock, chunked)
        echoed = json.loads(out)
        assert status == "HTTP/1.1 200 OK" and echoed["body"] == "hello world"
        assert echoed["transfer_encoding"] == "chunked"
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
        assert f.readline() == b"HTTP/1.1 100 Continue\r\n" and f.readline() == b"\r\n"
        sock.sendall(b"body")
        _, headers = read_head(f)
        assert json.loads(f.read(int(headers["content-length"])))["body"] == "body"
        # no body at all: an empty one (no 411)
        _, _, out = exchange(f, sock, b"POST /echo HTTP/1.1\r\nHost: t\r\n\r\n")
        assert json.loads(out)["length"] == 0


def test_chunked_stream_ends_with_the_last_chunk_and_the_connection_goes_on(port: int) -> None:
    sock, f = connect(port)
    with sock:
        sock.sendall(b"POST /stream?n=3 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
        status, headers = read_head(f)
        assert status == "HTTP/1.1 200 OK" and headers["transfer-encoding"] == "chunked"
        assert headers["content-type"] == "text/event-stream" and "content-length" not in headers
        assert read_chunks(f) == [b"data: 0\n\n", b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n", b""]
        assert exchange(f, sock, GET_HELLO)[2] == b"hello"


def test_http10_stream_runs_to_the_close(port: int) -> None:
    sock, f = connect(port)
    with sock:
        sock.sendall(b"POST /stream?n=2 HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
        status, headers = read_head(f)
        assert status == "HTTP/1.0 200 OK" and "transfer-encoding" not in headers
        assert f.read() == b"data: 0\n\ndata: 1\n\ndata: [DONE]\n\n"


def test_connection_close_and_http10_keep_alive(port: int) -> None:
    sock, f = connect(port)
    with sock:
        _, headers, body = exchange(f, sock, b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        assert body == b"hello" and headers["connection"] == "close" and at_eof(sock, f)
    sock, f = connect(port)
    with sock:
        status, headers, body = exchange(f, sock, b"GET /hello HTTP/1.0\r\n\r\n")
        assert status == "HTTP/1.0 200 OK" and "connection" not in headers and at_eof(sock, f)
    sock, f = connect(port)
    with sock:
        _, headers, _ = exchange(f, sock, b"GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert headers["connection"] == "keep-alive"
        assert exchange(f, sock, GET_HELLO)[2] == b"hello"


def test_head_unknown_path_and_wrong_method(port: int) -> None:
    sock, f = connect(port)
    with sock:
        sock.sendall(b"HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers = read_head(f)
        assert status == "HTTP/1.1 200 OK" and headers["content-length"] == "5"  # the GET's length, no body:
        assert exchange(f, sock, GET_HELLO)[2] == b"hello"  # the next response starts right after the head
        status, _, body = exchange(f, sock, b"GET /nope HTTP/1.1\r\nHost: t\r\n\r\n")
        assert (status, body) == ("HTTP/1.1 404 Not Found", b"404: Not Found")
        status, headers, body = exchange(f, sock, b"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n")
        assert (status, body) == ("HTTP/1.1 405 Method Not Allowed", b"405: Method Not Allowed")
        assert headers["allow"] == "POST,PUT"
        status, _, _ = exchange(f, sock, b"GET http://t/hello HTTP/1.1\r\nHost: t\r\n\r\n")  # absolute-form
        assert status == "HTTP/1.1 200 OK"


@pytest.mark.parametrize(("raw", "want"), [
    (b"garbage\r\n\r\n", "400"),
    (b"GET /hello HTTP/1.1\r\nno colon here\r\n\r\n", "400"),
    (b"GET /hello HTTP/1.1\r\nHost: t\r\n folded\r\n\r\n", "400"),
    (b"POST /echo HTTP/1.1\r\nContent-Length: abc\r\n\r\n", "400"),
    (b"POST /echo HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", "400"),
    (b"POST /echo HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "400"),
    (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", "400"),
    (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nabc", "400"),
    (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "501"),
    (b"GET /hello HTTP/2.0\r\n\r\n", "505"),
    (b"GET hello HTTP/1.1\r\n\r\n", "400"),
    (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", "431"),
])
def test_a_malformed_request_gets_an_error_and_the_server_keeps_serving(port: int, raw: bytes, want: str) -> None:
    sock, f = connect(port)
    with sock:
        sock.sendall(raw)
        status, headers = read_head(f)
        assert status.split(" ")[1] == want, status
        assert headers["connection"] == "close"
        f.read(int(headers["content-length"]))
        assert at_eof(sock, f)
    sock, f = connect(port)
    with sock:
        assert exchange(f, sock, GET_HELLO)[2] == b"hello"


def test_a_failing_handler_gets_500_and_the_connection_goes_on(app: tuple[int, Path]) -> None:
    port, err = app
    sock, f = connect(port)
    with sock:
        status, _, body = exchange(f, sock, b"GET /boom HTTP/1.1\r\nHost: t\r\n\r\n")
        assert status == "HTTP/1.1 500 Internal Server Error" and body.startswith(b"500 Internal Server Error")
        assert exchange(f, sock, GET_HELLO)[2] == b"hello"
    assert "Error handling request" in err.read_text() and "RuntimeError: boom" in err.read_text()


def _stats(port: int) -> dict[str, int]:
    data: dict[str, int] = requests.get(f"http://127.0.0.1:{port}/stats", timeout=10).json()
    return data


def test_a_client_gone_mid_stream_ends_only_that_stream(port: int) -> None:
    before = _stats(port)
    sock, f = connect(port)
    sock.sendall(b"POST /stream?n=100000&delay=0.01 HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
    assert read_head(f)[0] == "HTTP/1.1 200 OK"
    assert f.readline() == b"9\r\n"  # the first chunk's size line: the stream runs
    f.close()
    sock.close()
    deadline = time.monotonic() + 15
    while _stats(port)["aborted"] == before["aborted"] and time.monotonic() < deadline:
        time.sleep(0.05)
    after = _stats(port)
    assert after["aborted"] == before["aborted"] + 1 and after["finished"] == before["finished"]
    sock, f = connect(port)
    with sock:
        assert exchange(f, sock, GET_HELLO)[2] == b"hello"


def test_the_tools_clients(port: int) -> None:
    base = f"http://127.0.0.1:{port}"
    with requests.Session() as s:
        assert s.post(base + "/echo", json={"a": 1}, timeout=10).json()["body"] == '{"a": 1}'
        with s.post(base + "/stream?n=2", stream=True, timeout=10) as resp:
            assert [ln for ln in resp.iter_lines(decode_unicode=True) if ln] == ["data: 0", "data: 1", "data: [DONE]"]
        assert s.get(base + "/hello", timeout=10).text == "hello"
        # a body sent as a generator goes chunked (requests, like other clients, may do that)
        assert s.post(base + "/echo", data=iter([b"ab", b"cd"]), timeout=10).json()["body"] == "abcd"
    with urllib.request.urlopen(base + "/hello", timeout=10) as resp:
        assert resp.read() == b"hello"
    req = urllib.request.Request(base + "/echo", data=b'{"x": 2}', headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert json.loads(resp.read())["body"] == '{"x": 2}'


def test_curl_reuses_the_connection(port: int) -> None:
    url = f"http://127.0.0.1:{port}/hello"
    r = subprocess.run(["curl", "-sv", url, url], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0 and r.stdout == "hellohello"
    assert "Re-using existing connection" in r.stderr or "Reusing existing" in r.stderr, r.stderr


# ------------------------------------------------------------------------------------------------ the bench client

class ScriptedServer:
    """Answers each connection's request with the bytes scripted for its path, then closes; records requests."""

    def __init__(self, script: dict[str, bytes]) -> None:
        self.script = script
        self.requests: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = next((int(ln.split(b":")[1]) for ln in head.split(b"\r\n")
                               if ln.lower().startswith(b"content-length:")), 0)
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + body)  # the whole request, its body read to its length
                conn.sendall(self.script[head.split(b" ")[1].decode()])

    def close(self) -> None:
        self.sock.close()


CLIENT = """
import asyncio, json, sys
from sglang._sim.http_client import Client

async def one(url, mode):
    try:
        async with Client({"Authorization": "Bearer k"}).request("POST", url, {"q": 1}) as resp:
            if mode == "lines":
                return [line.decode() async for line in resp.lines()]
            return [resp.status, await resp.json()]
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"

async def main():
    print(json.dumps([await one(url, mode) for url, mode in json.loads(sys.argv[1])]))

asyncio.run(main())
"""


def run_client(calls: list[tuple[str, str]]) -> list[object]:
    r = subprocess.run([sys.executable, "-c", CLIENT, json.dumps(calls)], capture_output=True, text=True, timeout=30,
                       env={"PYTHONPATH": str(STANDIN), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    out: list[object] = json.loads(r.stdout)
    return out


def test_bench_client_reads_every_framing_and_reports_failures_like_aiohttp() -> None:
    free = socket.create_server(("127.0.0.1", 0))
    refused = free.getsockname()[1]
    free.close()
    srv = ScriptedServer({
        "/chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"b\r\ndata: a\n\nda\r\n7\r\nta: b\n\n\r\n4\r\ntail\r\n0\r\n\r\n"),
        "/length": b'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 8\r\n\r\n{"ok":1}',
        "/eof": b"HTTP/1.0 200 OK\r\n\r\ndata: x\n",
        "/cut": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nonly",
        "/nothing": b"",
    })
    try:
        base = f"http://127.0.0.1:{srv.port}"
        out = run_client([(base + "/chunked", "lines"), (base + "/length", "json"), (base + "/eof", "lines"),
                          (base + "/cut", "lines"), (base + "/nothing", "json"),
                          (f"http://127.0.0.1:{refused}/x", "json")])
    finally:
        srv.close()
    assert out[0] == ["data: a\n", "\n", "data: b\n", "\n", "tail"]
    assert out[1] == [201, {"ok": 1}]  # after a 100 Continue
    assert out[2] == ["data: x\n"]
    assert isinstance(out[3], str) and out[3].startswith("ClientPayloadError: Response payload is not completed")
    assert out[4] == "ServerDisconnectedError: Server disconnected"
    assert out[5] == (f"ClientConnectorError: Cannot connect to host 127.0.0.1:{refused} ssl:default "
                      f"[Connect call failed ('127.0.0.1', {refused})]")
    head = srv.requests[0].split(b"\r\n\r\n")[0].decode().split("\r\n")
    assert head[0] == "POST /chunked HTTP/1.1"
    for field in (f"Host: 127.0.0.1:{srv.port}", "Authorization: Bearer k", "Connection: close",
                  "Content-Type: application/json", "Content-Length: 8"):
        assert field in head, head
