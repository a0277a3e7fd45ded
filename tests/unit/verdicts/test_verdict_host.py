"""doctor findings from typed host facts, and HostFacts built from real captured texts."""

from __future__ import annotations

import pytest

from orchestrator.facts import HOST
from orchestrator.parsers.hostfacts import PveVersion
from orchestrator.remote.batch import CommandOutput
from orchestrator.verdicts.host import (
    HMM_FIX,
    UVM_FIX,
    Finding,
    HostFacts,
    doctor_findings,
    worst_status,
)
from tests.shared import doctor_host_facts, fixture

ASUS = "host/rtx-pro-6000-x8-asus"


GOOD = HostFacts(
    driver_version="595.58.03",
    uvm_node_present=True,
    uvm_disable_hmm=True,
    uvm_disable_hmm_configured=True,
    iommu="off",
    acs_redirect_bridges=(),
    pve_version=PveVersion(9, 1, 2),
    gpu_count_pci=8,
    gpu_count_driver=8,
)


def by_check(findings: list[Finding]) -> dict[str, Finding]:
    return {f.check: f for f in findings}


def test_healthy_host_all_ok() -> None:
    findings = doctor_findings(GOOD)
    assert [f.check for f in findings] == [
        "nvidia-driver", "gpus", "nvidia-uvm-node", "uvm-disable-hmm", "iommu", "acs-redirect", "pve-version",
    ]
    assert all(f.status == "ok" for f in findings)
    assert worst_status(findings) == "ok"


def replace(**kw: object) -> HostFacts:
    from dataclasses import replace as dc_replace

    return dc_replace(GOOD, **kw)  # type: ignore[arg-type]


def test_driver_not_loaded_fails() -> None:
    f = by_check(doctor_findings(replace(driver_version=None)))["nvidia-driver"]
    assert f.status == "fail" and "modprobe nvidia" in f.fix


def test_missing_uvm_node() -> None:
    f = by_check(doctor_findings(replace(uvm_node_present=False)))["nvidia-uvm-node"]
    assert f.status == "fail"
    assert f.fix == UVM_FIX
    assert "nvidia-modprobe -u -c0" in f.fix and "deploy up" in f.fix
    assert "pve-guests.service" in f.fix


@pytest.mark.parametrize(
    ("live", "conf", "status"),
    [(True, None, "ok"), (False, True, "warn"), (False, None, "fail"), (None, True, "ok"), (None, None, "warn"),
     (None, False, "fail")],
)
def test_hmm(live: bool | None, conf: bool | None, status: str) -> None:
    f = by_check(doctor_findings(replace(uvm_disable_hmm=live, uvm_disable_hmm_configured=conf)))["uvm-disable-hmm"]
    assert f.status == status
    if status == "fail":
        assert f.fix == HMM_FIX
        assert "echo 'options nvidia_uvm uvm_disable_hmm=1' > /etc/modprobe.d/nvidia-uvm.conf" in f.fix
        assert "update-initramfs -u" in f.fix and "reboot" in f.fix


@pytest.mark.parametrize(("mode", "status"), [("off", "ok"), ("pt", "ok"), ("on", "fail"), ("default", "warn")])
def test_iommu(mode: str, status: str) -> None:
    f = by_check(doctor_findings(replace(iommu=mode)))["iommu"]
    assert f.status == status
    if status != "ok":
        assert "amd_iommu=off iommu=off" in f.fix and "iommu=pt" in f.fix


def test_acs_redirect_lists_setpci_per_bridge() -> None:
    f = by_check(doctor_findings(replace(acs_redirect_bridges=("0000:02:03.0", "0000:00:01.1"))))["acs-redirect"]
    assert f.status == "fail"
    assert "setpci -s 0000:02:03.0 ECAP_ACS+0x6.w=0000" in f.fix
    assert "setpci -s 0000:00:01.1 ECAP_ACS+0x6.w=0000" in f.fix
    assert "pci=noacs" in f.fix and "BIOS" in f.fix
    assert "0000:02:03.0" in f.observed


def test_old_pve_warns_not_fails() -> None:
    f = by_check(doctor_findings(replace(pve_version=PveVersion(8, 0, 4))))["pve-version"]
    assert f.status == "warn" and "lxc" in f.observed
    assert by_check(doctor_findings(replace(pve_version=PveVersion(8, 1, 0))))["pve-version"].status == "ok"


def test_gpu_count_mismatch() -> None:
    f = by_check(doctor_findings(replace(gpu_count_driver=7)))["gpus"]
    assert f.status == "fail" and "8" in f.observed and "7" in f.observed


def test_unknown_facts_give_no_findings() -> None:
    findings = doctor_findings(HostFacts(driver_version="595.58.03"))
    assert [f.check for f in findings] == ["nvidia-driver", "uvm-disable-hmm"]
    assert worst_status(findings) == "warn"


def test_worst_status() -> None:
    findings = doctor_findings(replace(iommu="default", uvm_node_present=False))
    assert worst_status(findings) == "fail"


def test_facts_from_real_captures() -> None:
    smi = "nvidia-smi/h200x2-nvlink"
    facts = doctor_host_facts({
        HOST.driver_version: fixture(f"{smi}/proc-driver-version.txt"),
        HOST.dev_listing: fixture(f"{smi}/ls-dev-nvidia.txt"),
        HOST.uvm_hmm: "N\n",
        HOST.modprobe: "options nvidia NVreg_PreserveVideoMemoryAllocations=1\n",
        HOST.cmdline: fixture(f"{ASUS}/proc-cmdline.txt"),
        HOST.lspci_acs: fixture(f"{ASUS}/lspci-vvv.txt"),
        HOST.pveversion: "pve-manager/9.1.2/abcdef (running kernel: 6.17.2-1-pve)\n",
        HOST.topo: fixture(f"{smi}/topo-m.txt"),
    })
    assert facts.driver_version == "580.159.04"
    assert facts.uvm_node_present is True
    assert facts.iommu == "off"
    assert facts.acs_redirect_bridges == ()
    assert (facts.gpu_count_pci, facts.gpu_count_driver) == (8, 2)
    checks = by_check(doctor_findings(facts))
    assert checks["uvm-disable-hmm"].status == "fail"
    assert checks["gpus"].status == "fail"  # 8 on the bus (ASUS lspci) but 2 in the (H200) topo -m capture
    assert checks["iommu"].status == "ok" and checks["acs-redirect"].status == "ok"


def test_facts_acs_from_grepped_lspci_without_bus_ranges() -> None:
    # The host batch greps lspci down to device heads and ACSCtl lines: no bus ranges, so all redirect
    # bridges are reported.
    grepped = (
        "00:01.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Device 153e (prog-if 00 [Normal decode])\n"
        "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
        "01:00.0 3D controller: NVIDIA Corporation Device 2bb5 (rev a1)\n"
    )
    facts = doctor_host_facts({
        HOST.lspci_acs: grepped,
        HOST.dev_listing: CommandOutput(2, "", "ls: cannot access '/dev/nvidia*': No such file or directory\n"),
        HOST.driver_version: CommandOutput(1, "", "cat: /proc/driver/nvidia/version: No such file or directory\n"),
    })
    assert facts.acs_redirect_bridges == ("0000:00:01.1",)
    assert facts.uvm_node_present is False
    checks = by_check(doctor_findings(facts))
    assert checks["nvidia-driver"].status == "fail"
    assert checks["acs-redirect"].status == "fail"
    assert checks["nvidia-uvm-node"].status == "fail"


def test_the_driver_gpu_count_comes_from_the_topology_matrix_one_row_per_gpu() -> None:
    """The doctor counts the driver's GPUs from `topo -m` (read anyway for the P2P check): the same count as the
    `-L` list of the same box, and "unknown" or 0 where `-L` gave those."""
    for smi in ("nvidia-smi/h200x2-nvlink", "nvidia-smi/h200x2-device"):  # captures of both, one box each
        topo = doctor_host_facts({HOST.topo: fixture(f"{smi}/topo-m.txt")}).gpu_count_driver
        listed = [line for line in fixture(f"{smi}/list.txt").splitlines() if line.startswith("GPU ")]
        assert topo == len(listed) == 2
    bare = doctor_host_facts({HOST.topo: fixture("nvidia-smi/rtx-pro-6000-x8-bare/topo-m.txt")})
    assert bare.gpu_count_driver == 8
    nvml = "Failed to initialize NVML: Driver/library version mismatch\n"
    assert doctor_host_facts({}).gpu_count_driver is None  # not read
    assert doctor_host_facts({HOST.topo: CommandOutput(18, nvml, "")}).gpu_count_driver is None  # the command failed
    assert doctor_host_facts({HOST.topo: nvml}).gpu_count_driver == 0  # exit 0 with no matrix: none enumerated
