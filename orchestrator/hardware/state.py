"""The typed hardware state per GPU, judged from the host's sensors (pure: the texts come from the facts,
orchestrator/facts/host.py).

Each fault carries the catalog's action, so doctor and status print the same fix, and the later cordon/remedy loop
acts on `HardwareState.action` and advances `cursor` once the remedy has worked.
Why links are judged only under load: idle RTX PRO 6000 links renegotiate all the time (32 -> 5 -> 2.5 GT/s,
local-inference-lab/rtx6kpro#88), so an idle downshift is never a fault; a link below its capability while the GPU is
busy is one (a stuck Gen2 throttles every all-reduce of TP8).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.hardware.catalog import (
    ACTION_FIX,
    RECOVERY_BY_CODE,
    RECOVERY_SOURCE,
    Action,
    XidCatalog,
    load_catalog,
    recovery_action,
)
from orchestrator.hardware.kernel_log import XidEvent, parse_kernel_log, recovery_change
from orchestrator.hardware.smi_health import GpuLink, SmiHealth, norm_bus, parse_link_query, parse_smi_health
from orchestrator.parsers.hostfacts import LspciReport, PciDevice

Severity = Literal["warn", "fail"]
#: A GPU at or above this utilization is "under load": its link must run at its capability.
LOAD_UTIL_PCT = 50
NVML_SOURCE = "NVIDIA NVML (nvmlDeviceGetRemappedRows, ECC counters)"


@dataclass(frozen=True)
class HardwareFault:
    """One fault of one GPU: what it is, what to do (`action`), the line that shows it."""

    kind: str  # xid, recovery, lost, ecc, remap-pending, remap-failed, slowdown, link
    action: Action
    meaning: str
    evidence: str
    source: str
    code: int | None = None  # the Xid code
    advice: str = ""  # a fix of its own where no action applies (a slowdown)

    @property
    def severity(self) -> Severity:
        return "fail" if self.action.fatal else "warn"

    def fix(self, host: str, gpu: str) -> str:
        return self.advice or ACTION_FIX[self.action].format(host=host, gpu=gpu)

    def to_dict(self, host: str, gpu: str) -> dict[str, Any]:
        return {"kind": self.kind, "code": self.code, "severity": self.severity, "action": self.action.value,
                "meaning": self.meaning, "evidence": self.evidence, "source": self.source,
                "fix": self.fix(host, gpu)}


@dataclass(frozen=True)
class GpuHealth:
    bus_id: str
    index: int | None
    faults: tuple[HardwareFault, ...]
    link: str | None = None  # "Gen5 x16 of Gen5 x16 at 100 %" / "Gen1 x16 of Gen5 x16, idle (not judged)"

    @property
    def name(self) -> str:
        return f"GPU {self.index} ({self.bus_id})" if self.index is not None else f"GPU {self.bus_id}"

    @property
    def action(self) -> Action:
        return max((f.action for f in self.faults), key=lambda a: a.rank, default=Action.none)

    @property
    def state(self) -> Literal["ok", "warn", "fail"]:
        sev = {f.severity for f in self.faults}
        return "fail" if "fail" in sev else "warn" if sev else "ok"

    def worst(self) -> HardwareFault | None:
        return max(self.faults, key=lambda f: (f.severity == "fail", f.action.rank), default=None)

    def to_dict(self, host: str) -> dict[str, Any]:
        return {"gpu": self.index, "bus_id": self.bus_id, "state": self.state, "action": self.action.value,
                "link": self.link, "faults": [f.to_dict(host, str(self.index if self.index is not None
                                                                   else self.bus_id)) for f in self.faults]}


@dataclass(frozen=True)
class HardwareState:
    """Every GPU the host's sensors name; `unread`: sensors that gave nothing (said, never guessed as healthy)."""

    gpus: tuple[GpuHealth, ...]
    cursor: str | None = None
    unread: tuple[str, ...] = ()

    @property
    def faulty(self) -> tuple[GpuHealth, ...]:
        return tuple(g for g in self.gpus if g.faults)

    @property
    def action(self) -> Action:
        return max((g.action for g in self.gpus), key=lambda a: a.rank, default=Action.none)

    @property
    def fatal(self) -> bool:
        return self.action.fatal

    def to_dict(self, host: str) -> dict[str, Any]:
        return {"action": self.action.value, "fatal": self.fatal, "cursor": self.cursor, "unread": list(self.unread),
                "gpus": [g.to_dict(host) for g in self.gpus]}


def _smi_faults(h: SmiHealth) -> list[HardwareFault]:
    out: list[HardwareFault] = []
    where = f"nvidia-smi -q GPU {h.bus_id}"
    if h.remap_failed:
        out.append(HardwareFault("remap-failed", Action.isolate_gpu, "a row remapping failed: no spare row left, the "
                                 "memory cannot be repaired", f"{where}: Remapped Rows: Remapping Failure Occurred: "
                                 "Yes", f"{NVML_SOURCE}; NVIDIA memory error management (RMA condition)"))
    if h.remap_pending:
        out.append(HardwareFault("remap-pending", Action.none, "a remapped row waits for the next GPU reset; running "
                                 "and new work are not affected", f"{where}: Remapped Rows: Pending: Yes "
                                 f"(uncorrectable rows {h.remapped_uncorrectable})",
                                 f"{NVML_SOURCE}; NVIDIA GPU memory error management (row-remapping pending flag)",
                                 advice="nothing to do now: the row is remapped at the next reboot of the node; the "
                                        "host keeps serving"))
    if h.recovery_action is not None and recovery_action(h.recovery_action) != Action.none:
        out.append(HardwareFault("recovery", recovery_action(h.recovery_action), "the driver's GPU recovery action "
                                 f"is {h.recovery_action}", f"{where}: GPU Recovery Action: {h.recovery_action}",
                                 RECOVERY_SOURCE))
    dram, sram = h.dram_uncorrectable or 0, h.sram_uncorrectable or 0
    if dram or sram:
        out.append(HardwareFault("ecc", Action.reboot_host, "uncorrectable ECC errors since the last GPU reset",
                                 f"{where}: ECC Errors: Volatile: DRAM Uncorrectable: {dram}, SRAM Uncorrectable: "
                                 f"{sram}", NVML_SOURCE))
    for reason in h.slowdowns:
        out.append(HardwareFault("slowdown", Action.none, f"clocks held down by {reason}",
                                 f"{where}: Clocks Event Reasons: {reason}: Active", "nvidia-smi -q (PERFORMANCE)",
                                 advice="check the chassis cooling, the GPU's power cables and the PSU; the GPU "
                                        "runs slower until the cause is gone"))
    return out


def _link(link: GpuLink, pci: PciDevice | None) -> tuple[str, HardwareFault | None]:
    busy = link.util_pct is not None and link.util_pct >= LOAD_UTIL_PCT
    lspci = ""
    if pci is not None and pci.link_sta is not None and pci.link_cap is not None:
        lspci = f"; lspci {pci.bdf}: LnkSta {pci.link_sta}, LnkCap {pci.link_cap}"
    load = f"at {link.util_pct} % load" if link.util_pct is not None else "load unknown"
    text = f"{link.current} of {link.max} {load}"
    if not link.current.below(link.max):
        return text, None
    if not busy:
        return f"{text}, idle (not judged: idle links downshift)", None
    return text, HardwareFault(
        "link", Action.reboot_host, f"PCIe link below its capability under load: {link.current} of {link.max}",
        f"nvidia-smi GPU {link.index} {link.bus_id}: pcie.link gen {link.current.gen} of {link.max.gen}, width "
        f"x{link.current.width} of x{link.max.width} at {link.util_pct} % load{lspci}",
        "local-inference-lab/rtx6kpro#88 (a link stuck at Gen2 under load, no error logged)")


def _xid_fault(ev: XidEvent, cat: XidCatalog, superseded: bool) -> HardwareFault:
    """One Xid line's fault: the catalog's action, or for Xid 154 the driver's verdict in the line (none where
    a later verdict exists: nvidia-smi's current GPU Recovery Action, or a later Xid 154 of the GPU)."""
    rule = cat.rule(ev.code)
    source = rule.source if rule.nvidia in rule.source else f"{rule.source} (NVIDIA: {rule.nvidia})"
    change = recovery_change(ev)
    if change is None:
        return HardwareFault("xid", rule.action, f"Xid {ev.code} {rule.mnemonic}: {rule.meaning}", ev.line, source,
                             code=ev.code)
    code, label = change
    action = Action.none if superseded else RECOVERY_BY_CODE.get(code, Action.reboot_host)
    now = " (superseded by the driver's later verdict)" if superseded else ""
    return HardwareFault("xid", action, f"Xid 154 {rule.mnemonic}: the driver's recovery action is {label}{now}",
                         ev.line, RECOVERY_SOURCE, code=ev.code)


def judge_hardware(*, kernel_log: str | None, smi_q: str | None, smi_q_stderr: str = "", links: str | None,
                   lspci: LspciReport | None = None, catalog: XidCatalog | None = None) -> HardwareState:
    """The hardware state per GPU from the raw texts of one batch (None: that sensor was not read)."""
    cat = catalog or load_catalog()
    faults: dict[str, list[HardwareFault]] = {}
    index: dict[str, int] = {}
    link_text: dict[str, str] = {}
    unread: list[str] = []
    cursor = None
    report = parse_smi_health(smi_q + "\n" + smi_q_stderr) if smi_q is not None else None
    # nvidia-smi's GPU Recovery Action is the driver's verdict now: where it was read, it replaces the Xid 154 lines
    # logged before it (a reset may have cleared what they said).
    smi_verdict = {h.bus_id for h in report.gpus if h.recovery_action is not None} if report is not None else set()
    if kernel_log is None:
        unread.append("kernel log")
    else:
        klog = parse_kernel_log(kernel_log)
        cursor = klog.cursor
        last_154 = {ev.bus_id: ev for ev in klog.events if ev.code == 154}  # the driver's latest verdict per GPU
        for ev in klog.events:
            superseded = ev.bus_id in smi_verdict or (ev.code == 154 and last_154[ev.bus_id] is not ev)
            faults.setdefault(ev.bus_id, []).append(_xid_fault(ev, cat, superseded))
    if report is None:
        unread.append("nvidia-smi -q")
    else:
        for lost in report.lost:
            rule = cat.rule(79)
            faults.setdefault(lost.bus_id, []).append(HardwareFault(
                "lost", rule.action, "the GPU is lost (fell off the bus): nvidia-smi cannot reach it", lost.line,
                f"nvidia-smi; {rule.source}"))
        for h in report.gpus:
            faults.setdefault(h.bus_id, []).extend(_smi_faults(h))
    pci_by_bus = {norm_bus(d.bdf): d for d in lspci.gpus} if lspci is not None else {}
    if links is None:
        unread.append("PCIe links")
    else:
        for link in parse_link_query(links):
            index[link.bus_id] = link.index
            text, fault = _link(link, pci_by_bus.get(link.bus_id))
            link_text[link.bus_id] = text
            faults.setdefault(link.bus_id, [])
            if fault is not None:
                faults[link.bus_id].append(fault)
    for bus in pci_by_bus:
        faults.setdefault(bus, [])
    # nvidia-smi numbers GPUs in PCI bus order: a GPU it no longer lists (lost) keeps its number from lspci's order,
    # when the numbers it did print agree with that order.
    order = {bus: n for n, bus in enumerate(sorted(pci_by_bus))}
    if order and all(order.get(bus) == n for bus, n in index.items()):
        index = {**order, **index}
    gpus = tuple(GpuHealth(bus, index.get(bus), tuple(fs), link_text.get(bus))
                 for bus, fs in sorted(faults.items(), key=lambda kv: (index.get(kv[0], 99), kv[0])))
    return HardwareState(gpus, cursor, tuple(unread))
