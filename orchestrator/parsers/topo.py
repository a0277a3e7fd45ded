"""`nvidia-smi topo -m`: the GPU/NIC connection matrix, affinities and legend.

Why a careful parser: the matrix decides whether P2P can work and whether a container sees the same PCIe tree as
the host. Real outputs differ: TAB-separated with an ANSI-underlined header that starts with a TAB, space-aligned
pastes, ` X ` self cells, an extra empty field before `GPU NUMA ID`, NIC rows and columns (`NIC0`, `mlx5_0`) with a
`NIC Legend:` block, older drivers without the NUMA columns, and `NV#` NVLink cells. The parser relies only on the
format's rules: a header naming the devices, one row per device whose first token is the device name, then the
affinity values in header order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from orchestrator.parsers import ParseError, strip_ansi

__all__ = [
    "LINK_RANK",
    "GpuAffinity",
    "TopoMatrix",
    "expand_cpu_list",
    "is_link",
    "link_rank",
    "parse_topo",
]

#: Best → worst. `NV#` is any NVLink bond; `SOC` is the pre-2017 spelling of `SYS`.
LINK_RANK: dict[str, int] = {"NV#": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}

_LINK_RE = re.compile(r"^(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_DEVICE_RE = re.compile(r"(?:GPU|NIC)\d+|mlx\d+_\d+")
_KNOWN_COLS_RE = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID")
_HEADER_TOKEN_RE = re.compile(rf"(?:{_KNOWN_COLS_RE.pattern}|{_DEVICE_RE.pattern})(?=\s|$)")
_LEGEND_RE = re.compile(r"^\s*(X|SYS|SOC|NODE|PHB|PXB|PIX|NV#)\s*=\s*(.+?)\s*$")
_NIC_ALIAS_RE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


def is_link(cell: str) -> bool:
    """True for a valid matrix cell (`X`, `NV18`, `PIX`, ... `SYS`, old `SOC`)."""
    return bool(_LINK_RE.match(cell))


def link_rank(link: str) -> int:
    """Rank of a link type, lower is better: NV# < PIX < PXB < PHB < NODE < SYS (`X` is -1)."""
    if link == "X":
        return -1
    if link.startswith("NV"):
        return LINK_RANK["NV#"]
    if link == "SOC":
        return LINK_RANK["SYS"]
    try:
        return LINK_RANK[link]
    except KeyError:
        raise ValueError(f"unknown topology link type {link!r}") from None


def expand_cpu_list(spec: str) -> tuple[int, ...]:
    """`0-63,128-191` → (0, 1, ..., 191). Used to pin a service to the CPUs near its GPUs."""
    cpus: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not (lo.isdigit() and (not sep or hi.isdigit())):
            raise ValueError(f"not a CPU list: {spec!r}")
        cpus.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    return tuple(cpus)


@dataclass(frozen=True)
class GpuAffinity:
    """Affinity columns of one GPU row; None where the column is absent (older drivers) or `N/A`."""

    cpu_affinity: str | None = None
    numa_affinity: str | None = None
    gpu_numa_id: str | None = None

    @property
    def cpus(self) -> tuple[int, ...]:
        return expand_cpu_list(self.cpu_affinity) if self.cpu_affinity else ()


@dataclass(frozen=True)
class TopoMatrix:
    """The parsed matrix. `cells[(row, col)]` holds every cell as printed (`X` on the diagonal).

    GPU pairs are looked up with `link()`; GPU↔NIC with `nic_link()`. Treat the dicts as read-only.
    """

    gpus: tuple[str, ...]
    nics: tuple[str, ...]
    cells: dict[tuple[str, str], str] = field(hash=False)
    affinity: dict[str, GpuAffinity] = field(hash=False)
    nic_aliases: dict[str, str] = field(default_factory=dict, hash=False)
    legend: dict[str, str] = field(default_factory=dict, hash=False)
    has_numa_columns: bool = False

    def gpu_name(self, gpu: str | int) -> str:
        """`3` or `"GPU3"` → `"GPU3"`; raises KeyError for a GPU not in the matrix."""
        name = f"GPU{gpu}" if isinstance(gpu, int) else gpu
        if name not in self.gpus:
            raise KeyError(f"{name} is not in the topology matrix (GPUs: {', '.join(self.gpus)})")
        return name

    def link(self, a: str | int, b: str | int) -> str:
        """Link type between two GPUs (row a, column b), e.g. `PIX`, `SYS`, `NV18`; `X` when a == b."""
        return self.cells[(self.gpu_name(a), self.gpu_name(b))]

    def nic_link(self, gpu: str | int, nic: str) -> str:
        """Link between a GPU and a NIC, from the GPU row, else from the NIC row."""
        g = self.gpu_name(gpu)
        if (g, nic) in self.cells:
            return self.cells[(g, nic)]
        return self.cells[(nic, g)]

    def gpu_pairs(self) -> list[tuple[str, str]]:
        """Unordered GPU pairs in matrix order: (GPU0, GPU1), (GPU0, GPU2), ..."""
        return [(a, b) for i, a in enumerate(self.gpus) for b in self.gpus[i + 1 :]]

    def to_dict(self) -> dict[str, object]:
        return {
            "gpus": list(self.gpus),
            "nics": list(self.nics),
            "links": {a: {b: self.cells[(a, b)] for b in self.gpus} for a in self.gpus},
            "nic_links": {g: {n: self.nic_link(g, n) for n in self.nics} for g in self.gpus},
            "affinity": {
                g: {
                    "cpu_affinity": aff.cpu_affinity,
                    "numa_affinity": aff.numa_affinity,
                    "gpu_numa_id": aff.gpu_numa_id,
                }
                for g, aff in self.affinity.items()
            },
            "nic_aliases": dict(self.nic_aliases),
        }


def _tokenize_header(line: str) -> list[str]:
    """Split the header into column names, for TAB-separated and space-aligned layouts alike.

    Columns are split on TABs or runs of 2+ spaces; inside a chunk, known names (`GPU3`, `mlx5_10`,
    `CPU Affinity`) are peeled off first because space-aligned pastes can leave a single space between them.
    """
    cols: list[str] = []
    for chunk in re.split(r"\t| {2,}", line.strip()):
        chunk = chunk.strip()
        while chunk:
            m = _HEADER_TOKEN_RE.match(chunk)
            if not m:
                cols.append(chunk)
                break
            cols.append(m.group(0))
            chunk = chunk[m.end() :].strip()
    return cols


def _value(token: str | None) -> str | None:
    return None if token is None or token in ("", "N/A") else token


def parse_topo(text: str) -> TopoMatrix:
    """Parse `nvidia-smi topo -m` output. Raises ParseError when the text is not a topology matrix."""
    lines = strip_ansi(text).replace("\r", "").splitlines()

    header_idx = -1
    columns: list[str] = []
    for i, line in enumerate(lines):
        if line.strip().startswith("Legend"):
            break
        cols = _tokenize_header(line)
        if cols and _DEVICE_RE.fullmatch(cols[0]) and cols[0].startswith("GPU"):
            header_idx, columns = i, cols
            break
    if header_idx < 0:
        raise ParseError("not an nvidia-smi topo -m matrix (no header with GPU columns)", text)

    n_dev = 0
    while n_dev < len(columns) and "Affinity" not in columns[n_dev] and "NUMA" not in columns[n_dev]:
        n_dev += 1
    devices = columns[:n_dev]
    extra_cols = columns[n_dev:]
    if len(set(devices)) != len(devices):
        raise ParseError("topo -m header repeats a device column", text)

    cells: dict[tuple[str, str], str] = {}
    affinity: dict[str, GpuAffinity] = {}
    seen_rows: list[str] = []
    idx = header_idx + 1
    for idx in range(header_idx + 1, len(lines)):
        line = lines[idx]
        if not line.strip():
            continue
        if line.strip().startswith("Legend"):
            break
        tokens = line.split()
        if tokens[0] not in devices:
            if seen_rows:  # the matrix ended without a legend (trimmed paste, trailing prompt)
                break
            raise ParseError(f"topo -m row label {tokens[0]!r} is not a header device", line)
        row = tokens[0]
        links = tokens[1 : 1 + n_dev]
        if len(links) < n_dev:
            raise ParseError(f"topo -m row {row} has {len(links)} link cells, expected {n_dev}", line)
        for col, cell in zip(devices, links, strict=True):
            if not is_link(cell):
                raise ParseError(f"topo -m row {row} column {col}: {cell!r} is not a link type", line)
            cells[(row, col)] = cell
        if row.startswith("GPU"):
            # nvidia-smi prints an empty field before `GPU NUMA ID`; values are never blank otherwise, so the
            # non-empty tokens map onto the affinity columns in order (same rule for space-aligned pastes).
            values: dict[str, str | None] = dict.fromkeys(extra_cols)
            for col, tok in zip(extra_cols, tokens[1 + n_dev :], strict=False):
                values[col] = _value(tok)
            affinity[row] = GpuAffinity(
                cpu_affinity=values.get("CPU Affinity"),
                numa_affinity=values.get("NUMA Affinity"),
                gpu_numa_id=values.get("GPU NUMA ID"),
            )
        seen_rows.append(row)

    gpus = tuple(d for d in devices if d.startswith("GPU"))
    nics = tuple(d for d in devices if not d.startswith("GPU"))
    missing = [g for g in gpus if g not in seen_rows]
    if missing:
        raise ParseError(f"topo -m matrix is missing rows for {', '.join(missing)} (truncated?)", text)
    for g in gpus:
        if cells[(g, g)] != "X":
            raise ParseError(f"topo -m diagonal cell of {g} is {cells[(g, g)]!r}, expected X", text)
    for a in gpus:  # old `SOC` spelling → `SYS`, so callers see one vocabulary
        for b in devices:
            if cells.get((a, b)) == "SOC":
                cells[(a, b)] = "SYS"

    legend: dict[str, str] = {}
    nic_aliases: dict[str, str] = {}
    for line in lines[idx:]:
        m = _LEGEND_RE.match(line)
        if m:
            legend[m.group(1)] = m.group(2)
            continue
        m = _NIC_ALIAS_RE.match(line)
        if m:
            nic_aliases[m.group(1)] = m.group(2)

    return TopoMatrix(
        gpus=gpus,
        nics=nics,
        cells=cells,
        affinity=affinity,
        nic_aliases=nic_aliases,
        legend=legend,
        has_numa_columns="NUMA Affinity" in extra_cols,
    )
