"""The GPUs' power limit as a managed setting: read it, judge a wanted value against the GPUs' range, set it.

Why a module of its own: the limit is a knob (`deploy power`, `tune --power`) and a persisted host setting (the
unit of render/power_unit.py, checked by doctor), and all of them must agree on one reading of nvidia-smi.

Real formats (NVIDIA's nvidia-smi; the lines as real drivers print them, quoted in tests/fixtures/nvidia-smi-pl/):
- `--query-gpu=index,pci.bus_id,power.limit,enforced.power.limit,power.min_limit,power.max_limit,
  power.default_limit --format=csv,noheader,nounits` prints `0, 00000000:06:00.0, 700.00, 700.00, 200.00, 700.00,
  700.00` (`[N/A]` where a board has no software limit: then it is not manageable).
- `nvidia-smi [-i IDS] -pl W` as root: `Power limit for GPU 00000000:06:00.0 was set to 300.00 W from 700.00 W.`
  per GPU, then `All done.`; out of range: `Provided power limit 50.00 W is not a valid power limit which should be
  between 200.00 W and 700.00 W for GPU 00000000:06:00.0` and `Terminating early due to previous errors.` (exit
  non-zero, nothing set); as a non-root user: `Failed to set power management limit for GPU 00000000:01:00.0:
  Insufficient Permissions`; a board without the feature: `Changing power management limit is not supported for
  GPU: 00000000:01:00.0.` then `Treating as warning and moving on.`
The tool refuses a value outside the range itself, before any change, so nvidia-smi's refusal is a last resort.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.parsers import ParseError

QUERY_FIELDS = ("index", "pci.bus_id", "power.limit", "enforced.power.limit", "power.min_limit", "power.max_limit",
                "power.default_limit")
QUERY_COMMAND = f"nvidia-smi --query-gpu={','.join(QUERY_FIELDS)} --format=csv,noheader,nounits"

_SET = re.compile(r"Power limit for GPU (\S+) was set to ([\d.]+) W from ([\d.]+) W\.")
_RANGE = re.compile(r"Provided power limit ([\d.]+) W is not a valid power limit which should be between "
                    r"([\d.]+) W and ([\d.]+) W for GPU (\S+)")
_PERM = re.compile(r"Failed to set power management limit for GPU (\S+): (.+)")
_UNSUPPORTED = re.compile(r"Changing power management limit is not supported for GPU: (\S+?)\.?$")


@dataclass(frozen=True)
class GpuPowerLimit:
    """One GPU's power limits in watts as the driver reports them (None: `[N/A]`, the board has no such limit)."""

    index: int
    bus_id: str
    limit_w: float | None
    enforced_w: float | None
    min_w: float | None
    max_w: float | None
    default_w: float | None

    @property
    def manageable(self) -> bool:
        return None not in (self.limit_w, self.min_w, self.max_w)

    def to_dict(self) -> dict[str, object]:
        return {"index": self.index, "bus_id": self.bus_id, "limit_w": self.limit_w, "enforced_w": self.enforced_w,
                "min_w": self.min_w, "max_w": self.max_w, "default_w": self.default_w}


def _watts(cell: str) -> float | None:
    cell = cell.strip()
    if cell.startswith("[") or cell in ("N/A", ""):
        return None
    try:
        return float(cell.split()[0])
    except ValueError:
        raise ParseError(f"power limit query: {cell!r} is not a wattage") from None


def parse_power_limits(text: str) -> list[GpuPowerLimit]:
    """QUERY_COMMAND's rows (no header, no units; a header line or units are tolerated)."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if not line.strip() or cells[0] == "index":
            continue
        if len(cells) != len(QUERY_FIELDS) or not cells[0].isdigit():
            raise ParseError(f"power limit query: unexpected line {line!r}")
        gpus.append(GpuPowerLimit(int(cells[0]), cells[1], *(_watts(c) for c in cells[2:])))
    return gpus


def _fmt(w: float) -> str:
    return f"{w:g} W"


def selected(gpus: Sequence[GpuPowerLimit], indices: Sequence[int] | None) -> list[GpuPowerLimit]:
    """The GPUs `indices` names (all when None); an index the host does not have is refused by `refusal`."""
    return list(gpus) if indices is None else [g for g in gpus if g.index in indices]


def refusal(gpus: Sequence[GpuPowerLimit], watts: int, indices: Sequence[int] | None = None) -> str | None:
    """Why `watts` cannot be the limit of these GPUs (each refused one with its allowed range), or None."""
    if not gpus:
        return "nvidia-smi reported no GPU: the driver is not loaded or no GPU is visible"
    known = {g.index for g in gpus}
    missing = sorted(set(indices or ()) - known)
    if missing:
        return f"no GPU {', '.join(map(str, missing))} on this host (it has {', '.join(map(str, sorted(known)))})"
    problems = []
    for g in selected(gpus, indices):
        if not g.manageable:
            problems.append(f"GPU {g.index} ({g.bus_id}) has no software power limit to change")
        elif not (g.min_w or 0) <= watts <= (g.max_w or 0):
            problems.append(f"GPU {g.index} allows {_fmt(g.min_w or 0)} to {_fmt(g.max_w or 0)}")
    return f"{watts} W is out of range: " + "; ".join(problems) if problems else None


def common_range(gpus: Sequence[GpuPowerLimit]) -> tuple[float, float] | None:
    """The range every manageable GPU accepts (highest minimum, lowest maximum); None when there is none."""
    ok = [g for g in gpus if g.manageable]
    if not ok:
        return None
    low, high = max(g.min_w or 0 for g in ok), min(g.max_w or 0 for g in ok)
    return (low, high) if low <= high else None


def in_force(gpus: Sequence[GpuPowerLimit], watts: float, indices: Sequence[int] | None = None) -> bool:
    """Whether each selected GPU's limit is `watts` (to nvidia-smi's 0.01 W)."""
    chosen = selected(gpus, indices)
    return bool(chosen) and all(g.limit_w is not None and abs(g.limit_w - watts) < 0.5 for g in chosen)


def set_command(watts: int, indices: Sequence[int] | None = None) -> str:
    """`nvidia-smi [-i 0,1] -pl W` (all GPUs without `-i`)."""
    ids = f"-i {shlex.quote(','.join(map(str, indices)))} " if indices else ""
    return f"nvidia-smi {ids}-pl {int(watts)}"


@dataclass(frozen=True)
class SetOutcome:
    """What `nvidia-smi -pl` said: the GPUs it set (bus id → (new W, old W)) and the lines it refused with."""

    set: dict[str, tuple[float, float]]
    refused: list[str]


def parse_set_output(text: str) -> SetOutcome:
    """nvidia-smi -pl's lines: each set GPU, and any refusal (range, permissions, unsupported) verbatim."""
    done: dict[str, tuple[float, float]] = {}
    refused = []
    for line in text.splitlines():
        line = line.strip()
        if m := _SET.search(line):
            done[m.group(1)] = (float(m.group(2)), float(m.group(3)))
        elif _RANGE.search(line) or _PERM.search(line) or _UNSUPPORTED.search(line):
            refused.append(line)
    return SetOutcome(done, refused)


__all__ = ["QUERY_COMMAND", "QUERY_FIELDS", "GpuPowerLimit", "SetOutcome", "common_range", "in_force",
           "parse_power_limits", "parse_set_output", "refusal", "selected", "set_command"]
