"""`deploy doctor`: host prerequisites as findings, each with what was observed and the exact fix.

Why: the hard part of GPUs in an LXC is the host, not the container: the driver must be loaded, `/dev/nvidia-uvm`
must exist before `pct start`, NCCL P2P needs HMM disabled in nvidia_uvm, IOMMU off/passthrough and ACS redirect
off, and `devN` needs PVE >= 8.1. A fact that could not be read (None) gives no finding rather than a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from orchestrator.parsers.devices import DeviceNode, nvidia_char_devices
from orchestrator.parsers.hostfacts import (
    IommuMode,
    KernelCmdline,
    LspciReport,
    PveVersion,
)
from orchestrator.render.boot_unit import UNIT_NAME, UNIT_PATH, BootUnitState, render_boot_unit

__all__ = [
    "ACS_FIX_TAIL",
    "BOOT_UNIT_FIX",
    "HMM_FIX",
    "IOMMU_FIX",
    "UVM_FIX",
    "Finding",
    "HostFacts",
    "doctor_findings",
    "host_facts_from_values",
    "worst_status",
]

FindingStatus = Literal["ok", "warn", "fail"]

UVM_FIX = (
    "now: `nvidia-modprobe -u -c0` on the host (docs/troubleshooting.md lists the other on-demand nodes); for every "
    "boot: `deploy up` installs deploy-nvidia-nodes.service, which runs nvidia-modprobe before pve-guests.service "
    "(nvidia-persistenced does not load nvidia-uvm)"
)
BOOT_UNIT_FIX = (
    f"`deploy up` writes and enables {UNIT_PATH} (nvidia-modprobe before pve-guests.service; docs/up.md, "
    "'After a host reboot')"
)
HMM_FIX = (
    "`echo 'options nvidia_uvm uvm_disable_hmm=1' > /etc/modprobe.d/nvidia-uvm.conf` + "
    "`update-initramfs -u` + reboot"
)
IOMMU_FIX = (
    "add `amd_iommu=off iommu=off` (AMD; `intel_iommu=off` on Intel) or `iommu=pt` to the kernel cmdline "
    "(/etc/kernel/cmdline + `proxmox-boot-tool refresh`, or GRUB_CMDLINE_LINUX_DEFAULT + `update-grub`), "
    "then reboot"
)
ACS_FIX_TAIL = "or disable ACS in the BIOS, or add `pci=noacs` to the kernel cmdline"
DRIVER_FIX = (
    "install the NVIDIA driver on the host (open kernel modules; DKMS needs `proxmox-headers-$(uname -r)`) "
    "and load it (`modprobe nvidia`)"
)


@dataclass(frozen=True)
class Finding:
    check: str
    status: FindingStatus
    observed: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"check": self.check, "status": self.status, "observed": self.observed, "fix": self.fix}


@dataclass(frozen=True)
class HostFacts:
    """What the host batch read. None everywhere means "not read / unreadable", not "bad"."""

    driver_version: str | None = None  # None: /proc/driver/nvidia/version absent = module not loaded
    uvm_node_present: bool | None = None
    uvm_disable_hmm: bool | None = None  # /sys/module/nvidia_uvm/parameters/uvm_disable_hmm
    uvm_disable_hmm_configured: bool | None = None  # modprobe.d
    iommu: IommuMode | None = None
    pci_noacs: bool = False
    acs_redirect_bridges: tuple[str, ...] | None = None  # BDFs with ReqRedir+/CmpltRedir+; None = unknown
    pve_version: PveVersion | None = None
    gpu_count_pci: int | None = None
    gpu_count_driver: int | None = None
    boot_unit: BootUnitState | None = None  # None: not read
    boot_unit_wanted: str | None = None  # what `up` would write for the host's nodes now


def _driver(f: HostFacts) -> Finding:
    if f.driver_version:
        return Finding("nvidia-driver", "ok", f"kernel module {f.driver_version} loaded")
    return Finding("nvidia-driver", "fail", "NVIDIA kernel module not loaded (/proc/driver/nvidia/version "
                   "missing)", DRIVER_FIX)


def _gpus(f: HostFacts) -> Finding | None:
    if f.gpu_count_pci is None and f.gpu_count_driver is None:
        return None
    if f.gpu_count_pci == 0:
        return Finding("gpus", "fail", "no NVIDIA GPU on the PCIe bus (lspci)",
                       "check the cards are seated and powered and enabled in the BIOS")
    if f.gpu_count_pci is not None and f.gpu_count_driver is not None and f.gpu_count_driver < f.gpu_count_pci:
        return Finding(
            "gpus", "fail",
            f"{f.gpu_count_pci} NVIDIA GPUs on the PCIe bus but only {f.gpu_count_driver} visible to nvidia-smi",
            "check `dmesg | grep -i NVRM` for GPUs the driver failed to initialise (fallen off the bus, power); "
            "a GPU bound to vfio-pci for a VM is not visible to the host driver",
        )
    count = f.gpu_count_driver if f.gpu_count_driver is not None else f.gpu_count_pci
    return Finding("gpus", "ok", f"{count} NVIDIA GPUs")


def _uvm(f: HostFacts) -> Finding | None:
    if f.uvm_node_present is None:
        return None
    if f.uvm_node_present:
        return Finding("nvidia-uvm-node", "ok", "/dev/nvidia-uvm exists")
    return Finding("nvidia-uvm-node", "fail",
                   "/dev/nvidia-uvm does not exist: the container would fail to start or lack CUDA", UVM_FIX)


def _boot_unit(f: HostFacts) -> Finding | None:
    """Warn, not fail: the host works now; only its next reboot would leave the container down."""
    unit, wanted = f.boot_unit, f.boot_unit_wanted
    if unit is None or wanted is None:
        return None
    if unit.in_place(wanted):
        return Finding("boot-nodes-unit", "ok", f"{UNIT_NAME} enabled: nvidia-modprobe recreates the container's "
                       "NVIDIA nodes at boot, before pve-guests.service starts the containers")
    if unit.text is None:
        observed = (f"no {UNIT_NAME}: after a reboot PVE will refuse to start the container (`Device "
                    "/dev/nvidia0 does not exist`) until someone runs nvidia-modprobe")
    elif not unit.enabled:
        observed = f"{UNIT_NAME} is not enabled: a reboot will not run it"
    else:
        observed = f"{UNIT_NAME} does not create the nodes the host has now (the driver's node set changed)"
    return Finding("boot-nodes-unit", "warn", observed, BOOT_UNIT_FIX)


def _hmm(f: HostFacts) -> Finding | None:
    live, conf = f.uvm_disable_hmm, f.uvm_disable_hmm_configured
    if live is True:
        return Finding("uvm-disable-hmm", "ok", "nvidia_uvm uvm_disable_hmm=Y")
    if live is False and conf is True:
        return Finding("uvm-disable-hmm", "warn",
                       "uvm_disable_hmm=1 is configured in modprobe.d but not active (nvidia_uvm loaded before)",
                       "`update-initramfs -u` + reboot (or reload nvidia_uvm while no GPU process runs)")
    if live is False:
        return Finding("uvm-disable-hmm", "fail",
                       "nvidia_uvm runs with HMM enabled (uvm_disable_hmm=N): NCCL P2P can lock up", HMM_FIX)
    if conf is True:
        return Finding("uvm-disable-hmm", "ok", "uvm_disable_hmm=1 configured (runtime value not readable)")
    if conf is False:
        return Finding("uvm-disable-hmm", "fail", "modprobe.d sets uvm_disable_hmm=0", HMM_FIX)
    return Finding("uvm-disable-hmm", "warn", "uvm_disable_hmm not set in modprobe.d (runtime value unknown)",
                   HMM_FIX)


def _iommu(f: HostFacts) -> Finding | None:
    if f.iommu is None:
        return None
    if f.iommu == "off":
        return Finding("iommu", "ok", "IOMMU off on the kernel cmdline")
    if f.iommu == "pt":
        return Finding("iommu", "ok", "IOMMU in passthrough mode (iommu=pt)")
    if f.iommu == "on":
        return Finding("iommu", "fail",
                       "IOMMU on in translated mode: P2P goes through the root complex, NCCL can hang at 8 GPUs",
                       IOMMU_FIX)
    return Finding("iommu", "warn",
                   "kernel cmdline does not set the IOMMU mode: the kernel/BIOS default applies (usually "
                   "translated)", IOMMU_FIX)


def _acs(f: HostFacts) -> Finding | None:
    if f.acs_redirect_bridges is None:
        return None
    if not f.acs_redirect_bridges:
        note = " (pci=noacs)" if f.pci_noacs else ""
        return Finding("acs-redirect", "ok", f"no PCIe bridge has ACS ReqRedir+/CmpltRedir+{note}")
    cmds = "; ".join(f"setpci -s {bdf} ECAP_ACS+0x6.w=0000" for bdf in f.acs_redirect_bridges)
    return Finding(
        "acs-redirect", "fail",
        f"ACS request/completion redirect enabled on {len(f.acs_redirect_bridges)} bridge(s): "
        f"{', '.join(f.acs_redirect_bridges)}",
        f"`{cmds}` (at every boot, e.g. a oneshot unit before pve-guests.service) {ACS_FIX_TAIL}",
    )


def _pve(f: HostFacts) -> Finding | None:
    v = f.pve_version
    if v is None:
        return None
    if v.supports_devn():
        return Finding("pve-version", "ok", f"Proxmox VE {v}: devN device passthrough available")
    return Finding("pve-version", "warn",
                   f"Proxmox VE {v} is older than 8.1: no devN passthrough, the raw lxc.cgroup2/lxc.mount.entry "
                   "path is used (dynamic nvidia-uvm major pinned at deploy time)",
                   "upgrade to Proxmox VE >= 8.1 to use devN passthrough")


def doctor_findings(facts: HostFacts) -> list[Finding]:
    """Findings in a fixed order (driver first: without it the rest says little)."""
    checks = (_driver, _gpus, _uvm, _boot_unit, _hmm, _iommu, _acs, _pve)
    return [found for check in checks if (found := check(facts)) is not None]


def worst_status(findings: list[Finding]) -> FindingStatus:
    """fail > warn > ok: the doctor's exit status."""
    statuses = {x.status for x in findings}
    return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "ok"


def host_facts_from_values(
    *,
    driver_version: str | None = None,
    dev_nodes: list[DeviceNode] | None = None,
    uvm_disable_hmm: bool | None = None,
    uvm_disable_hmm_configured: bool | None = None,
    cmdline: KernelCmdline | None = None,
    lspci: LspciReport | None = None,
    pve_version: PveVersion | None = None,
    gpu_count_driver: int | None = None,
    boot_unit: BootUnitState | None = None,
) -> HostFacts:
    """Build HostFacts from the facts' parsed values (None: not read, or the fact says nothing).

    ACS: when lspci's bus ranges place the GPUs, only redirect bridges above a GPU are reported (others cannot
    affect P2P); otherwise every redirect bridge.
    """
    uvm_present: bool | None = None
    wanted_unit: str | None = None
    if dev_nodes is not None:
        uvm_present = any(n.path == "/dev/nvidia-uvm" and n.kind == "c" for n in dev_nodes)
        wanted_unit = render_boot_unit(nvidia_char_devices(dev_nodes))
    bridges: tuple[str, ...] | None = None
    pci_gpus: int | None = None
    if lspci is not None:
        pci_gpus = len(lspci.gpus)
        placed = lspci.gpus and all(lspci.upstream_bridges(g.bdf) for g in lspci.gpus)
        chosen = lspci.gpu_path_redirect_bridges() if placed else lspci.redirect_bridges
        bridges = tuple(a.bdf for a in chosen)
    return HostFacts(
        driver_version=driver_version,
        uvm_node_present=uvm_present,
        uvm_disable_hmm=uvm_disable_hmm,
        uvm_disable_hmm_configured=uvm_disable_hmm_configured,
        iommu=cmdline.iommu if cmdline else None,
        pci_noacs=cmdline.pci_noacs if cmdline else False,
        acs_redirect_bridges=bridges,
        pve_version=pve_version,
        gpu_count_pci=pci_gpus,
        gpu_count_driver=gpu_count_driver,
        boot_unit=boot_unit,
        boot_unit_wanted=wanted_unit,
    )
