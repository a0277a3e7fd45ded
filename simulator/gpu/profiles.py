"""GPU profiles: each one replays real captured nvidia-smi output (see captures/<profile>/).

Identity and idle telemetry (UUIDs, bus ids, minor numbers, idle watts, clocks, memory sizes) are read
from the captured `nvidia-smi -q` of the profile, so the simulator never invents what a real box told
us. Only the load shape (how far clocks/temperature rise under load) is a parameter, taken from the
real H200 under-load capture (dmon-under-load.txt, query-loop-under-load.csv).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from simulator import derived

CAPTURES = Path(__file__).resolve().parent / "captures"


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi enumerates it (index = position in PCI bus order)."""

    index: int
    minor: int
    uuid: str
    name: str
    bus_id: str
    serial: str
    vbios: str
    idle_power_w: float
    idle_temp_c: int
    idle_mem_temp_c: int | None
    idle_sm_mhz: int
    idle_mem_mhz: int
    mem_total_mib: int
    bar1_total_mib: int


@dataclass(frozen=True)
class LoadShape:
    """How telemetry moves from idle to full load (fraction 1.0 = power at the limit)."""

    busy_sm_mhz: int  # SM clock when busy at low power (boost); throttles toward busy_sm_min at the limit
    busy_sm_min_mhz: int
    busy_mem_mhz: int
    temp_rise_c: int
    idle_pcie_gen: int
    mem_util_at_full: int


@dataclass(frozen=True)
class GpuProfile:
    """Everything nvidia-smi and the host's /dev, /proc need for one simulated box."""

    name: str
    capture_dir: str  # folder under captures/ holding topo-*.txt
    ident_dir: str  # folder holding q.txt (identity and idle values)
    driver_version: str
    cuda_version: str
    power_limit_w: float
    power_min_w: float
    gpus: tuple[Gpu, ...]
    load: LoadShape
    max_sm_mhz: int
    max_mem_mhz: int
    pcie_max_gen: int
    pcie_width: int
    uvm_major: int
    caps_major: int
    caps_imex_major: int
    cpu_affinity: str
    p2p_default: dict[str, str] = field(default_factory=dict)  # p2p kind -> status when no capture

    @property
    def captures(self) -> Path:
        return CAPTURES / self.capture_dir

    def capture(self, name: str) -> Path | None:
        """The captured file `name` for this profile (own folder first, then the identity folder)."""
        for folder in (self.capture_dir, self.ident_dir):
            path = CAPTURES / folder / name
            if path.exists():
                return path
        return None


_GPU_HEADING = re.compile(r"^GPU ([0-9A-Fa-f:.]+)$")


def _parse_q(text: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Parse `nvidia-smi -q` into a header dict and one flat 'Section/Key' dict per GPU."""
    header: dict[str, str] = {}
    gpus: list[dict[str, str]] = []
    stack: list[tuple[int, str]] = []
    cur: dict[str, str] | None = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        m = _GPU_HEADING.match(line)
        if m:
            cur = {"Bus": m.group(1)}
            gpus.append(cur)
            stack = []
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, sep, value = line.strip().partition(":")
        key = key.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "/".join([s for _, s in stack] + [key])
        if not sep:  # a section heading such as "PCI" or "GPU Power Readings"
            stack.append((indent, key))
        elif cur is None:
            header[key] = value.strip()
        else:
            cur[path] = value.strip()
    return header, gpus


def _num(text: str) -> float:
    m = re.search(r"-?\d+(?:\.\d+)?", text)
    return float(m.group(0)) if m else 0.0


def _gpus_from_q(header: dict[str, str], blocks: list[dict[str, str]]) -> tuple[dict[str, str], tuple[Gpu, ...]]:
    gpus: list[Gpu] = []
    for b in sorted(blocks, key=lambda b: b["Bus"]):
        mem_temp = b.get("Temperature/Memory Current Temp", "N/A")
        gpus.append(
            Gpu(
                index=len(gpus),
                minor=int(b["Minor Number"]),
                uuid=b["GPU UUID"],
                name=b["Product Name"],
                bus_id=b["PCI/Bus Id"],
                serial=b.get("Serial Number", "N/A"),
                vbios=b.get("VBIOS Version", "N/A"),
                idle_power_w=_num(b["GPU Power Readings/Instantaneous Power Draw"]),
                idle_temp_c=int(_num(b["Temperature/GPU Current Temp"])),
                idle_mem_temp_c=None if "N/A" in mem_temp else int(_num(mem_temp)),
                idle_sm_mhz=int(_num(b["Clocks/SM"])),
                idle_mem_mhz=int(_num(b["Clocks/Memory"])),
                mem_total_mib=int(_num(b["FB Memory Usage/Total"])),
                bar1_total_mib=int(_num(b["BAR1 Memory Usage/Total"])),
            )
        )
    return header, tuple(gpus)


def _build(
    name: str, capture_dir: str, ident_dir: str, load: LoadShape, uvm_major: int, caps_major: int,
    caps_imex_major: int, cpu_affinity: str, p2p_default: dict[str, str],
) -> GpuProfile:
    q_file = CAPTURES / ident_dir / "q.txt"
    # parsed once per machine (simulator.derived): every replayed nvidia-smi needs it
    header, blocks = derived.cached(q_file, lambda: _parse_q(q_file.read_text()))
    header, gpus = _gpus_from_q(header, blocks)
    b0 = sorted(blocks, key=lambda b: b["Bus"])[0]
    return GpuProfile(
        name=name,
        capture_dir=capture_dir,
        ident_dir=ident_dir,
        driver_version=header["Driver Version"],
        cuda_version=header["CUDA Version"],
        power_limit_w=_num(b0["GPU Power Readings/Current Power Limit"]),
        power_min_w=_num(b0["GPU Power Readings/Min Power Limit"]),
        gpus=gpus,
        load=load,
        max_sm_mhz=int(_num(b0["Max Clocks/SM"])),
        max_mem_mhz=int(_num(b0["Max Clocks/Memory"])),
        pcie_max_gen=int(_num(b0["PCI/GPU Link Info/PCIe Generation/Max"])),
        pcie_width=int(_num(b0["PCI/GPU Link Info/Link Width/Max"])),
        uvm_major=uvm_major,
        caps_major=caps_major,
        caps_imex_major=caps_imex_major,
        cpu_affinity=cpu_affinity,
        p2p_default=p2p_default,
    )


_RTX_LOAD = LoadShape(busy_sm_mhz=2430, busy_sm_min_mhz=2100, busy_mem_mhz=12481, temp_rise_c=38,
                      idle_pcie_gen=1, mem_util_at_full=30)
_H200_LOAD = LoadShape(busy_sm_mhz=1980, busy_sm_min_mhz=1470, busy_mem_mhz=3201, temp_rise_c=22,
                       idle_pcie_gen=5, mem_util_at_full=23)

PROFILE_NAMES = ("rtx-pro-6000-x8", "rtx-pro-6000-x8-vm", "h200-x2")


@cache
def get_profile(name: str) -> GpuProfile:
    """Profile by name; raises KeyError with the known names."""
    if name == "rtx-pro-6000-x8":
        # Bare metal / LXC: the real ASUS ESC8000A-E13P capture; PVE-like dynamic majors (constructed).
        return _build(name, "rtx-pro-6000-x8", "rtx-pro-6000-x8", _RTX_LOAD, 509, 511, 510,
                      "0-63,128-191", {"n": "NS", "p": "NS", "a": "OK"})
    if name == "rtx-pro-6000-x8-vm":
        # The same 8 GPUs behind a VM's virtual host bridge: flat PHB topology, P2P denied (CNS).
        return _build(name, "rtx-pro-6000-x8-vm", "rtx-pro-6000-x8", _RTX_LOAD, 509, 511, 510,
                      "0-63", {"n": "NS", "p": "NS", "a": "CNS"})
    if name == "h200-x2":
        return _build(name, "h200-x2", "h200-x2", _H200_LOAD, 238, 241, 242, "0-31", {})
    raise KeyError(f"unknown GPU profile {name!r}; known: {', '.join(PROFILE_NAMES)}")
