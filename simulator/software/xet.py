"""Xet storage as the real Hub serves it, for the model hub stand-in (simulator/software/hub.py). Pure: no I/O.

Why: `hf download` (huggingface_hub 1.x with `hf_xet`, which huggingface_hub installs on x86_64) takes the Xet path
for every file whose `/resolve` answer carries `X-Xet-Hash`, as every LFS file on the real Hub now does; the plain
HTTP body is then never asked for. Checked against huggingface_hub 1.33 (file_download.py `xet_get`,
utils/_xet.py) and xet-core (hf_xet; xet_client/src/cas_types, cas_client/remote_client.rs,
xet_core_structures/src/xorb_object/xorb_chunk_format.rs):
- `/resolve` of an LFS file: `X-Xet-Hash: <64 hex>` and `Link: <…/api/models/{repo}/xet-read-token/{commit}>;
  rel="xet-auth"`; the tree listing gives the same hash as `xetHash` (the client then skips the HEAD call);
- the token endpoint answers `X-Xet-Cas-Url`, `X-Xet-Access-Token`, `X-Xet-Token-Expiration` (and the same as
  JSON); hf_xet calls it again when the token is about to expire;
- the CAS: `GET {cas}/v2/reconstructions/{file_hash}` (hf_xet ≥ 1.5 asks v2 first, v1 on a 404), with the access
  token as Bearer, optionally a `Range` of the file: terms (xorb hash, chunk range, unpacked length) and where to
  fetch each xorb's bytes (a presigned URL and an inclusive byte range);
- a xorb is a run of chunks, each an 8-byte header (version 0, 3-byte LE compressed length, scheme, 3-byte LE
  uncompressed length) and its bytes; scheme 0 (none) here, which hf_xet accepts as the real CAS's LZ4 ones.
The hashes are content-derived but not Xet's merkle hashes: hf_xet checks sizes, not hashes, when it downloads.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from functools import cached_property

#: Bytes per chunk: Xet's target chunk size (64 KiB; at most 128 KiB are allowed).
CHUNK_BYTES = 64 * 1024
HEADER_BYTES = 8


def xet_hash(data: bytes) -> str:
    """The file's Xet hash (64 hex, what `X-Xet-Hash` and the tree's `xetHash` carry)."""
    return hashlib.sha256(b"deploy-sim xet file\0" + data).hexdigest()


def chunk_header(length: int) -> bytes:
    """An uncompressed chunk's header: version 0, compressed and uncompressed lengths (3 bytes LE), scheme 0."""
    three = struct.pack("<I", length)[:3]
    return b"\x00" + three + b"\x00" + three


@dataclass(frozen=True)
class Xorb:
    """The one xorb that holds a file's chunks (real files span many xorbs; one is enough for the client)."""

    data: bytes

    @cached_property
    def hash(self) -> str:
        return hashlib.sha256(b"deploy-sim xorb\0" + self.data).hexdigest()

    @property
    def chunks(self) -> int:
        return max(1, -(-len(self.data) // CHUNK_BYTES))

    @cached_property
    def serialized(self) -> bytes:
        """The xorb's bytes as the CAS stores them: each chunk's header, then its bytes."""
        out = bytearray()
        for i in range(self.chunks):
            piece = self.data[i * CHUNK_BYTES:(i + 1) * CHUNK_BYTES]
            out += chunk_header(len(piece)) + piece
        return bytes(out)

    def chunk_offset(self, index: int) -> int:
        """Where chunk `index` starts in `serialized` (index == chunks: its end)."""
        return min(index * (CHUNK_BYTES + HEADER_BYTES), len(self.serialized))

    def unpacked(self, first: int, end: int) -> int:
        """Bytes of file data in chunks [first, end)."""
        return min(end * CHUNK_BYTES, len(self.data)) - first * CHUNK_BYTES


class RangeNotSatisfiable(ValueError):
    """The asked byte range starts past the end of the file (the CAS answers 416)."""


def reconstruction(xorb: Xorb, xorb_url: str, byte_range: tuple[int, int | None] | None,
                   version: int) -> dict[str, object]:
    """The CAS's answer for a file held in `xorb`: v1 (`fetch_info`) or v2 (`xorbs`) JSON, for the whole file or
    the inclusive `byte_range` (start, end or None) at chunk granularity, as the real CAS (the client trims)."""
    size = len(xorb.data)
    start, end = (0, size - 1) if byte_range is None else (byte_range[0], byte_range[1])
    end = size - 1 if end is None else min(end, size - 1)
    if size and start > end:
        raise RangeNotSatisfiable(f"bytes {start}-{end} of {size}")
    first, last = (start // CHUNK_BYTES, end // CHUNK_BYTES + 1) if size else (0, 1)
    chunks = {"start": first, "end": last}
    url_range = {"start": xorb.chunk_offset(first), "end": xorb.chunk_offset(last) - 1}
    doc: dict[str, object] = {
        "offset_into_first_range": start - first * CHUNK_BYTES,
        "terms": [{"hash": xorb.hash, "unpacked_length": xorb.unpacked(first, last), "range": chunks}],
    }
    if version == 1:
        doc["fetch_info"] = {xorb.hash: [{"range": chunks, "url": xorb_url, "url_range": url_range}]}
    else:
        doc["xorbs"] = {xorb.hash: [{"url": xorb_url, "ranges": [{"chunks": chunks, "bytes": url_range}]}]}
    return doc
