"""HTTP/1.1 message framing (RFC 9112) on asyncio streams, shared by the stand-in's server and bench client.

Why our own: `import aiohttp` costs about 0.25 s of CPU, paid by every stand-in server and bench start, and the
test suite starts hundreds of them. Both sides need only plain HTTP/1.1: a head of CRLF lines, then a body framed by
Content-Length, by the chunked coding, or (a response only) by the connection's close.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

MAX_LINE = 8190  # aiohttp's limit for a request line or one header line
MAX_HEADERS = 128
CHUNKED = -1  # body_length(): the chunked coding
TO_EOF = -2  # body_length(): a response body that runs to the connection's close
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_HEX = frozenset("0123456789abcdefABCDEF")


#: Header fields by lower-cased name, each with its values in the order received. A field can come twice:
#: sglang-router 0.3.2 sends its worker two `Authorization` fields (the client's and its own).
Headers = dict[str, list[str]]


class ProtocolError(Exception):
    """A message this side cannot frame; `status` is what a server answers (the connection is closed after)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def is_token(text: str) -> bool:
    """An RFC 9110 token: a method or a header name."""
    return bool(text) and all(c in _TCHAR for c in text)


async def read_line(reader: asyncio.StreamReader) -> bytes:
    """One line with its LF (b"" at EOF); a line without its LF before EOF is a ProtocolError."""
    try:
        line = await reader.readline()
    except ValueError:  # the reader's buffer limit: LimitOverrunError, as readline reports it
        raise ProtocolError("line too long", 431) from None
    if len(line) > MAX_LINE + 2:
        raise ProtocolError("line too long", 431)
    if line and not line.endswith(b"\n"):
        raise ProtocolError("connection closed in the middle of a line")
    return line


async def read_headers(reader: asyncio.StreamReader) -> Headers:
    """Header fields up to the empty line."""
    headers: Headers = {}
    for _ in range(MAX_HEADERS + 1):
        line = await read_line(reader)
        if not line:
            raise ProtocolError("connection closed in the message head")
        if line in (b"\r\n", b"\n"):
            return headers
        if line[:1] in (b" ", b"\t"):
            raise ProtocolError("obsolete line folding")  # RFC 9112 5.2: a server may reject it with 400
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep or not is_token(name):
            raise ProtocolError(f"invalid header line {line[:60]!r}")
        headers.setdefault(name.lower(), []).append(value.strip())
    raise ProtocolError("too many header fields", 431)


def first(headers: Headers, name: str, default: str = "") -> str:
    """A field's first value: what aiohttp's and Starlette's `headers.get` give a handler."""
    values = headers.get(name)
    return values[0] if values else default


def elements(headers: Headers, name: str) -> list[str]:
    """The comma-separated elements of every value of a list-valued field (RFC 9110 5.3), stripped."""
    return [e.strip() for v in headers.get(name, []) for e in v.split(",")]


def body_length(headers: Headers, *, request: bool) -> int:
    """How the body is framed (RFC 9112 6.3): its length, CHUNKED, or TO_EOF (a response without framing)."""
    if "transfer-encoding" in headers:
        if "content-length" in headers:
            raise ProtocolError("both Transfer-Encoding and Content-Length")
        codings = [c.lower() for c in elements(headers, "transfer-encoding")]
        if codings == ["chunked"]:
            return CHUNKED
        if codings[-1] == "chunked":
            raise ProtocolError(f"unsupported transfer coding {', '.join(codings)!r}", 501)
        if request:  # the length of a request body cannot be known: 400, then close
            raise ProtocolError(f"request body framed by {', '.join(codings)!r}")
        return TO_EOF
    if "content-length" in headers:
        values = set(elements(headers, "content-length"))
        value = values.pop()
        if values or not value.isdigit() or not value.isascii():
            raise ProtocolError(f"invalid Content-Length {', '.join(headers['content-length'])!r}")
        return int(value)
    return 0 if request else TO_EOF


async def chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """The data of a chunked body, chunk by chunk; its trailer fields are read and dropped."""
    while True:
        line = await read_line(reader)
        if not line:
            raise asyncio.IncompleteReadError(b"", None)
        size = line.split(b";", 1)[0].strip().decode("latin-1")
        if not size or not all(c in _HEX for c in size) or len(size) > 16:
            raise ProtocolError(f"invalid chunk size {line[:40]!r}")
        n = int(size, 16)
        if n == 0:
            await read_headers(reader)  # the trailer section, up to the empty line
            return
        data = await reader.readexactly(n)
        if await read_line(reader) not in (b"\r\n", b"\n"):
            raise ProtocolError("chunk data not followed by CRLF")
        yield data


def chunk(data: bytes) -> bytes:
    """`data` as one chunk of a chunked body (never the empty last chunk: that ends the body)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"


def connection_tokens(headers: Headers) -> set[str]:
    return {t.lower() for t in elements(headers, "connection")}
