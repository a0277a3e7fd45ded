"""`nvidia-smi topo -p2p r|w|n|a|p`: the per-pair P2P capability status matrix.

The layout differs from `topo -m`: every line starts with a space, the header is ANSI-underlined, cells are
unpadded (`X`, `OK`, `CNS`) and every line ends with a TAB. The output does not always say which capability it
shows, so the caller passes `kind`; when the text does name it (a `topo -p2p r` command echo or a "read"
capability title) the parser checks that the two agree, which catches a write matrix saved as the read file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from orchestrator.parsers import ParseError, strip_ansi

__all__ = ["P2PKind", "P2PMatrix", "P2PStatus", "detect_p2p_kind", "parse_p2p"]

P2PKind = Literal["read", "write", "nvlink", "atomics", "pcie"]

_KIND_BY_LETTER: dict[str, P2PKind] = {"r": "read", "w": "write", "n": "nvlink", "a": "atomics", "p": "pcie"}
_KIND_BY_WORD: dict[str, P2PKind] = {
    "read": "read",
    "write": "write",
    "nvlink": "nvlink",
    "atomics": "atomics",
    "atomic": "atomics",
    "pcie": "pcie",
    "prop": "pcie",
}


class P2PStatus(StrEnum):
    """NVML `nvmlGpuP2PStatus_t` as nvidia-smi abbreviates it."""

    OK = "OK"
    CNS = "CNS"  # chipset not supported
    GNS = "GNS"  # GPU not supported
    TNS = "TNS"  # topology not supported (IOH topology)
    NS = "NS"  # not supported
    DR = "DR"  # disabled by regkey
    U = "U"  # unknown
    X = "X"  # self

    @property
    def meaning(self) -> str:
        return _MEANING[self]


_MEANING: dict[P2PStatus, str] = {
    P2PStatus.OK: "status OK",
    P2PStatus.CNS: "chipset not supported",
    P2PStatus.GNS: "GPU not supported",
    P2PStatus.TNS: "topology not supported",
    P2PStatus.NS: "not supported",
    P2PStatus.DR: "disabled by regkey",
    P2PStatus.U: "unknown",
    P2PStatus.X: "self",
}

_STATUS_VALUES = {s.value for s in P2PStatus}
_GPU_RE = re.compile(r"GPU\d+")
_CMD_RE = re.compile(r"topo\s+-p2p\s+([rwnap])\b")
_TITLE_RE = re.compile(r"\b(read|write|nvlink|atomics?|pcie|prop)\b[^\n]*\b(capabilit|p2p)", re.IGNORECASE)


def detect_p2p_kind(text: str) -> P2PKind | None:
    """The capability named by the text itself (command echo or title line), else None."""
    for line in strip_ansi(text).splitlines():
        if line.strip().startswith("Legend"):
            break
        m = _CMD_RE.search(line)
        if m:
            return _KIND_BY_LETTER[m.group(1)]
        m = _TITLE_RE.search(line)
        if m:
            return _KIND_BY_WORD[m.group(1).lower()]
    return None


@dataclass(frozen=True)
class P2PMatrix:
    """`status[(a, b)]` is the capability from GPU a (row) to GPU b (column); `X` on the diagonal."""

    gpus: tuple[str, ...]
    status: dict[tuple[str, str], P2PStatus] = field(hash=False)
    kind: P2PKind | None = None

    def get(self, a: str | int, b: str | int) -> P2PStatus:
        na = f"GPU{a}" if isinstance(a, int) else a
        nb = f"GPU{b}" if isinstance(b, int) else b
        return self.status[(na, nb)]

    def all_ok(self) -> bool:
        return all(s in (P2PStatus.OK, P2PStatus.X) for s in self.status.values())

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "gpus": list(self.gpus),
            "status": {a: {b: self.status[(a, b)].value for b in self.gpus} for a in self.gpus},
        }


def parse_p2p(text: str, kind: P2PKind | None = None) -> P2PMatrix:
    """Parse one `topo -p2p` matrix. `kind` is what the caller asked for; the text's own claim must agree."""
    detected = detect_p2p_kind(text)
    if kind is not None and detected is not None and kind != detected:
        raise ParseError(f"expected a topo -p2p {kind} matrix but the text is a {detected} matrix", text)
    lines = strip_ansi(text).replace("\r", "").splitlines()

    header: list[str] = []
    start = 0
    for i, line in enumerate(lines):
        if line.strip().startswith("Legend"):
            break
        tokens = line.split()
        if tokens and all(_GPU_RE.fullmatch(t) for t in tokens):
            header, start = tokens, i + 1
            break
    if not header:
        raise ParseError("not an nvidia-smi topo -p2p matrix (no header with GPU columns)", text)

    status: dict[tuple[str, str], P2PStatus] = {}
    rows: list[str] = []
    for line in lines[start:]:
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0] not in header:
            if rows:
                break
            raise ParseError(f"topo -p2p row label {tokens[0]!r} is not a header GPU", line)
        row, cells = tokens[0], tokens[1:]
        if len(cells) != len(header):
            raise ParseError(f"topo -p2p row {row} has {len(cells)} cells, expected {len(header)}", line)
        for col, cell in zip(header, cells, strict=True):
            if cell not in _STATUS_VALUES:
                raise ParseError(f"topo -p2p row {row} column {col}: unknown status {cell!r}", line)
            status[(row, col)] = P2PStatus(cell)
        rows.append(row)

    missing = [g for g in header if g not in rows]
    if missing:
        raise ParseError(f"topo -p2p matrix is missing rows for {', '.join(missing)} (truncated?)", text)
    return P2PMatrix(gpus=tuple(header), status=status, kind=kind or detected)
