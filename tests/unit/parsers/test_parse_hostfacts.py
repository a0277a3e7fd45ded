"""Kernel cmdline, lspci -vvv (GPUs, ACS), nvidia_uvm HMM, PVE version."""

from __future__ import annotations

import pytest

from orchestrator.parsers import ParseError
from orchestrator.parsers.hostfacts import (
    PveVersion,
    parse_kernel_cmdline,
    parse_lspci,
    parse_modprobe_uvm_hmm,
    parse_module_param_bool,
    parse_pve_version_json,
    parse_pveversion,
)
from tests.shared import fixture

ASUS = "host/rtx-pro-6000-x8-asus"


def test_real_cmdline_iommu_off() -> None:
    kc = parse_kernel_cmdline(fixture(f"{ASUS}/proc-cmdline.txt"))
    assert kc.iommu == "off"
    assert kc.evidence == ("amd_iommu=off", "iommu=off")
    assert not kc.pci_noacs


@pytest.mark.parametrize(
    ("cmdline", "mode", "noacs"),
    [
        ("BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet", "default", False),
        ("root=ZFS=rpool/ROOT/pve-1 boot=zfs iommu=pt", "pt", False),
        ("root=x intel_iommu=on iommu=pt", "pt", False),
        ("root=x intel_iommu=on", "on", False),
        ("root=x amd_iommu=on", "on", False),
        ("root=x iommu.passthrough=0", "on", False),
        ("root=x iommu.passthrough=1 pci=noacs", "pt", True),
        ("root=x intel_iommu=on iommu=off pci=realloc,noacs", "off", True),
        ("root=x pcie_acs_override=downstream", "default", False),
    ],
)
def test_cmdline_variants(cmdline: str, mode: str, noacs: bool) -> None:
    kc = parse_kernel_cmdline(cmdline + "\n")
    assert (kc.iommu, kc.pci_noacs) == (mode, noacs)


def test_real_lspci_gpus_and_acs_all_clear() -> None:
    report = parse_lspci(fixture(f"{ASUS}/lspci-vvv.txt"))
    assert [g.bdf for g in report.gpus] == [
        "0000:06:00.0", "0000:07:00.0", "0000:75:00.0", "0000:76:00.0",
        "0000:84:00.0", "0000:85:00.0", "0000:f4:00.0", "0000:f5:00.0",
    ]
    assert report.gpus[0].class_name == "3D controller"
    assert report.gpus[0].numa_node == 0
    assert len(report.acs) == 40
    # Every ACSCap line says ReqRedir+ (the capability); every ACSCtl line has it off: no redirect.
    assert report.redirect_bridges == ()
    assert not any(a.flags["ReqRedir"] or a.flags["CmpltRedir"] for a in report.acs)
    assert sum(a.flags["SrcValid"] for a in report.acs) == 38  # two ports have SrcValid- in the capture
    # Bus ranges place GPU 06:00.0 behind the PEX890xx downstream port 02:03.0, its upstream port and the root port.
    assert [b.bdf for b in report.upstream_bridges("06:00.0")] == ["0000:02:03.0", "0000:01:00.0", "0000:00:01.1"]


def test_lspci_redirect_enabled_on_one_bridge() -> None:
    text = fixture(f"{ASUS}/lspci-vvv.txt")
    lines = text.splitlines(keepends=True)
    # Flip ACSCtl of the switch downstream port above GPU 06:00.0 (02:03.0) to the NCCL-hang configuration.
    start = next(i for i, ln in enumerate(lines) if ln.startswith("02:03.0 "))
    j = next(i for i in range(start, len(lines)) if "ACSCtl:" in lines[i])
    lines[j] = lines[j].replace("ReqRedir- CmpltRedir-", "ReqRedir+ CmpltRedir+")
    report = parse_lspci("".join(lines))
    assert [a.bdf for a in report.redirect_bridges] == ["0000:02:03.0"]
    assert [a.bdf for a in report.gpu_path_redirect_bridges()] == ["0000:02:03.0"]


def test_lspci_nn_domain_and_off_path_bridge() -> None:
    text = (
        "0000:00:01.1 PCI bridge [0604]: Advanced Micro Devices, Inc. [AMD] Device [1022:153e]\n"
        "\tBus: primary=00, secondary=01, subordinate=01, sec-latency=0\n"
        "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
        "\n"
        "0000:00:03.1 PCI bridge [0604]: Advanced Micro Devices, Inc. [AMD] Device [1022:153e]\n"
        "\tBus: primary=00, secondary=02, subordinate=02, sec-latency=0\n"
        "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir- CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
        "\n"
        "0000:01:00.0 3D controller [0302]: NVIDIA Corporation GB202GL [RTX PRO 6000] [10de:2bb5] (rev a1)\n"
        "\tNUMA node: 1\n"
        "\n"
        "0000:02:00.0 Non-Volatile memory controller [0108]: Samsung Electronics Co Ltd Device [144d:a80c]\n"
        "\n"
        "0000:03:00.0 VGA compatible controller [0300]: ASPEED Technology, Inc. ASPEED Graphics Family "
        "[1a03:2000] (rev 52)\n"
    )
    report = parse_lspci(text)
    (gpu,) = report.gpus
    assert (gpu.bdf, gpu.vendor_id, gpu.device_id, gpu.numa_node) == ("0000:01:00.0", "10de", "2bb5", 1)
    assert [a.bdf for a in report.redirect_bridges] == ["0000:00:01.1", "0000:00:03.1"]
    assert [a.bdf for a in report.gpu_path_redirect_bridges()] == ["0000:00:01.1"]


def test_lspci_garbage_raises() -> None:
    with pytest.raises(ParseError):
        parse_lspci("bash: lspci: command not found\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("options nvidia_uvm uvm_disable_hmm=1\n", True),
        ("options nvidia-uvm uvm_disable_hmm=Y\n", True),
        ("# options nvidia_uvm uvm_disable_hmm=1\n", None),
        ("options nvidia NVreg_EnableGpuFirmware=0\n", None),
        ("options nvidia_uvm uvm_disable_hmm=1\noptions nvidia_uvm uvm_disable_hmm=0\n", False),
        ("blacklist nouveau\noptions nvidia_uvm \\\n  uvm_perf_prefetch_enable=1 uvm_disable_hmm=1 # p2p\n", True),
        ("", None),
    ],
)
def test_modprobe_hmm(text: str, expected: bool | None) -> None:
    assert parse_modprobe_uvm_hmm(text) is expected


@pytest.mark.parametrize(("text", "expected"), [("Y\n", True), ("N\n", False), ("1", True), ("0\n", False),
                                               ("", None), ("cat: ...: No such file or directory", None)])
def test_module_param_bool(text: str, expected: bool | None) -> None:
    assert parse_module_param_bool(text) is expected


def test_pveversion_forms() -> None:
    v = parse_pveversion("pve-manager/9.1.2/abcdef0123456789 (running kernel: 6.17.2-1-pve)\n")
    assert (v.major, v.minor, v.patch, v.kernel) == (9, 1, 2, "6.17.2-1-pve")
    assert v.supports_devn()
    verbose = "proxmox-ve: 8.0.2 (running kernel: 6.2.16-3-pve)\npve-manager: 8.0.3 (running version: 8.0.3/bbf3993)\n"
    old = parse_pveversion(verbose)
    assert (old.major, old.minor, old.patch, old.kernel) == (8, 0, 3, "6.2.16-3-pve")
    assert not old.supports_devn()
    with pytest.raises(ParseError):
        parse_pveversion("bash: pveversion: command not found\n")


def test_pve_version_json() -> None:
    assert parse_pve_version_json('{"data": {"version": "8.1.4", "release": "8.1", "repoid": "ec5affc9"}}') \
        == PveVersion(8, 1, 4)
    assert parse_pve_version_json({"version": "8.1", "release": "8.1"}).supports_devn()
    assert not parse_pve_version_json('{"version": "7.4.3"}').supports_devn()
    with pytest.raises(ParseError):
        parse_pve_version_json("<html>401</html>")
    with pytest.raises(ParseError):
        parse_pve_version_json('{"data": null}')
