"""Host facts for `deploy doctor`: kernel cmdline (IOMMU, ACS), lspci (GPUs, ACS redirect), nvidia_uvm HMM,
Proxmox VE version.

Why these: PCIe P2P between the GPUs needs IOMMU off or passthrough and ACS request/completion redirect off on
every bridge between them, else traffic detours through the root complex (slow) or NCCL hangs. RTX PRO 6000
multi-GPU rigs also need `uvm_disable_hmm=1`. `devN` passthrough needs PVE >= 8.1.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.parsers import ParseError, strip_ansi

__all__ = [
    "AcsControl",
    "IommuMode",
    "KernelCmdline",
    "LspciReport",
    "PciDevice",
    "PveVersion",
    "parse_kernel_cmdline",
    "parse_lspci",
    "parse_modprobe_uvm_hmm",
    "parse_module_param_bool",
    "parse_pve_version_json",
    "parse_pveversion",
]

IommuMode = Literal["off", "pt", "on", "default"]


# --------------------------------------------------------------------------------------------------------------
# /proc/cmdline


@dataclass(frozen=True)
class KernelCmdline:
    """IOMMU mode as the cmdline sets it. `default` means the cmdline does not say: the kernel's built-in
    default (and the BIOS) decide, which on most PVE hosts is a translating IOMMU."""

    iommu: IommuMode
    pci_noacs: bool
    evidence: tuple[str, ...]
    params: tuple[str, ...] = field(default=(), repr=False)


def parse_kernel_cmdline(text: str) -> KernelCmdline:
    """Parse `/proc/cmdline`. Precedence: any `off` wins, then passthrough, then translated (`on`)."""
    params = tuple(strip_ansi(text).split())
    off = on = pt = False
    evidence: list[str] = []
    noacs = False
    for p in params:
        key, _, value = p.partition("=")
        values = {v.strip().lower() for v in value.split(",")}
        if key in ("iommu", "amd_iommu", "intel_iommu"):
            if "off" in values:
                off = True
            elif "pt" in values:
                pt = True
            elif values & {"on", "force", "nopt", "1"}:
                on = True
            else:
                continue
            evidence.append(p)
        elif key == "iommu.passthrough":
            if value in ("1", "y", "Y", "on"):
                pt = True
            else:
                on = True
            evidence.append(p)
        elif key == "pci" and "noacs" in values:
            noacs = True
            evidence.append(p)
    mode: IommuMode = "off" if off else "pt" if pt else "on" if on else "default"
    return KernelCmdline(iommu=mode, pci_noacs=noacs, evidence=tuple(evidence), params=params)


# --------------------------------------------------------------------------------------------------------------
# lspci -vvv

_DEV_HEAD_RE = re.compile(
    r"^(?P<bdf>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<cls>[^:\[]+?)"
    r"(?:\s*\[(?P<clsid>[0-9a-fA-F]{4})\])?:\s*(?P<desc>.*)$"
)
_VENDOR_DEV_RE = re.compile(r"\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]")
_BUS_RE = re.compile(r"Bus:\s*primary=([0-9a-fA-F]+),\s*secondary=([0-9a-fA-F]+),\s*subordinate=([0-9a-fA-F]+)")
_NUMA_RE = re.compile(r"NUMA node:\s*(\d+)")
_FLAG_RE = re.compile(r"(\w+)([+-])")
_GPU_CLASSES = {"3D controller": "0302", "VGA compatible controller": "0300"}


#: PCIe transfer rate (GT/s, as lspci prints it) -> link generation.
GTS_GEN = {"2.5": 1, "5": 2, "8": 3, "16": 4, "32": 5, "64": 6}
_LINK_RE = re.compile(r"Speed (?P<speed>[\d.]+)GT/s(?P<down> \(downgraded\))?, Width x(?P<width>\d+)")


@dataclass(frozen=True)
class PcieLink:
    """A PCIe link's generation and width (lspci `LnkCap:` = capability, `LnkSta:` = now; nvidia-smi's link)."""

    gen: int
    width: int

    def __str__(self) -> str:
        return f"Gen{self.gen} x{self.width}"

    def below(self, cap: PcieLink) -> bool:
        return self.gen < cap.gen or self.width < cap.width


def parse_lspci_link(text: str) -> PcieLink | None:
    """`Port #0, Speed 32GT/s, Width x16, …` or `Speed 2.5GT/s (downgraded), Width x16` -> PcieLink."""
    m = _LINK_RE.search(text)
    if m is None or m.group("speed") not in GTS_GEN:
        return None
    return PcieLink(GTS_GEN[m.group("speed")], int(m.group("width")))


@dataclass(frozen=True)
class PciDevice:
    """One device block of `lspci -vvv`. `bdf` always carries the PCI domain (`0000:06:00.0`)."""

    bdf: str
    class_name: str
    description: str
    vendor_id: str | None = None
    device_id: str | None = None
    numa_node: int | None = None
    secondary_bus: int | None = None
    subordinate_bus: int | None = None
    link_cap: PcieLink | None = None  # `LnkCap:`
    link_sta: PcieLink | None = None  # `LnkSta:`

    @property
    def domain(self) -> str:
        return self.bdf.split(":")[0]

    @property
    def bus(self) -> int:
        return int(self.bdf.split(":")[1], 16)

    @property
    def is_nvidia_gpu(self) -> bool:
        is_gpu_class = self.class_name in _GPU_CLASSES
        nvidia = self.vendor_id == "10de" or self.description.startswith("NVIDIA")
        return is_gpu_class and nvidia

    def bridges_bus(self, domain: str, bus: int) -> bool:
        """True when `bus` in `domain` lies behind this bridge (its secondary..subordinate range)."""
        return (
            self.secondary_bus is not None
            and self.subordinate_bus is not None
            and self.domain == domain
            and self.secondary_bus <= bus <= self.subordinate_bus
        )


@dataclass(frozen=True)
class AcsControl:
    """The `ACSCtl:` flags of one port (what is enabled, not `ACSCap:`, which is what could be)."""

    device: PciDevice
    flags: dict[str, bool] = field(hash=False)

    @property
    def bdf(self) -> str:
        return self.device.bdf

    @property
    def redirect(self) -> bool:
        """Request or completion redirect on: P2P requests go up to the root complex instead of across."""
        return self.flags.get("ReqRedir", False) or self.flags.get("CmpltRedir", False)


@dataclass(frozen=True)
class LspciReport:
    devices: tuple[PciDevice, ...]
    acs: tuple[AcsControl, ...]

    @property
    def gpus(self) -> tuple[PciDevice, ...]:
        return tuple(d for d in self.devices if d.is_nvidia_gpu)

    @property
    def redirect_bridges(self) -> tuple[AcsControl, ...]:
        """Every port with ReqRedir+ or CmpltRedir+, on a GPU path or not."""
        return tuple(a for a in self.acs if a.redirect)

    def upstream_bridges(self, bdf: str) -> tuple[PciDevice, ...]:
        """Bridges above a device, nearest first, from the `Bus: secondary=, subordinate=` ranges of -vvv."""
        dev = next((d for d in self.devices if d.bdf == _full_bdf(bdf)), None)
        if dev is None:
            raise KeyError(f"{bdf} is not in the lspci output")
        chain = [b for b in self.devices if b.bridges_bus(dev.domain, dev.bus)]
        return tuple(sorted(chain, key=lambda b: (b.subordinate_bus or 0) - (b.secondary_bus or 0)))

    def gpu_path_redirect_bridges(self) -> tuple[AcsControl, ...]:
        """Redirect-enabled ports that sit above at least one NVIDIA GPU: the ones that hurt P2P."""
        above: set[str] = set()
        for gpu in self.gpus:
            above.update(b.bdf for b in self.upstream_bridges(gpu.bdf))
        return tuple(a for a in self.redirect_bridges if a.bdf in above)


def _full_bdf(bdf: str) -> str:
    return bdf.lower() if bdf.count(":") == 2 else f"0000:{bdf.lower()}"


def parse_lspci(text: str) -> LspciReport:
    """Parse `lspci -vvv` (optionally with `-nn` and/or `-D`): device classes, bus ranges, ACSCtl flags and the
    PCIe link (LnkCap/LnkSta)."""
    devices: list[PciDevice] = []
    acs: list[AcsControl] = []
    blocks: list[list[str]] = []
    for line in strip_ansi(text).replace("\r", "").splitlines():
        if _DEV_HEAD_RE.match(line) and not line[:1].isspace():
            blocks.append([line])
        elif blocks and line.strip():
            blocks[-1].append(line)
    if not blocks:
        raise ParseError("not lspci output (no device lines)", text)
    for block in blocks:
        head = _DEV_HEAD_RE.match(block[0])
        assert head is not None
        desc = head.group("desc").strip()
        vd = _VENDOR_DEV_RE.search(desc)
        body = "\n".join(block[1:])
        bus = _BUS_RE.search(body)
        numa = _NUMA_RE.search(body)
        links = {k: parse_lspci_link(rest) for k, _, rest in (ln.strip().partition(":") for ln in block[1:])
                 if k in ("LnkCap", "LnkSta")}
        dev = PciDevice(
            bdf=_full_bdf(head.group("bdf")),
            class_name=head.group("cls").strip(),
            description=desc,
            vendor_id=vd.group("vendor").lower() if vd else None,
            device_id=vd.group("device").lower() if vd else None,
            numa_node=int(numa.group(1)) if numa else None,
            secondary_bus=int(bus.group(2), 16) if bus else None,
            subordinate_bus=int(bus.group(3), 16) if bus else None,
            link_cap=links.get("LnkCap"),
            link_sta=links.get("LnkSta"),
        )
        devices.append(dev)
        for line in block[1:]:
            key, sep, rest = line.strip().partition(":")
            if sep and key == "ACSCtl":
                flags = {name: sign == "+" for name, sign in _FLAG_RE.findall(rest)}
                acs.append(AcsControl(device=dev, flags=flags))
    return LspciReport(devices=tuple(devices), acs=tuple(acs))


# --------------------------------------------------------------------------------------------------------------
# nvidia_uvm HMM


def _truthy(value: str) -> bool | None:
    v = value.strip().lower()
    if v in ("1", "y", "yes", "true", "on"):
        return True
    if v in ("0", "n", "no", "false", "off"):
        return False
    return None


def parse_modprobe_uvm_hmm(text: str) -> bool | None:
    """Whether modprobe.d text (one or more files concatenated) sets `options nvidia_uvm uvm_disable_hmm=1`.

    True/False when the option is set to a truthy/falsy value (the last setting wins, as in modprobe), None
    when it is not mentioned. `nvidia-uvm` and `nvidia_uvm` are the same module to modprobe.
    """
    result: bool | None = None
    joined = re.sub(r"\\\n", " ", text.replace("\r", ""))
    for line in joined.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) < 3 or words[0] != "options" or words[1].replace("-", "_") != "nvidia_uvm":
            continue
        for opt in words[2:]:
            key, sep, value = opt.partition("=")
            if sep and key == "uvm_disable_hmm":
                parsed = _truthy(value)
                if parsed is not None:
                    result = parsed
    return result


def parse_module_param_bool(text: str) -> bool | None:
    """`/sys/module/*/parameters/*` for a bool or int parameter: `Y`/`N`/`1`/`0` → bool; anything else None."""
    return _truthy(text) if text.strip() else None


# --------------------------------------------------------------------------------------------------------------
# Proxmox VE version

_PVEVERSION_RE = re.compile(r"pve-manager[/:]\s*(\d+)\.(\d+)(?:\.(\d+))?")
_KERNEL_RE = re.compile(r"running kernel:\s*([^)\s]+)")
_VERSION_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True, order=True)
class PveVersion:
    major: int
    minor: int
    patch: int = 0
    kernel: str | None = field(default=None, compare=False)

    def supports_devn(self) -> bool:
        """`devN` device passthrough arrived with pve-container 5.0.7 = PVE 8.1."""
        return (self.major, self.minor) >= (8, 1)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def parse_pveversion(text: str) -> PveVersion:
    """`pveversion` (`pve-manager/9.1.2/abcdef (running kernel: 6.17.2-1-pve)`) or `pveversion -v`."""
    m = _PVEVERSION_RE.search(text)
    if not m:
        raise ParseError("not pveversion output (no pve-manager version)", text)
    k = _KERNEL_RE.search(text)
    return PveVersion(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), k.group(1) if k else None)


def parse_pve_version_json(data: str | Mapping[str, object]) -> PveVersion:
    """`GET /version` as JSON text or a decoded dict (`{"version": "9.1.2", "release": "9.1", ...}`), with or
    without the API's `{"data": ...}` envelope."""
    try:
        obj = json.loads(data) if isinstance(data, str) else data
    except json.JSONDecodeError:
        raise ParseError("PVE /version response is not JSON", str(data)) from None
    if isinstance(obj, Mapping) and isinstance(obj.get("data"), Mapping):
        obj = obj["data"]
    version = obj.get("version") if isinstance(obj, Mapping) else None
    m = _VERSION_RE.match(version) if isinstance(version, str) else None
    if not m:
        raise ParseError("PVE /version response has no version", str(data))
    return PveVersion(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
