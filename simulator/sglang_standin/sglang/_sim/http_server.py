"""A small HTTP/1.1 server on asyncio streams: the surface the stand-in's handlers use, and nothing more.

Why not aiohttp.web: its import costs about 0.25 s of CPU per server start (see http_wire). Real clients talk to
this one (sglang-router's hyper pool and health checks, urllib, requests, curl, the bench client), so it keeps
what they rely on: persistent connections (HTTP/1.1's default; HTTP/1.0 with `Connection: keep-alive`; `Connection:
close` honoured), pipelined requests answered in order, request bodies by Content-Length or chunked, `Expect:
100-continue`, responses with Content-Length or a chunked stream (SSE), HEAD on every GET route, and a 400 that
closes only the offending connection. Status lines, headers and the 404/405/500 bodies are aiohttp.web's, which
served these routes before; the server name is uvicorn's, as the real sglang's.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sglang._sim.http_wire import (
    CHUNKED,
    LAST_CHUNK,
    Headers,
    ProtocolError,
    body_length,
    chunk,
    chunks,
    connection_tokens,
    first,
    is_token,
    read_headers,
    read_line,
)

IDLE_S = 75.0  # aiohttp's keepalive_timeout: an idle persistent connection is closed after it
MAX_BODY = 64 * 2**20  # a larger request body is refused with 413 (aiohttp refused past 1 MiB; uvicorn has none)
BACKLOG = 2048  # uvicorn's: a bench's burst of connections is not dropped at the listen queue
SERVER = "uvicorn"
REASONS = {100: "Continue", 200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
           405: "Method Not Allowed", 413: "Request Entity Too Large", 417: "Expectation Failed",
           431: "Request Header Fields Too Large", 500: "Internal Server Error", 501: "Not Implemented",
           503: "Service Unavailable", 505: "HTTP Version Not Supported"}


@dataclass
class Response:
    """A whole response: its body goes out with a Content-Length (and without it for HEAD)."""

    status: int = 200
    body: bytes = b""
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def json_response(data: Any, status: int = 200) -> Response:
    return Response(status, json.dumps(data).encode(), "application/json; charset=utf-8")


def text_response(text: str, status: int = 200, content_type: str = "text/plain") -> Response:
    return Response(status, text.encode(), f"{content_type}; charset=utf-8")


class HTTPError(Exception):
    """Raised by a handler to answer with `response` (aiohttp's HTTPBadRequest and friends)."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


class Stream:
    """A response whose head is sent and whose body follows piece by piece: chunks on HTTP/1.1, and on HTTP/1.0 raw
    bytes up to the connection's close. A write after the client went away raises ConnectionResetError."""

    def __init__(self, writer: asyncio.StreamWriter, chunked: bool, head_only: bool) -> None:
        self._writer, self.chunked, self._head_only = writer, chunked, head_only

    async def write(self, data: bytes) -> None:
        if self._writer.is_closing():
            raise ConnectionResetError("Cannot write to closing transport")
        if data and not self._head_only:
            self._writer.write(chunk(data) if self.chunked else data)
            await self._writer.drain()

    async def finish(self) -> None:
        if self.chunked and not self._head_only:
            self._writer.write(LAST_CHUNK)
            await self._writer.drain()


@dataclass(eq=False)
class Request:
    """One parsed request with its whole body; `version` is "1.0" or "1.1"."""

    method: str
    path: str
    query: str
    version: str
    headers: Headers
    body: bytes = b""
    writer: asyncio.StreamWriter | None = field(default=None, repr=False)
    stream_started: bool = False

    def header(self, name: str, default: str = "") -> str:
        """The field's first value (a repeated Authorization: the first, as aiohttp and Starlette read it)."""
        return first(self.headers, name.lower(), default)

    def json(self) -> Any:
        """The body as JSON; ValueError (UnicodeDecodeError included) when it is not."""
        return json.loads(self.body)

    @property
    def keep_alive(self) -> bool:
        tokens = connection_tokens(self.headers)
        return "close" not in tokens if self.version == "1.1" else "keep-alive" in tokens

    async def stream(self, headers: dict[str, str], status: int = 200) -> Stream:
        """Send the head of a streamed response (SSE); write its body through the Stream and return it."""
        assert self.writer is not None
        chunked = self.version == "1.1"
        fields = [*headers.items(), *([("Transfer-Encoding", "chunked")] if chunked else [])]
        self.writer.write(head(self.version, status, fields, self.keep_alive and chunked))
        self.stream_started = True
        return Stream(self.writer, chunked, self.method == "HEAD")


Handler = Callable[[Request], Awaitable["Response | Stream"]]
#: Runs before routing (aiohttp's middleware position): a Response answers the request instead of its route.
Guard = Callable[[Request], "Response | None"]

_date_cache: tuple[int, str] = (0, "")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date() -> str:
    """The Date field's IMF-fixdate, computed once a second (strftime's names follow the locale)."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        t = time.gmtime(now)
        _date_cache = (now, f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
                            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT")
    return _date_cache[1]


def head(version: str, status: int, fields: list[tuple[str, str]], keep_alive: bool) -> bytes:
    """Status line and header section; Date, Server and (where it differs from the version's default) Connection
    are added here."""
    lines = [f"HTTP/{version} {status} {REASONS.get(status, 'Unknown')}", *(f"{k}: {v}" for k, v in fields),
             f"Date: {http_date()}", f"Server: {SERVER}"]
    if version == "1.1" and not keep_alive:
        lines.append("Connection: close")
    elif version == "1.0" and keep_alive:
        lines.append("Connection: keep-alive")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def response_bytes(req: Request | None, resp: Response, keep_alive: bool) -> bytes:
    fields = [("Content-Type", resp.content_type)] if resp.content_type else []
    fields += [*resp.headers.items(), ("Content-Length", str(len(resp.body)))]
    data = head(req.version if req else "1.1", resp.status, fields, keep_alive)
    return data if req is not None and req.method == "HEAD" else data + resp.body


class App:
    """Routes by exact path and method, a guard in front of them, and the listening socket."""

    def __init__(self, guard: Guard | None = None) -> None:
        self.guard = guard
        self.routes: dict[str, dict[str, Handler]] = {}
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    def route(self, method: str, path: str, handler: Handler) -> None:
        """`GET` answers HEAD too (aiohttp's add_get); `*` takes every method."""
        methods = self.routes.setdefault(path, {})
        methods[method] = handler
        if method == "GET":
            methods.setdefault("HEAD", handler)

    async def start(self, host: str, port: int) -> None:
        """Bind and listen (SO_REUSEADDR, as aiohttp's TCPSite(reuse_address=True)); OSError when the port is taken."""
        self._server = await asyncio.start_server(self._connection, host, port, reuse_address=True, backlog=BACKLOG)

    @property
    def port(self) -> int:
        """The bound port (what port 0 became)."""
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening and end every connection, idle or in a request (the engine that feeds them is gone)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while await self._exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away: only this connection ends
        finally:
            self._connections.discard(task)
            writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One request and its response; False when the connection is to be closed."""
        try:
            req = await read_request(reader, writer)
        except ProtocolError as exc:
            writer.write(response_bytes(None, text_response(str(exc), exc.status), False))
            await writer.drain()
            return False
        if req is None:
            return False
        resp = await self._dispatch(req)
        if isinstance(resp, Stream):
            await resp.finish()
            return req.keep_alive and resp.chunked
        if resp is None:  # the handler failed after its stream began: the body cannot be ended cleanly
            return False
        keep = req.keep_alive
        writer.write(response_bytes(req, resp, keep))
        await writer.drain()
        return keep

    async def _dispatch(self, req: Request) -> Response | Stream | None:
        resp = self.guard(req) if self.guard is not None else None
        if resp is not None:
            return resp
        methods = self.routes.get(req.path)
        if methods is None:
            return text_response("404: Not Found", 404)
        handler = methods.get(req.method) or methods.get("*")
        if handler is None:
            resp = text_response("405: Method Not Allowed", 405)
            resp.headers["Allow"] = ",".join(sorted(methods))
            return resp
        try:
            return await handler(req)
        except HTTPError as exc:
            return exc.response if not req.stream_started else None
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception:
            import traceback

            sys.stderr.write("Error handling request\n" + traceback.format_exc())
            sys.stderr.flush()
            if req.stream_started:
                return None
            return text_response("500 Internal Server Error\n\nServer got itself in trouble", 500)


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Request | None:
    """The next request with its body, or None when the client closed (or stayed idle IDLE_S) between requests."""
    timer = asyncio.get_running_loop().call_later(IDLE_S, writer.close)  # EOF for the read below
    try:
        line = await read_line(reader)
        for _ in range(4):  # RFC 9112 2.2: empty lines before a request line are ignored
            if line not in (b"\r\n", b"\n"):
                break
            line = await read_line(reader)
    finally:
        timer.cancel()
    if not line:
        return None
    method, target, version = parse_request_line(line)
    headers = await read_headers(reader)
    length = body_length(headers, request=True)
    if length > MAX_BODY:
        raise ProtocolError(f"request body of {length} bytes exceeds {MAX_BODY}", 413)
    if "expect" in headers:
        expect = first(headers, "expect")
        if expect.lower() != "100-continue":
            raise ProtocolError(f"unknown Expect: {expect}", 417)
        if version == "1.1" and length != 0:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    path, _, query = target.partition("?")
    if "%" in path:
        from urllib.parse import unquote

        path = unquote(path)
    req = Request(method, path, query, version, headers, writer=writer)
    if length == CHUNKED:
        parts, size = [], 0
        async for data in chunks(reader):
            size += len(data)
            if size > MAX_BODY:
                raise ProtocolError(f"request body exceeds {MAX_BODY} bytes", 413)
            parts.append(data)
        req.body = b"".join(parts)
    elif length:
        req.body = await reader.readexactly(length)
    return req


def parse_request_line(line: bytes) -> tuple[str, str, str]:
    """(method, origin-form target, "1.0" | "1.1"); an absolute-form target keeps only its path."""
    parts = line.decode("latin-1").rstrip("\r\n").split(" ")
    if len(parts) != 3 or not is_token(parts[0]):
        raise ProtocolError(f"invalid request line {line[:80]!r}")
    method, target, proto = parts
    name, _, number = proto.partition("/")
    major, dot, minor = number.partition(".")
    if name != "HTTP" or not dot or not (major.isdigit() and minor.isdigit()) or len(number) != 3:
        raise ProtocolError(f"invalid HTTP version {proto!r}")
    if major != "1":
        raise ProtocolError(f"HTTP version {number} is not supported", 505)
    if target.startswith(("http://", "https://")):
        rest = target.split("://", 1)[1]
        target = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    elif not target.startswith("/") and not (method == "OPTIONS" and target == "*"):
        raise ProtocolError(f"invalid request target {target[:80]!r}")
    return method, target, "1.0" if minor == "0" else "1.1"
