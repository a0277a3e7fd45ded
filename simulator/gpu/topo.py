"""`nvidia-smi topo -m` / `topo -p2p X`: replay the captured matrices, byte-exact for the full GPU set.

A capture is parsed into (column names, rows, legend tail) and rendered back with the same TABs and
ANSI underline codes. Rendering a subset (a container that only got some /dev/nvidiaN) drops the other
rows/columns and renumbers GPUs, as nvidia-smi does inside such a container. For the full set the
output is the capture itself (tested). Imports only builtin modules and `os` (smi.py says why).
"""

from __future__ import annotations

import os

from .profiles import CAPTURES_DIR

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .profiles import GpuProfile

UL_ON = "\x1b[4m"
UL_OFF = "\x1b[0m"

P2P_LEGEND = """
Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
  GNS  = GPU not supported
  TNS  = Topology not supported
  NS   = Not supported
  U    = Unknown
"""


class Matrix:
    """A parsed topo matrix: GPU-to-GPU cells plus per-row trailing cells (affinities)."""

    __slots__ = ("extra_cols", "gpu_cols", "rows", "tail")

    def __init__(self, gpu_cols: int, extra_cols: list[str], rows: list[list[str]], tail: str) -> None:
        self.gpu_cols = gpu_cols
        self.extra_cols = extra_cols  # header names after the GPU columns
        self.rows = rows  # per GPU row: gpu_cols cells, then the extra cells
        self.tail = tail  # everything after the matrix rows (blank line + legend)


def parse_topo_m(text: str) -> Matrix:
    lines = text.split("\n")
    header = lines[0].replace(UL_ON, "").replace(UL_OFF, "").split("\t")[1:]
    gpu_cols = sum(1 for h in header if h.startswith("GPU") and h[3:].isdigit())
    rows: list[list[str]] = []
    i = 1
    while i < len(lines) and lines[i].startswith("GPU"):
        rows.append(lines[i].split("\t")[1:])
        i += 1
    return Matrix(gpu_cols, header[gpu_cols:], rows, "\n".join(lines[i:]))


def render_topo_m(m: Matrix, keep: list[int]) -> str:
    """Render rows/columns `keep` (capture indices), renumbered from 0."""
    names = [f"GPU{n}" for n in range(len(keep))]
    out = ["\t" + UL_ON + "\t".join(names + m.extra_cols) + UL_OFF]
    for n, i in enumerate(keep):
        row = m.rows[i]
        cells = [row[j] for j in keep] + row[m.gpu_cols:]
        out.append("\t".join([f"GPU{n}", *cells]))
    return "\n".join(out) + "\n" + m.tail


def parse_p2p(text: str) -> list[list[str]]:
    lines = text.split("\n")
    rows = []
    for line in lines[1:]:
        if not line.startswith(" GPU"):
            break
        rows.append(line.split("\t")[1:-1])
    return rows


def render_p2p(cells: list[list[str]], keep: list[int]) -> str:
    names = [f"GPU{n}" for n in range(len(keep))]
    out = [" \t" + UL_ON + "\t".join(names) + "\t" + UL_OFF]
    for n, i in enumerate(keep):
        out.append(" " + "\t".join([f"GPU{n}", *[cells[i][j] for j in keep]]) + "\t")
    return "\n".join(out) + "\n" + P2P_LEGEND


def _read(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode()


def topo_m(profile: GpuProfile, keep: list[int]) -> str:
    path = os.path.join(CAPTURES_DIR, profile.capture_dir, "topo-m.txt")
    return render_topo_m(parse_topo_m(_read(path)), keep)


def topo_p2p(profile: GpuProfile, kind: str, keep: list[int]) -> str:
    """P2P matrix for kind r/w/n/a/p: the capture when there is one, else the profile's constructed default."""
    path = os.path.join(CAPTURES_DIR, profile.capture_dir, f"topo-p2p-{kind}.txt")
    if os.path.exists(path):
        cells = parse_p2p(_read(path))
    else:
        status = profile.p2p_default.get(kind, "NS")
        n = len(profile.gpus)
        cells = [["X" if i == j else status for j in range(n)] for i in range(n)]
    return render_p2p(cells, keep)
