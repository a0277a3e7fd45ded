"""Host prerequisites (`deploy doctor`): driver, /dev/nvidia-uvm, the boot unit that recreates it, uvm HMM off,
IOMMU, ACS, PVE version; and `boot_nodes`, which installs that unit."""

from __future__ import annotations

from orchestrator.engine.step import StepContext, mark_change, step
from orchestrator.errors import CheckFailed
from orchestrator.facts import CT, HOST, Facts
from orchestrator.hardware.state import HardwareState, judge_hardware
from orchestrator.parsers import ParseError
from orchestrator.parsers.devices import nvidia_char_devices
from orchestrator.render.boot_unit import (
    UNIT_NAME,
    UNIT_PATH,
    BootUnitState,
    exec_lines,
    install_script,
    render_boot_unit,
)
from orchestrator.runlog import StepRecord
from orchestrator.steps.power import refuse_out_of_range, wanted_setting
from orchestrator.steps.session import ensure_facts
from orchestrator.steps.software import release_stack
from orchestrator.verdicts.cache_disk import cache_finding
from orchestrator.verdicts.cuda import stack_cuda, stack_driver_finding
from orchestrator.verdicts.host import Finding, HostFacts, doctor_findings, host_facts_from_values, worst_status
from orchestrator.verdicts.power_cap import power_finding
from orchestrator.verdicts.toolchain import toolchain_finding

#: The host's GPU hardware sensors (orchestrator/hardware): read by doctor, `up`'s host_prereqs and status.
HARDWARE_FACTS = (HOST.gpu_xids, HOST.gpu_health, HOST.gpu_links, HOST.lspci_acs)
DOCTOR_FACTS = (HOST.driver_version, HOST.dev_listing, HOST.uvm_hmm, HOST.modprobe, HOST.cmdline, HOST.lspci_acs,
                HOST.pveversion, HOST.topo, HOST.boot_unit, *HARDWARE_FACTS[:3], HOST.power_limits, HOST.power_unit)


#: Checks whose fact can fail to read on a real host (pveversion missing, lspci or /proc/cmdline unreadable): such a
#: check is a warn row saying so, never a row that silently disappears from the table.
READ_OR_WARN = (("iommu", HOST.cmdline, "check that /proc/cmdline is readable by the SSH user"),
                ("acs-redirect", HOST.lspci_acs, "install pciutils (`apt install pciutils`) and run doctor as root: "
                                                 "lspci needs root to read the ACS capability"),
                ("pve-version", HOST.pveversion, "is this a Proxmox VE node? `pveversion` must run for the SSH "
                                                 "user"))


def unread_findings(facts: Facts, findings: list[Finding]) -> list[Finding]:
    """A warn row for each check above whose fact this run read but could not use."""
    have = {f.check for f in findings}
    unread = []
    for check, fact, fix in READ_OR_WARN:
        said = None if check in have else facts.failed_read(fact)
        if said is not None:
            unread.append(Finding(check, "warn", f"could not be read ({fact.name}: {said})", fix))
    return unread


def hardware_state(facts: Facts) -> HardwareState:
    """The GPUs' hardware state from this run's facts (a sensor not read, or whose command failed to run, is
    `unread`; nvidia-smi's non-zero exit for a lost GPU still carries the other GPUs and the lost one's line)."""
    q = facts.find(HOST.gpu_health)
    try:
        lspci = facts.find(HOST.lspci_acs)
    except ParseError:
        lspci = None
    return judge_hardware(kernel_log=facts.find(HOST.gpu_xids), smi_q=q.sections if q is not None else None,
                          smi_q_stderr=q.errors if q is not None else "", links=facts.find(HOST.gpu_links),
                          lspci=lspci)


def hardware_findings(state: HardwareState, host: str) -> list[Finding]:
    """One finding per GPU with a fault (its worst one, with the evidence line and the catalog's fix), or one ok."""
    found = []
    for gpu in state.faulty:
        worst = gpu.worst()
        assert worst is not None
        more = f" (+{len(gpu.faults) - 1} more: --json lists them)" if len(gpu.faults) > 1 else ""
        found.append(Finding(f"gpu-hardware {gpu.name}", worst.severity, f"{worst.meaning}{more}: {worst.evidence}",
                             worst.fix(host, str(gpu.index if gpu.index is not None else gpu.bus_id))))
    if not found:
        unread = f" (not read: {', '.join(state.unread)})" if state.unread else ""
        found.append(Finding("gpu-hardware", "warn" if state.unread else "ok",
                             f"{len(state.gpus)} GPU(s): no Xid, ECC, row-remap, slowdown or link fault{unread}",
                             "see docs/hardware.md" if state.unread else ""))
    return found


def host_facts(facts: Facts) -> HostFacts:
    topo = facts.find(HOST.topo)  # a row per GPU NVML enumerates (as `-L` lists them); unparsable: none
    return host_facts_from_values(
        driver_version=facts.find(HOST.driver_version),
        dev_nodes=facts.find(HOST.dev_listing),
        uvm_disable_hmm=facts.find(HOST.uvm_hmm),
        uvm_disable_hmm_configured=facts.find(HOST.modprobe),
        cmdline=facts.find(HOST.cmdline),
        lspci=facts.find(HOST.lspci_acs),
        pve_version=facts.find(HOST.pveversion),
        gpu_count_driver=(len(topo.value.gpus) if topo.value is not None else 0) if topo is not None and topo.ok
        else None,
        boot_unit=facts.find(HOST.boot_unit),
    )


def findings_for(ctx: StepContext) -> list[Finding]:
    ensure_facts(ctx)
    hardware = hardware_state(ctx.facts)
    ctx.state.hardware = hardware
    facts = host_facts(ctx.facts)
    findings = doctor_findings(facts)
    cuda = stack_driver_finding(facts.driver_version, stack_cuda(ctx.profile.sglang_version, ctx.profile.lock_text))
    findings += [cuda] if cuda is not None else []
    power = power_finding(ctx.facts.get(HOST.power_limits), ctx.facts.get(HOST.power_unit), ctx.host.power_limit_w,
                          ctx.host.name)
    return findings + unread_findings(ctx.facts, findings) + hardware_findings(hardware, ctx.host.name) + [power]


@step("doctor", host_facts=(*DOCTOR_FACTS, HOST.kernel_cache_usage),
      ct_facts=(CT.toolchain, CT.current_meta, CT.pip_cache_usage))
def doctor(ctx: StepContext, record: StepRecord) -> None:
    """Read and judge the host prerequisites without failing (the doctor command reports them all), and, in a running
    container, the toolchain a real sglang's first start compiles with (nvcc: the current release's stack's own,
    which its unit names as CUDA_HOME, counts); then where the caches live and the room left there (the kernel
    cache directory on the host, the pip cache in the container)."""
    findings = findings_for(ctx)
    tool = toolchain_finding(ctx.facts.get(CT.toolchain), ctx.vmid,
                             release_stack(ctx, ctx.facts.get(CT.current_meta)).cuda_home)
    findings += [tool] if tool is not None else []
    kernel, pip = ctx.facts.get(HOST.kernel_cache_usage), ctx.facts.get(CT.pip_cache_usage)
    findings.append(cache_finding(kernel, pip, configured=ctx.host.container.kernel_cache is not None,
                                  vmid=ctx.vmid))
    record.details["caches"] = {"kernel": kernel.to_dict() if kernel is not None else None,
                                "pip": pip.to_dict() if pip is not None else None}
    ctx.state.doctor_findings = findings
    record.details["findings"] = [f.to_dict() for f in findings]
    if ctx.state.hardware is not None:
        record.details["hardware"] = ctx.state.hardware.to_dict(ctx.host.name)
    record.summary = f"{len(findings)} checks: {worst_status(findings)}"


@step("host_prereqs", host_facts=DOCTOR_FACTS)
def host_prereqs(ctx: StepContext, record: StepRecord) -> None:
    """The doctor checks; a failure stops here with the fix spelled out."""
    findings = findings_for(ctx)
    record.details["findings"] = [f.to_dict() for f in findings]
    ctx.state.pve_version = host_facts(ctx.facts).pve_version
    gpus = ctx.facts.get(HOST.power_limits)
    if "power_limit" in ctx.playbook_steps and gpus is not None and (want := wanted_setting(ctx)) is not None:
        refuse_out_of_range(gpus, want, ctx.host.name)  # before boot_nodes or any other step changes the host
    failed = [f for f in findings if f.status == "fail"]
    # A warning a later step of this run answers (it installs the boot unit, sets the power limit) is not news.
    answered = {c for c, s in (("boot-nodes-unit", "boot_nodes"), ("power-limit", "power_limit"))
                if s in ctx.playbook_steps}
    warned = [f for f in findings if f.status == "warn" and f.check not in answered]
    for f in warned:
        ctx.say(f"  warning: {f.check}: {f.observed}")
    if failed:
        raise CheckFailed("host prerequisites not met: " + "; ".join(f"{f.check}: {f.observed}" for f in failed),
                          fix=" | ".join(f"{f.check}: {f.fix}" for f in failed), host=ctx.host.name,
                          details={"findings": [f.to_dict() for f in findings]})
    judged = [f for f in findings if f.status != "warn" or f in warned]
    record.summary = f"{len(findings)} checks: {worst_status(judged)}" + (
        f" ({', '.join(f.check for f in warned)})" if warned else "")


@step("boot_nodes", host_facts=(HOST.dev_listing, HOST.boot_unit))
def boot_nodes(ctx: StepContext, record: StepRecord) -> None:
    """A host unit that recreates the container's NVIDIA nodes at every boot, before pve-guests starts the containers
    (why a unit and not a hookscript: orchestrator/render/boot_unit.py)."""
    ensure_facts(ctx)
    nodes = nvidia_char_devices(ctx.facts.get(HOST.dev_listing))
    wanted = render_boot_unit(nodes)
    have = ctx.facts.get(HOST.boot_unit) or BootUnitState(False, None)
    record.details["unit"] = UNIT_PATH
    if have.in_place(wanted):
        record.summary = f"{UNIT_NAME} enabled (nvidia-modprobe before pve-guests.service)"
        return
    what = (f"{'update' if have.text is not None else 'install'} {UNIT_NAME}: "
            f"{'; '.join(exec_lines(nodes))} at boot, "
            "before pve-guests.service")
    if mark_change(record, ctx, what):
        ctx.ssh.script(install_script(wanted), what=f"install {UNIT_NAME}")
    record.summary = what
