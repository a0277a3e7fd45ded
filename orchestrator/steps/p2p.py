"""P2P: topology and P2P read/write in the container and on the host, compared, with a verdict."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from typing import Any

from orchestrator.engine.step import StepContext, step
from orchestrator.errors import CheckFailed, RemoteError
from orchestrator.facts import CT, HOST, Fact, Facts, Read
from orchestrator.hardware.links import (
    LinkLoadVerdict,
    framed,
    judge_links_under_load,
    link_sampler_argv,
    parse_link_samples,
)
from orchestrator.p2p.parse import P2PMatrix
from orchestrator.p2p.report import P2PReport, P2PView
from orchestrator.p2p.verdict import compare_topologies, p2p_verdict
from orchestrator.parsers.gpu_query import GpuQueryParseError
from orchestrator.parsers.topo import TopoMatrix
from orchestrator.runlog import StepRecord
from orchestrator.scripts import render_script
from orchestrator.steps.session import ensure_facts

#: A side's facts: `topo -m` (kept with its evidence when it does not parse), then `-p2p r` and `-p2p w`.
P2PFacts = tuple[Fact[Read[TopoMatrix]], Fact[P2PMatrix | None], Fact[P2PMatrix | None]]
HOST_P2P = (HOST.topo, HOST.p2p_read, HOST.p2p_write)
CT_P2P = (CT.topo, CT.p2p_read, CT.p2p_write)
#: The host's P2P status matrices are judged only when the container's topology cannot be read (p2p_report: the
#: verdict is the container's whenever it has a topology, and the report shows the host's topology alone, never
#: its status matrices). So the step's one round trip reads the host's `topo -m` (compared with the container's)
#: and no more; the two `topo -p2p` runs on the host follow in a round trip of their own only in that case.
HOST_P2P_STATUS = (HOST.p2p_read, HOST.p2p_write)


def view_from(facts: Facts, which: P2PFacts, where: str) -> P2PView:
    """The topology and P2P matrices one side (host or container) reported; `which` = (topo, read, write)."""
    topo_fact, read_fact, write_fact = which
    topo = facts.find(topo_fact)
    if topo is None:
        return P2PView(where, None, None, None, "not read (container not running)")
    if topo.value is None:
        return P2PView(where, None, None, None, topo.said)
    return P2PView(where, topo.value, facts.find(read_fact), facts.find(write_fact))


def p2p_report(facts: Facts, tp_gpus: int | None = None, env: Mapping[str, str] | None = None) -> P2PReport:
    ct = view_from(facts, CT_P2P, "container")
    host = view_from(facts, HOST_P2P, "host")
    primary = ct if ct.topo is not None else host
    verdict = None
    if primary.topo is not None:
        gpus = primary.topo.gpus[:tp_gpus] if tp_gpus else None
        verdict = p2p_verdict(primary.topo, primary.read, primary.write, gpus, env)
    comparison = compare_topologies(host.topo, ct.topo) if host.topo and ct.topo else None
    return P2PReport(ct, host, verdict, comparison)


def tp_size(ctx: StepContext) -> int | None:
    for key in ("tensor-parallel-size", "tp-size", "tp"):
        value = ctx.profile.flags.get(key)
        if isinstance(value, int):
            return value
    return None


@step("verify_p2p", host_facts=(HOST.topo,), ct_facts=CT_P2P)
def verify_p2p(ctx: StepContext, record: StepRecord) -> None:
    """Every tensor-parallel GPU pair has P2P read+write OK, and the container sees the host's topology."""
    ensure_facts(ctx)
    report = p2p_report(ctx.facts, tp_size(ctx), ctx.profile.env)
    unread = [f for f in HOST_P2P_STATUS if ctx.facts.find(f) is None]
    if unread and report.container.topo is None:
        ctx.facts.gather(unread, (), what="reading the host's P2P status (no container topology)")
        report = p2p_report(ctx.facts, tp_size(ctx), ctx.profile.env)
    ctx.state.p2p_report = report
    record.details.update(report.to_dict())
    if report.verdict is None:
        if ctx.options.dry_run:
            record.status = "skipped"
            record.summary = "container not running yet (dry run)"
            return
        raise CheckFailed(f"could not read the GPU topology: {report.container.error or report.host.error}",
                          fix="check nvidia-smi in the container", host=ctx.host.name)
    v = report.verdict
    problems = list(v.reasons) if v.status == "fail" else []
    if report.comparison is not None and not report.comparison.same:
        problems.append("the container does not see the host's topology: " + report.comparison.describe())
    if problems and not ctx.options.allow_no_p2p:
        raise CheckFailed("P2P check failed: " + " ".join(problems),
                          fix=" ".join(v.fixes) or "see deploy verify-p2p; --allow-no-p2p continues anyway",
                          host=ctx.host.name, details=report.to_dict())
    record.summary = f"P2P {v.status} over {len(v.gpus)} GPUs" + (
        " (allowed by --allow-no-p2p)" if problems else "") + (
        f"; {v.reasons[0]}" if v.reasons and v.status == "warn" else "")
    if problems:
        record.status = "ok"
        record.details["allowed_failure"] = problems


def bandwidth_probe(ctx: StepContext, size_mib: int) -> dict[str, Any]:
    """Ship the probe into the container, run it with the venv's torch, judge pairs by link type."""
    from orchestrator.p2p.bandwidth import (  # here: the probe runs on request, never in a converged run
        p2p_bandwidth_verdict,
        parse_p2p_probe,
        probe_argv,
        probe_script_source,
    )

    path = ctx.ct.paths.p2p_probe_path
    marker = f"@@deploy-{secrets.token_hex(8)}"
    body = render_script("p2p_bandwidth.sh.j2", path=path, source=probe_script_source(),
                         probe_argv=probe_argv(ctx.ct.paths.venv_python(ctx.profile.venv), path, size_mib=size_mib),
                         sampler_argv=link_sampler_argv(), lead_in="0.3", marker=marker)
    res = ctx.ct.script(body, check=False, timeout=600, what="P2P bandwidth probe")
    try:
        result = parse_p2p_probe(res.stdout)
    except ValueError as exc:
        raise RemoteError(f"the bandwidth probe printed no result: {res.said(300)}",
                          fix="the probe needs torch with CUDA in the profile's venv", host=ctx.host.name) from exc
    report = ctx.state.p2p_report
    links: dict[tuple[int, int], str] = {}
    topo = report.container.topo if report is not None else None
    if topo is not None:
        for (a, b), link in topo.cells.items():
            if a.startswith("GPU") and b.startswith("GPU") and a != b:
                links[(int(a[3:]), int(b[3:]))] = link
    gen = width = None
    m = re.search(r"^PCIE_MAX=\s*(\d+),\s*(\d+)", res.stdout, re.MULTILINE)
    if m:
        gen, width = int(m.group(1)), int(m.group(2))
    verdict = p2p_bandwidth_verdict(result, links, pcie_gen=gen, pcie_width=width)
    under_load = links_under_copies(ctx, framed(res.stdout, marker, "links"), res.rc)
    return json.loads(json.dumps({"probe": result.model_dump(mode="json"), **verdict.model_dump(mode="json"),
                                  "ok": verdict.ok and under_load.ok, "links": under_load.to_dict()}))


def links_under_copies(ctx: StepContext, text: str | None, rc: int) -> LinkLoadVerdict:
    """The links sampled while the copy matrix ran. Copies run on the copy engines and may leave
    `utilization.gpu` at 0, so every sample counts (`min_util_pct=None`): a probe that completed drove every
    GPU's link in turn. A probe that failed, or a sampler that gave nothing, judges no link (said, not passed
    silently as healthy)."""
    if rc != 0 or text is None:
        return judge_links_under_load((), load="the P2P copy matrix", min_util_pct=None)
    try:
        samples = parse_link_samples(text)
    except GpuQueryParseError as exc:
        raise RemoteError(f"the link sampler's output does not read: {exc}",
                          fix="re-run `deploy verify-p2p --bandwidth`; check nvidia-smi in the container",
                          host=ctx.host.name) from exc
    return judge_links_under_load(samples, load="the P2P copy matrix", min_util_pct=None)


@step("p2p_bandwidth")
def p2p_bandwidth(ctx: StepContext, record: StepRecord) -> None:
    """GPU-to-GPU copy matrix with the container venv's torch and each GPU's PCIe link sampled under it (only when
    asked: --bandwidth, or a remedy's verification, where a failure fails the step)."""
    if not ctx.inputs.want_bandwidth:
        record.status = "skipped"
        record.summary = "not requested (--bandwidth)"
        return
    result = bandwidth_probe(ctx, ctx.inputs.probe_size_mib)
    ctx.state.bandwidth = result
    record.details["bandwidth"] = result
    record.summary = str(result.get("summary", ""))
    links = result.get("links") or {}
    if not links.get("ok", True) or ctx.inputs.bandwidth_gate:
        record.summary += "; " + str(links.get("summary", ""))
    if ctx.inputs.bandwidth_gate and not result.get("ok", True):
        raise CheckFailed(f"P2P under load failed: {record.summary}",
                          fix="a pair below its link's bandwidth or a link below its capability under load is "
                              "hardware: reboot the node to retrain the link; if it stays, reseat the GPU or its "
                              "riser (`deploy verify-p2p host H --bandwidth` shows the matrix)",
                          host=ctx.host.name, details=result)
