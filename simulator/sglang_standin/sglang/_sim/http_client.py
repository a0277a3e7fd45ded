"""A minimal asyncio HTTP/1.1 client for the bench stand-in: one connection per request, plain http only.

Why not aiohttp: its import costs about 0.25 s of CPU per bench start (see http_wire). One connection per request
is what the real bench_serving does (a ClientSession per request), so the server sees the same connection pattern;
the request says `Connection: close` (RFC 9112 9.6, a client without persistent connections). Response bodies
framed by Content-Length, chunked or the connection's close. Failures raise ClientError subclasses named and
worded like aiohttp's, because the bench reports them as `Type: message` and real sglang's bench runs on aiohttp.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

from sglang._sim.http_wire import (
    CHUNKED,
    TO_EOF,
    Headers,
    ProtocolError,
    body_length,
    chunks,
    read_headers,
    read_line,
)

USER_AGENT = f"Python/{sys.version_info[0]}.{sys.version_info[1]} sglang-sim-bench"
READ_SIZE = 65536


class ClientError(Exception):
    """Any failure of a request (aiohttp.ClientError)."""


class ClientConnectorError(ClientError):
    """The connection could not be made."""


class ServerDisconnectedError(ClientError):
    """The server closed the connection before its response's head."""


class ClientPayloadError(ClientError):
    """The response's body was cut or badly framed."""


class ClientOSError(ClientError):
    """A socket error in the middle of the exchange (a reset, a broken pipe)."""


class ClientResponse:
    """Status, headers and a body to read once: whole (read, text, json) or line by line (lines, for SSE)."""

    def __init__(self, status: int, reason: str, headers: Headers, reader: asyncio.StreamReader,
                 length: int) -> None:
        self.status, self.reason, self.headers = status, reason, headers
        self._reader, self._length = reader, length

    async def _pieces(self) -> AsyncIterator[bytes]:
        try:
            if self._length == CHUNKED:
                async for data in chunks(self._reader):
                    yield data
            elif self._length == TO_EOF:
                while data := await self._reader.read(READ_SIZE):
                    yield data
            else:
                left = self._length
                while left:
                    data = await self._reader.read(min(left, READ_SIZE))
                    if not data:
                        raise asyncio.IncompleteReadError(b"", left)
                    left -= len(data)
                    yield data
        except (asyncio.IncompleteReadError, ProtocolError) as exc:
            raise ClientPayloadError(f"Response payload is not completed: {exc!r}") from None
        except OSError as exc:
            raise ClientOSError(*exc.args) from None

    async def read(self) -> bytes:
        return b"".join([data async for data in self._pieces()])

    async def text(self) -> str:
        return (await self.read()).decode("utf-8", errors="replace")

    async def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(await self.read())

    async def lines(self) -> AsyncIterator[bytes]:
        """The body split after each b"\\n" (kept), as iterating aiohttp's response.content gives it."""
        rest = b""
        async for data in self._pieces():
            rest += data
            start = 0
            while (end := rest.find(b"\n", start)) >= 0:
                yield rest[start:end + 1]
                start = end + 1
            rest = rest[start:]
        if rest:
            yield rest


class Client:
    """Requests with the same headers (Authorization) on a connection each."""

    def __init__(self, headers: dict[str, str] | None = None) -> None:
        self.headers = dict(headers or {})

    @asynccontextmanager
    async def request(self, method: str, url: str, json_body: Any = None) -> AsyncIterator[ClientResponse]:
        """Send one request; the response's body is read inside the block, the connection closed after it."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ClientError(f"unsupported URL {url!r} (plain http only)")
        host, port = parts.hostname, parts.port or 80
        body = b"" if json_body is None else json.dumps(json_body).encode()
        fields = {"Host": parts.netloc.rpartition("@")[2], "User-Agent": USER_AGENT, "Accept": "*/*",
                  **self.headers, "Connection": "close"}
        if json_body is not None:
            fields["Content-Type"] = "application/json"
        if body or method in ("POST", "PUT", "PATCH"):
            fields["Content-Length"] = str(len(body))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
        try:
            reader, writer = await asyncio.open_connection(host, port, limit=READ_SIZE * 2)
        except OSError as exc:
            raise ClientConnectorError(f"Cannot connect to host {host}:{port} ssl:default "
                                       f"[{exc.strerror or exc}]") from None
        try:
            try:
                writer.write(head.encode("latin-1") + body)
                await writer.drain()
                resp = await _read_response(reader, method)
            except OSError as exc:
                raise ClientOSError(*exc.args) from None
            yield resp
        finally:
            writer.close()


async def _read_response(reader: asyncio.StreamReader, method: str) -> ClientResponse:
    """The final response's head (1xx interim responses skipped) and how its body is framed."""
    while True:
        try:
            line = await read_line(reader)
            if not line:
                raise ServerDisconnectedError("Server disconnected")
            version, _, rest = line.decode("latin-1").rstrip("\r\n").partition(" ")
            code, _, reason = rest.partition(" ")
            if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
                raise ClientPayloadError(f"invalid status line {line[:80]!r}")
            headers = await read_headers(reader)
            status = int(code)
            if 100 <= status < 200:
                continue
            no_body = method == "HEAD" or status in (204, 304)
            length = 0 if no_body else body_length(headers, request=False)
        except ProtocolError as exc:
            raise ClientPayloadError(str(exc)) from None
        return ClientResponse(status, reason, headers, reader, length)
