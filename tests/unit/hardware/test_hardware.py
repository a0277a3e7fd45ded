"""The GPU hardware sensors: the Xid catalog, the parsers on real captures, the judged state per GPU."""

from __future__ import annotations

import pytest

from orchestrator.errors import ConfigError
from orchestrator.hardware.catalog import Action, load_catalog, parse_catalog
from orchestrator.hardware.kernel_log import parse_kernel_log
from orchestrator.hardware.smi_health import parse_link_query, parse_smi_health
from orchestrator.hardware.state import judge_hardware
from orchestrator.parsers.hostfacts import PcieLink, parse_lspci
from tests.shared import fixture

H200 = "nvidia-smi/h200-health/"
LINK_HEAD = ("index, pci.bus_id, pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current, "
             "pcie.link.width.max, utilization.gpu [%]\n")


def test_catalog_every_action_has_a_rule_with_its_source() -> None:
    cat = load_catalog()
    assert {r.action for r in cat.rules} == {Action.none, Action.restart_unit, Action.reboot_host,
                                             Action.isolate_gpu}
    assert all(r.source and r.nvidia for r in cat.rules)
    assert cat.rule(79).action is Action.reboot_host and cat.rule(79).nvidia == "RESTART_BM"
    assert cat.rule(13).action is Action.restart_unit
    assert cat.rule(64).action is Action.isolate_gpu
    unknown = cat.rule(999)
    assert unknown.action is Action.restart_unit and not unknown.action.fatal


def test_catalog_refuses_a_duplicate_code() -> None:
    text = "catalog: x\nrules:\n" + "".join(
        "  - {code: 13, mnemonic: M, meaning: m, nvidia: RESTART_APP, action: restart_unit, source: s}\n"
        for _ in range(2))
    with pytest.raises(ConfigError, match="twice"):
        parse_catalog(text)


def test_kernel_log_journald_and_dmesg_formats() -> None:
    journal = parse_kernel_log(fixture("hardware/journal-xid.txt") + "-- cursor: s=abc;i=42\n")
    assert [(e.pci, e.code) for e in journal.events] == [("0000:2b:00", 79)]
    assert journal.events[0].bus_id == "00000000:2B:00.0"
    assert journal.cursor == "s=abc;i=42"
    dmesg = parse_kernel_log(fixture("hardware/dmesg-xid.txt"))
    assert [(e.pci, e.code) for e in dmesg.events] == [("0000:03:00", 79), ("0000:01:00", 3), ("0000:10:1c", 63)]
    assert dmesg.events[2].pid == "1896" and "Row Remapper" in dmesg.events[2].text
    healthy = parse_kernel_log(fixture(H200 + "dmesg-nvrm.txt"))
    assert healthy.events == () and healthy.cursor is None


def test_smi_health_sections_of_a_real_h200() -> None:
    report = parse_smi_health(fixture(H200 + "q-health-sections.txt"))
    (gpu,) = report.gpus
    assert gpu.bus_id == "00000000:00:06.0"
    assert (gpu.dram_uncorrectable, gpu.dram_correctable, gpu.sram_uncorrectable) == (0, 0, 0)
    assert not gpu.remap_pending and not gpu.remap_failed and gpu.remapped_uncorrectable == 0
    assert gpu.slowdowns == ()  # Idle: Active is not a slowdown
    assert report.lost == ()


def test_smi_health_reads_faults_from_the_real_layout() -> None:
    text = (fixture(H200 + "q-health-sections.txt")
            .replace("Pending                                        : No",
                     "Pending                                        : Yes")
            .replace("            HW Thermal Slowdown                        : Not Active",
                     "            HW Thermal Slowdown                        : Active")
            .replace("            DRAM Uncorrectable                         : 0",
                     "            DRAM Uncorrectable                         : 2", 1))
    (gpu,) = parse_smi_health(text).gpus
    assert gpu.remap_pending and gpu.dram_uncorrectable == 2 and gpu.slowdowns == ("HW Thermal Slowdown",)
    assert gpu.get("ECC Mode/Pending") == "Enabled"  # the ECC mode's Pending is not the remapper's


def test_lost_gpu_line() -> None:
    (lost,) = parse_smi_health(fixture("hardware/smi-gpu-lost.txt")).lost
    assert lost.bus_id == "00000000:05:00.0" and "GPU is lost" in lost.line


def test_link_query_real_capture_and_lspci_links() -> None:
    (link,) = parse_link_query(fixture(H200 + "query-health.csv"))
    assert (link.index, link.current, link.max, link.util_pct) == (0, PcieLink(5, 16), PcieLink(5, 16), None)
    report = parse_lspci(fixture("host/rtx-pro-6000-x8-asus/lspci-vvv.txt"))
    gpu = next(g for g in report.gpus if g.bdf == "0000:06:00.0")
    assert gpu.link_cap == PcieLink(5, 16) and gpu.link_sta == PcieLink(1, 16)  # idle: 2.5GT/s (downgraded)


def _state(links: str, **kw: str):
    return judge_hardware(kernel_log=kw.get("klog", ""), smi_q=kw.get("smi", ""), links=LINK_HEAD + links,
                          lspci=parse_lspci(fixture("host/rtx-pro-6000-x8-asus/lspci-vvv.txt")))


def test_idle_downshift_never_alarms_but_a_slow_link_under_load_fails() -> None:
    idle = _state("0, 00000000:06:00.0, 1, 5, 16, 16, 0\n")
    gpu = idle.gpus[0]
    assert gpu.index == 0 and gpu.faults == () and "not judged" in (gpu.link or "")
    assert len(idle.gpus) == 8 and not idle.fatal  # every GPU lspci names is listed
    busy = _state("0, 00000000:06:00.0, 2, 5, 16, 16, 100\n")
    (fault,) = busy.gpus[0].faults
    assert fault.kind == "link" and fault.severity == "fail" and busy.fatal
    assert "Gen2 x16 of Gen5 x16" in fault.meaning and "lspci 0000:06:00.0: LnkSta Gen1 x16" in fault.evidence
    assert _state("0, 00000000:06:00.0, 5, 5, 16, 16, 100\n").gpus[0].faults == ()


def test_xid_lost_gpu_and_failed_remap_take_their_catalog_action() -> None:
    klog = "2026-12-03T06:00:00+0000 pve kernel: NVRM: Xid (PCI:0000:07:00): 13, pid=812, name=python3, " \
           "Graphics Exception\n-- cursor: s=1;i=9\n"
    failed = fixture(H200 + "q-health-sections.txt").replace("00000000:00:06.0", "00000000:75:00.0").replace(
        "Remapping Failure Occurred                     : No", "Remapping Failure Occurred                     : Yes")
    state = judge_hardware(kernel_log=klog, smi_q=failed, smi_q_stderr=fixture("hardware/smi-gpu-lost.txt"),
                           links=LINK_HEAD + "0, 00000000:07:00.0, 1, 5, 16, 16, 0\n")
    by_bus = {g.bus_id: g for g in state.gpus}
    assert by_bus["00000000:07:00.0"].action is Action.restart_unit and by_bus["00000000:07:00.0"].state == "warn"
    lost = by_bus["00000000:05:00.0"]
    assert lost.action is Action.reboot_host and lost.faults[0].kind == "lost"
    assert by_bus["00000000:75:00.0"].action is Action.isolate_gpu
    assert state.action is Action.isolate_gpu and state.fatal and state.cursor == "s=1;i=9"
    d = state.to_dict("sim-1")
    fault = next(g for g in d["gpus"] if g["bus_id"] == "00000000:75:00.0")["faults"][0]
    assert fault["evidence"].endswith("Remapping Failure Occurred: Yes") and "replacing" in fault["fix"]


def test_a_lost_gpu_keeps_its_number_from_the_pci_order() -> None:
    lspci = parse_lspci(fixture("host/rtx-pro-6000-x8-asus/lspci-vvv.txt"))
    rows = "".join(f"{i}, {b}, 5, 5, 16, 16, 0\n" for i, b in enumerate(
        ["00000000:06:00.0", "00000000:07:00.0", "00000000:75:00.0"]))  # 76:00.0 (GPU 3) lost
    state = judge_hardware(kernel_log="", smi_q="", smi_q_stderr=fixture("hardware/smi-gpu-lost.txt").replace(
        "0000:05:00.0", "0000:76:00.0"), links=LINK_HEAD + rows, lspci=lspci)
    (lost,) = state.faulty
    assert lost.index == 3 and lost.name == "GPU 3 (00000000:76:00.0)"


def test_unread_sensors_are_said_not_guessed() -> None:
    state = judge_hardware(kernel_log=None, smi_q=None, links=None)
    assert state.unread == ("kernel log", "nvidia-smi -q", "PCIe links") and not state.fatal


def test_catalog_refuses_a_key_given_twice() -> None:
    """The catalog is read as every YAML file is (orchestrator.yamlfile): a key written twice in a rule is refused,
    where yaml.safe_load kept the last one silently (and parsed in pure Python, ~0.02 s of CPU every run)."""
    text = ("catalog: x\nrules:\n  - {code: 13, mnemonic: M, meaning: m, nvidia: RESTART_APP, action: restart_unit,"
            " action: isolate_gpu, source: s}\n")
    with pytest.raises(ConfigError, match="given twice"):
        parse_catalog(text)


#: NVIDIA's Xid catalog for Ampere and newer (docs.nvidia.com "Analyzing Xid Errors with the Xid Catalog"): the
#: Immediate Action bucket of the rows where deploy's catalog disagreed with it (issue 50, item 9), and the rows it
#: lacked. deploy's action for each bucket: IGNORE / follow the other Xid / Unused -> none (reported, never a remedy),
#: RESET_GPU -> reboot_host (a node reboot resets the GPUs).
NVIDIA_ROWS = {43: ("IGNORE", Action.none), 45: ("WORKFLOW_XID_45", Action.none), 46: ("RESET_GPU", Action.reboot_host),
               61: ("CONTACT_SUPPORT (Unused)", Action.none), 63: ("IGNORE", Action.none),
               92: ("IGNORE", Action.none), 109: ("RESET_GPU", Action.reboot_host),
               143: ("RESET_GPU", Action.reboot_host), 154: ("XID_154", Action.none),
               156: ("RESET_GPU", Action.reboot_host), 158: ("RESET_GPU", Action.reboot_host)}


@pytest.mark.parametrize("code", sorted(NVIDIA_ROWS))
def test_catalog_rows_follow_nvidias_catalog(code: int) -> None:
    rule = load_catalog().rule(code)
    bucket, action = NVIDIA_ROWS[code]
    assert rule.mnemonic != "UNKNOWN" and rule.nvidia.startswith(bucket) and rule.action is action
    assert "NVIDIA Xid catalog" in rule.source


def _nvidia_rows() -> dict[int, list[str]]:
    """NVIDIA's catalog rows as read from its page (the fixture names the page and the day it was read)."""
    text = fixture("hardware/nvidia-xid-catalog-rows.txt")
    rows = [[c.strip() for c in ln.split("|")] for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return {int(r[0]): r for r in rows}


def test_every_catalog_row_is_nvidias_row_with_its_source_and_the_day_it_was_read() -> None:
    """Each rule's mnemonic and NVIDIA bucket are the page's, and its source names the page, the day it was read
    and the row's two buckets (issue 50: the rows came from a third party's generated copy before)."""
    nvidia = _nvidia_rows()
    cat = load_catalog()
    assert {r.code for r in cat.rules} == set(nvidia)
    for rule in cat.rules:
        _, mnemonic, immediate, investigatory, _ = nvidia[rule.code]
        assert rule.mnemonic in mnemonic.split(" / "), rule.code
        assert rule.nvidia.startswith(immediate), (rule.code, rule.nvidia, immediate)
        assert cat.catalog in rule.source and "(read 2026-12-07)" in rule.source, rule.code
        assert f"row {rule.code}: {immediate} / {investigatory}" in rule.source, rule.code


def _klog(*lines: str) -> str:
    return "".join(f"2026-12-03T06:00:0{n}+0000 pve kernel: {ln}\n" for n, ln in enumerate(lines))


def _smi(recovery: str = "None", pending: bool = False) -> str:
    """The real full `-q` of the H200 with its GPU Recovery Action (and its remapper's Pending) set."""
    text = fixture(H200 + "q.txt").replace("GPU Recovery Action                                : None",
                                           f"GPU Recovery Action                                : {recovery}")
    if pending:
        text = text.replace("        Pending                                        : No",
                            "        Pending                                        : Yes")
    return text


def test_full_q_of_a_real_h200_has_the_recovery_action_and_the_health_sections() -> None:
    (gpu,) = parse_smi_health(fixture(H200 + "q.txt")).gpus
    assert gpu.recovery_action == "None" and not gpu.remap_pending and gpu.dram_uncorrectable == 0
    # a healthy GPU's full -q is no fault (its counters section, `Clocks Event Reasons Counters`, is not a reason)
    assert judge_hardware(kernel_log="", smi_q=fixture(H200 + "q.txt"), links=None).faulty == ()


@pytest.mark.parametrize(("line", "smi", "action"), [
    ("154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", None, Action.reboot_host),
    ("154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", None, Action.reboot_host),
    ("154, GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", None, Action.restart_unit),
    # nvidia-smi read after the line says the driver's verdict now: a reset cleared it
    ("154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "None", Action.none),
    ("154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "Reboot", Action.reboot_host),
])
def test_xid_154_the_drivers_recovery_action_is_followed(line: str, smi: str | None, action: Action) -> None:
    klog = _klog(f"NVRM: Xid (PCI:0000:00:06): {line}")
    state = judge_hardware(kernel_log=klog, smi_q=_smi(smi) if smi else None, links=None)
    assert state.action is action
    if smi is None:
        (fault,) = state.gpus[0].faults
        assert fault.code == 154 and "recovery action" in fault.meaning and "Xid 154" in fault.source


def test_the_recovery_action_of_nvidia_smi_alone_decides() -> None:
    """R565+ prints `GPU Recovery Action : Reboot` in the full -q (a driver whose kernel log was rotated away)."""
    state = judge_hardware(kernel_log="", smi_q=_smi("Reboot"), links=None)
    (fault,) = state.gpus[0].faults
    assert fault.kind == "recovery" and fault.action is Action.reboot_host
    assert fault.evidence.endswith("GPU Recovery Action: Reboot") and state.fatal
    assert judge_hardware(kernel_log="", smi_q=_smi("Drain P2P"), links=None).action is Action.restart_unit
    assert judge_hardware(kernel_log="", smi_q=_smi("GPU_RESET"), links=None).action is Action.reboot_host
    assert judge_hardware(kernel_log="", smi_q=_smi("NONE"), links=None).action is Action.none


def test_a_later_154_replaces_an_earlier_one() -> None:
    klog = _klog("NVRM: Xid (PCI:0000:00:06): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
                 "(GPU Reset Required)",
                 "NVRM: Xid (PCI:0000:00:06): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 "
                 "(None)")
    assert judge_hardware(kernel_log=klog, smi_q=None, links=None).action is Action.none


def test_a_pending_remap_and_xid_63_and_92_are_reported_never_remedied() -> None:
    """NVML: a pending row remap does not affect running or new work; NVIDIA's catalog: Xid 63 and 92 are IGNORE. The
    default policy must not hold the host out of the router or restart a serving server for them."""
    from orchestrator.hardware.policy import plan_remedy
    from orchestrator.inventory.models import HealthPolicy

    klog = _klog("NVRM: Xid (PCI:0000:00:06): 63, pid=1896, name=python3, Row Remapper: New row marked for "
                 "remapping, reset gpu to activate.",
                 "NVRM: Xid (PCI:0000:00:06): 92, pid=1896, name=python3, High single-bit ECC error rate")
    state = judge_hardware(kernel_log=klog, smi_q=_smi(pending=True), links=None)
    kinds = {f.kind for f in state.gpus[0].faults}
    assert kinds == {"xid", "remap-pending"} and state.gpus[0].state == "warn"
    assert state.action is Action.none and not state.fatal
    assert all(f.fix("sim-1", "0").startswith("nothing to do") for f in state.gpus[0].faults)
    plan = plan_remedy(state.action, HealthPolicy(), host="sim-1")
    assert plan.remedy == "none" and not plan.drains
    # the watch: a listed host stays in the router, and one cordoned for it earlier goes back once it serves
    from orchestrator.fleet.watch import Reading, decide

    reading = Reading("sim-1", state, serving=True)
    assert decide(reading, listed=True, cordoned=False, plan=plan) == "none"
    assert decide(reading, listed=False, cordoned=True, plan=plan) == "return"
