"""GPU profiles: each one replays real captured nvidia-smi output (see captures/<profile>/).

Identity and idle telemetry (UUIDs, bus ids, minor numbers, idle watts, clocks, memory sizes) are read
from the captured `nvidia-smi -q` of the profile, so the simulator never invents what a real box told
us. Only the load shape (how far clocks/temperature rise under load) is a parameter, taken from the
real H200 under-load capture (dmon-under-load.txt, query-loop-under-load.csv).

The container's `nvidia-smi` imports this module on every run, so it imports only `os` and builtin modules
(no pathlib, dataclasses, re, typing, functools: they cost more than the run's own work; smi.py says more).
"""

from __future__ import annotations

import os

from simulator import derived

#: The captures folder (a plain path string: see the module's docstring).
CAPTURES_DIR = os.path.join(os.path.dirname(os.path.realpath(__file__)), "captures")


class Gpu:
    """One GPU as nvidia-smi enumerates it (index = position in PCI bus order)."""

    __slots__ = ("bar1_total_mib", "bus_id", "idle_mem_mhz", "idle_mem_temp_c", "idle_power_w", "idle_sm_mhz",
                 "idle_temp_c", "index", "mem_total_mib", "minor", "name", "serial", "uuid", "vbios")

    def __init__(self, *, index: int, minor: int, uuid: str, name: str, bus_id: str, serial: str, vbios: str,
                 idle_power_w: float, idle_temp_c: int, idle_mem_temp_c: int | None, idle_sm_mhz: int,
                 idle_mem_mhz: int, mem_total_mib: int, bar1_total_mib: int) -> None:
        self.index = index
        self.minor = minor
        self.uuid = uuid
        self.name = name
        self.bus_id = bus_id
        self.serial = serial
        self.vbios = vbios
        self.idle_power_w = idle_power_w
        self.idle_temp_c = idle_temp_c
        self.idle_mem_temp_c = idle_mem_temp_c
        self.idle_sm_mhz = idle_sm_mhz
        self.idle_mem_mhz = idle_mem_mhz
        self.mem_total_mib = mem_total_mib
        self.bar1_total_mib = bar1_total_mib


class LoadShape:
    """How telemetry moves from idle to full load (fraction 1.0 = power at the limit)."""

    __slots__ = ("busy_mem_mhz", "busy_sm_mhz", "busy_sm_min_mhz", "idle_pcie_gen", "mem_util_at_full",
                 "temp_rise_c")

    def __init__(self, *, busy_sm_mhz: int, busy_sm_min_mhz: int, busy_mem_mhz: int, temp_rise_c: int,
                 idle_pcie_gen: int, mem_util_at_full: int) -> None:
        self.busy_sm_mhz = busy_sm_mhz  # SM clock when busy at low power (boost); throttles toward busy_sm_min
        self.busy_sm_min_mhz = busy_sm_min_mhz  # at the limit
        self.busy_mem_mhz = busy_mem_mhz
        self.temp_rise_c = temp_rise_c
        self.idle_pcie_gen = idle_pcie_gen
        self.mem_util_at_full = mem_util_at_full


class GpuProfile:
    """Everything nvidia-smi and the host's /dev, /proc need for one simulated box."""

    __slots__ = ("caps_imex_major", "caps_major", "capture_dir", "cpu_affinity", "cuda_version", "driver_version",
                 "gpus", "ident_dir", "load", "max_mem_mhz", "max_sm_mhz", "name", "p2p_default", "pcie_max_gen",
                 "pcie_width", "power_limit_w", "power_min_w", "uvm_major")

    def __init__(self, *, name: str, capture_dir: str, ident_dir: str, driver_version: str, cuda_version: str,
                 power_limit_w: float, power_min_w: float, gpus: tuple[Gpu, ...], load: LoadShape, max_sm_mhz: int,
                 max_mem_mhz: int, pcie_max_gen: int, pcie_width: int, uvm_major: int, caps_major: int,
                 caps_imex_major: int, cpu_affinity: str, p2p_default: dict[str, str] | None = None) -> None:
        self.name = name
        self.capture_dir = capture_dir  # folder under captures/ holding topo-*.txt
        self.ident_dir = ident_dir  # folder holding q.txt (identity and idle values)
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.power_limit_w = power_limit_w
        self.power_min_w = power_min_w
        self.gpus = gpus
        self.load = load
        self.max_sm_mhz = max_sm_mhz
        self.max_mem_mhz = max_mem_mhz
        self.pcie_max_gen = pcie_max_gen
        self.pcie_width = pcie_width
        self.uvm_major = uvm_major
        self.caps_major = caps_major
        self.caps_imex_major = caps_imex_major
        self.cpu_affinity = cpu_affinity
        self.p2p_default = {} if p2p_default is None else p2p_default  # p2p kind -> status when no capture

    @property
    def captures(self) -> str:
        return os.path.join(CAPTURES_DIR, self.capture_dir)

    def capture(self, name: str) -> str | None:
        """The captured file `name` for this profile (own folder first, then the identity folder)."""
        for folder in (self.capture_dir, self.ident_dir):
            path = os.path.join(CAPTURES_DIR, folder, name)
            if os.path.exists(path):
                return path
        return None


_BUS_CHARS = frozenset("0123456789ABCDEFabcdef:.")


def _gpu_heading(line: str) -> str | None:
    """The bus id of a `GPU 00000000:1B:00.0` line of `nvidia-smi -q`, else None."""
    bus = line[4:]
    return bus if line.startswith("GPU ") and bus and all(c in _BUS_CHARS for c in bus) else None


def _parse_q(text: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Parse `nvidia-smi -q` into a header dict and one flat 'Section/Key' dict per GPU."""
    header: dict[str, str] = {}
    gpus: list[dict[str, str]] = []
    stack: list[tuple[int, str]] = []
    cur: dict[str, str] | None = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        bus = _gpu_heading(line)
        if bus is not None:
            cur = {"Bus": bus}
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
    """The first number in `text` (what the regex -?\\d+(?:\\.\\d+)? finds), else 0.0."""
    n = len(text)
    for start in range(n):
        end = start + (text[start] == "-")
        if end < n and text[end].isdecimal():
            break
    else:
        return 0.0
    while end < n and text[end].isdecimal():
        end += 1
    if end + 1 < n and text[end] == "." and text[end + 1].isdecimal():
        end += 2
        while end < n and text[end].isdecimal():
            end += 1
    return float(text[start:end])


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


def _read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def _build(
    name: str, capture_dir: str, ident_dir: str, load: LoadShape, uvm_major: int, caps_major: int,
    caps_imex_major: int, cpu_affinity: str, p2p_default: dict[str, str],
) -> GpuProfile:
    q_file = os.path.join(CAPTURES_DIR, ident_dir, "q.txt")
    # parsed once per machine (simulator.derived): every replayed nvidia-smi needs it
    header, blocks = derived.cached(q_file, lambda: _parse_q(_read_text(q_file)))
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


_PROFILES: dict[str, GpuProfile] = {}


def get_profile(name: str) -> GpuProfile:
    """Profile by name (built once per process); raises KeyError with the known names."""
    profile = _PROFILES.get(name)
    if profile is None:
        profile = _PROFILES[name] = _build_profile(name)
    return profile


def _build_profile(name: str) -> GpuProfile:
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
