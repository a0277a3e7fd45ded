"""Host prerequisites (`deploy doctor`): driver, /dev/nvidia-uvm, uvm HMM off, IOMMU, ACS, PVE version."""

from __future__ import annotations

from orchestrator.errors import CheckFailed
from orchestrator.facts import HOST, Facts, HostFact
from orchestrator.parsers.sections import CommandOutput
from orchestrator.runlog import StepRecord
from orchestrator.steps.base import StepContext, step
from orchestrator.steps.session import ensure_facts
from orchestrator.verdicts.host import Finding, HostFacts, doctor_findings, host_facts_from_outputs, worst_status

DOCTOR_FACTS = (HOST.driver_version, HOST.dev_listing, HOST.uvm_hmm, HOST.modprobe, HOST.cmdline, HOST.lspci_acs,
                HOST.pveversion, HOST.nvsmi_list)


def host_facts(facts: Facts) -> HostFacts:
    def text(fact: HostFact[CommandOutput]) -> str | None:
        out = facts.find(fact)
        return out.stdout if out is not None and out.rc == 0 else None

    def any_text(fact: HostFact[CommandOutput]) -> str | None:
        out = facts.find(fact)
        return out.stdout if out is not None else None

    return host_facts_from_outputs(
        proc_driver_version=text(HOST.driver_version) or "",
        dev_listing=any_text(HOST.dev_listing),
        uvm_hmm_param=text(HOST.uvm_hmm),
        modprobe_conf=any_text(HOST.modprobe),
        cmdline=text(HOST.cmdline),
        lspci_vvv=text(HOST.lspci_acs),
        pveversion=text(HOST.pveversion),
        gpu_list=text(HOST.nvsmi_list),
    )


def findings_for(ctx: StepContext) -> list[Finding]:
    ensure_facts(ctx)
    return doctor_findings(host_facts(ctx.facts))


@step("doctor", host_facts=DOCTOR_FACTS)
def doctor(ctx: StepContext, record: StepRecord) -> None:
    """Read and judge the host prerequisites without failing (the doctor command reports them all)."""
    findings = findings_for(ctx)
    ctx.state.doctor_findings = findings
    record.details["findings"] = [f.to_dict() for f in findings]
    record.summary = f"{len(findings)} checks: {worst_status(findings)}"


@step("host_prereqs", host_facts=DOCTOR_FACTS)
def host_prereqs(ctx: StepContext, record: StepRecord) -> None:
    """The doctor checks; a failure stops here with the fix spelled out."""
    findings = findings_for(ctx)
    record.details["findings"] = [f.to_dict() for f in findings]
    ctx.state.pve_version = host_facts(ctx.facts).pve_version
    failed = [f for f in findings if f.status == "fail"]
    warned = [f for f in findings if f.status == "warn"]
    for f in warned:
        ctx.say(f"  warning: {f.check}: {f.observed}")
    if failed:
        raise CheckFailed("host prerequisites not met: " + "; ".join(f"{f.check}: {f.observed}" for f in failed),
                          fix=" | ".join(f"{f.check}: {f.fix}" for f in failed), host=ctx.host.name,
                          details={"findings": [f.to_dict() for f in findings]})
    record.summary = f"{len(findings)} checks: {worst_status(findings)}" + (
        f" ({', '.join(f.check for f in warned)})" if warned else "")
