"""`nvidia-smi -q` per GPU (ECC, remapped rows, clocks event reasons, the driver's recovery action), its link
query, and the lines of a GPU that is lost.

The -q layout is an indented tree (`key : value`, a key alone opens a section); the parser reads it as paths
(`ECC Errors/Volatile/DRAM Uncorrectable`) so a field that moves between driver versions is not mistaken for another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from orchestrator.parsers.hostfacts import PcieLink

#: What nvidia-smi prints for a GPU that fell off the bus (instead of its block), e.g.
#: `Unable to determine the device handle for GPU 0000:05:00.0: GPU is lost.  Reboot the system to recover this GPU`
_LOST_RE = re.compile(r"Unable to determine the device handle for GPU ?(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
                      r"[0-9A-Fa-f]{2}\.\d): (?P<why>.*)$")
_GPU_HEAD_RE = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")
#: Clocks-event reasons that mean the hardware slowed the GPU (not idle, not an application clock setting).
SLOWDOWN_REASONS = ("HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown", "SW Thermal Slowdown")


def norm_bus(bus: str) -> str:
    """`0000:05:00.0` or `00000000:05:00.0` -> nvidia-smi's `00000000:05:00.0` (upper case)."""
    dom, rest = bus.split(":", 1)
    return f"{int(dom, 16):08X}:{rest.upper()}"


@dataclass(frozen=True)
class LostGpu:
    bus_id: str
    line: str


@dataclass(frozen=True)
class SmiHealth:
    """One GPU's health sections. Counters are None when the driver says N/A."""

    bus_id: str
    fields: dict[str, str] = field(hash=False, repr=False)

    def get(self, path: str) -> str | None:
        return self.fields.get(path)

    def count(self, path: str) -> int | None:
        v = self.get(path)
        return int(v) if v is not None and v.isdigit() else None

    def yes(self, path: str) -> bool:
        return (self.get(path) or "").strip().lower() == "yes"

    @property
    def dram_uncorrectable(self) -> int | None:
        return self.count("ECC Errors/Volatile/DRAM Uncorrectable")

    @property
    def dram_correctable(self) -> int | None:
        return self.count("ECC Errors/Volatile/DRAM Correctable")

    @property
    def sram_uncorrectable(self) -> int | None:
        vals = [self.count(f"ECC Errors/Volatile/SRAM Uncorrectable {k}") for k in ("Parity", "SEC-DED")]
        known = [v for v in vals if v is not None]
        return sum(known) if known else self.count("ECC Errors/Volatile/SRAM Uncorrectable")

    @property
    def remap_pending(self) -> bool:
        return self.yes("Remapped Rows/Pending")

    @property
    def remap_failed(self) -> bool:
        return self.yes("Remapped Rows/Remapping Failure Occurred")

    @property
    def recovery_action(self) -> str | None:
        """The driver's GPU Recovery Action (`None`, `Reset`, `Reboot`, …; full `-q` of R565 and newer), or None where
        the driver prints no such field."""
        v = self.get("GPU Recovery Action")
        return v if v is not None and v != "N/A" else None

    @property
    def remapped_uncorrectable(self) -> int | None:
        return self.count("Remapped Rows/Uncorrectable Error")

    @property
    def slowdowns(self) -> tuple[str, ...]:
        """The active hardware slowdown reasons (`Clocks Event Reasons/… : Active`; nested ones by their name)."""
        out = []
        for path, value in self.fields.items():
            parts = path.split("/")
            if parts[0] in ("Clocks Event Reasons", "Clocks Throttle Reasons") and parts[-1] in SLOWDOWN_REASONS \
                    and value.strip() == "Active":
                out.append(parts[-1])
        return tuple(out)


@dataclass(frozen=True)
class SmiReport:
    gpus: tuple[SmiHealth, ...]
    lost: tuple[LostGpu, ...]


def lost_gpus(text: str) -> tuple[LostGpu, ...]:
    out = []
    for line in text.splitlines():
        m = _LOST_RE.search(line.strip())
        if m:
            out.append(LostGpu(norm_bus(m.group("bus")), line.strip()))
    return tuple(out)


def parse_smi_health(text: str) -> SmiReport:
    """Each `GPU <bus>` block of `nvidia-smi -q [-d …]` as paths, and every GPU nvidia-smi reports lost."""
    gpus: list[SmiHealth] = []
    bus: str | None = None
    fields: dict[str, str] = {}
    stack: list[tuple[int, str]] = []

    def close() -> None:
        if bus is not None:
            gpus.append(SmiHealth(bus, dict(fields)))

    for raw in text.replace("\r", "").splitlines():
        head = _GPU_HEAD_RE.match(raw)
        if head:
            close()
            bus, fields, stack = norm_bus(head.group("bus")), {}, []
            continue
        if bus is None or not raw.strip():
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        key, sep, value = raw.strip().partition(":")
        key = key.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([k for _, k in stack] + [key])
        if sep and value.strip():
            fields[path] = value.strip()
        else:
            stack.append((indent, key))
    close()
    return SmiReport(tuple(gpus), lost_gpus(text))


#: The link query the health fact runs (`--format=csv,nounits`, with its header: columns are read by name).
LINK_QUERY_FIELDS = ("index", "pci.bus_id", "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
                     "pcie.link.width.max", "utilization.gpu")


@dataclass(frozen=True)
class GpuLink:
    """A GPU's link now and at its maximum (nvidia-smi's max: the lower of the GPU's and the slot's), its load."""

    index: int
    bus_id: str
    current: PcieLink
    max: PcieLink
    util_pct: int | None


def _num(cell: str | None) -> int | None:
    cell = (cell or "").strip().removesuffix("%").strip()
    return int(cell) if cell.isdigit() else None


def parse_link_query(text: str) -> tuple[GpuLink, ...]:
    """`nvidia-smi --query-gpu=… --format=csv[,nounits]` with its header line; rows without a link are skipped."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ()
    names = [re.sub(r"\s*\[.*\]$", "", c.strip()) for c in lines[0].split(",")]
    out = []
    for line in lines[1:]:
        row = dict(zip(names, (c.strip() for c in line.split(",")), strict=False))
        idx, bus = _num(row.get("index")), row.get("pci.bus_id")
        gen, gen_max = _num(row.get("pcie.link.gen.current")), _num(row.get("pcie.link.gen.max"))
        width, width_max = _num(row.get("pcie.link.width.current")), _num(row.get("pcie.link.width.max"))
        if idx is None or not bus or gen is None or gen_max is None or width is None or width_max is None:
            continue
        out.append(GpuLink(idx, norm_bus(bus), PcieLink(gen, width), PcieLink(gen_max, width_max),
                           _num(row.get("utilization.gpu"))))
    return tuple(out)
