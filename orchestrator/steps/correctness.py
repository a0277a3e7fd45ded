"""The correctness gate on a host (docs/gates.md): golden prompts at temperature 0 against the running server.

`roll` and `up` (of a new release) run step `correctness` after smoke: the candidate's answers are recorded as its
golden.json (beside its verdict.json) and compared with the record of the release that was current before, when
that one was verified. A failure raises CheckFailed naming "correctness", the prompt and the token position, so a
roll rolls back through install_release's undo. `deploy check` runs `correctness_check`: the current release
against its own record, changing nothing. The judgement is orchestrator.gates.correctness (pure).
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.engine.state import CorrectnessRun
from orchestrator.engine.step import GateSpec, StepContext, step
from orchestrator.engine.waiting import waiting_for
from orchestrator.errors import CheckFailed, RemoteError
from orchestrator.facts import CT
from orchestrator.gates.correctness import (
    RECORD_SHAPE,
    Record,
    Thresholds,
    Verdict,
    judge,
    parse_answer,
    parse_record,
    record_problem,
)
from orchestrator.inventory.models import CorrectnessGate
from orchestrator.releases.documents import KEPT, ReleaseVerdict
from orchestrator.resources import probe_text
from orchestrator.runlog import StepRecord
from orchestrator.steps.session import ensure_facts

GOLDEN_FILE = "golden.json"


def thresholds(gate: CorrectnessGate) -> Thresholds:
    return Thresholds(prefix_tokens=gate.prefix_tokens, tie_margin=gate.tie_margin,
                      max_logprob_delta=gate.max_logprob_delta, mean_logprob_delta=gate.mean_logprob_delta,
                      max_repeat_run=gate.max_repeat_run)


def run_golden(ctx: StepContext, *, release: str, record: bool, reference: str | None) -> dict[str, Any]:
    """One round trip: every golden prompt through /generate, the answers recorded into `release` (when `record`),
    the reference release's golden.json and verdict.json read back."""
    p, gate = ctx.profile, ctx.profile.correctness
    args = {"base": f"http://{p.host}:{p.port}", "timeout": gate.timeout_s, "release": release,
            "max_new_tokens": gate.max_new_tokens, "top_logprobs": gate.top_logprobs,
            "prompts": [q.model_dump(mode="json") for q in gate.prompts],
            "record_path": f"{ctx.ct.paths.release_dir(release)}/{GOLDEN_FILE}" if record else "",
            "reference_dir": ctx.ct.paths.release_dir(reference) if reference else ""}
    limit = gate.timeout_s * len(gate.prompts) + 30
    with waiting_for(ctx.say, f"the {len(gate.prompts)} golden prompts", limit):
        res = ctx.ct.run_python(p.venv, probe_text("golden_probe.py"), [json.dumps(args)], tag="DEPLOY_GOLDEN_EOF",
                                timeout=limit, what="correctness gate")
    try:
        return dict(json.loads(res.last_line))
    except (json.JSONDecodeError, IndexError) as exc:
        raise RemoteError(f"the correctness gate printed no result: {res.said(300)}",
                          host=ctx.host.name) from exc


def reference_record(ctx: StepContext, data: dict[str, Any], reference: str | None
                     ) -> tuple[Record | None, str | None]:
    """The reference record, only beside a "kept" verdict; else None and why. A golden.json that is there but not
    a record (not JSON, another shape) fails the gate: compared with nothing, the gate would pass anything."""
    if reference is None:
        return None, "no earlier release"
    found = data.get("reference_verdict")  # its verdict.json, as the probe read it beside golden.json
    verdict = ReleaseVerdict.from_data(found if isinstance(found, dict) else None)
    word = verdict.verdict if verdict is not None else None
    if word != KEPT:
        return None, f"release {reference} is not verified ({word or 'no verdict'})"
    raw = data.get("reference")
    problem = str(data.get("reference_problem") or "") or (record_problem(raw) if raw is not None else "")
    if problem:
        path = f"{ctx.ct.paths.release_dir(reference)}/{GOLDEN_FILE}"
        raise CheckFailed(f"correctness gate: the reference record {path} of release {reference} is not a golden "
                          f"record: {problem}",
                          fix=f"golden.json holds {RECORD_SHAPE}; the gate of `up` or `roll` writes it. Move the "
                              f"damaged file aside in the container (`mv {path} {path}.bad`): the next gate then "
                              "runs its detectors only and records a new reference (docs/gates.md)",
                          host=ctx.host.name, details={"path": path, "problem": problem})
    rec = parse_record(raw, reference)
    if rec is None:
        return None, f"release {reference} has no golden record"
    return rec, None


def judged(ctx: StepContext, record: StepRecord, release: str, reference: str | None, *,
           write: bool) -> Verdict:
    data = run_golden(ctx, release=release, record=write, reference=reference)
    if data.get("error"):
        raise CheckFailed(f"correctness gate: the golden prompts could not be run on release {release}: "
                          f"{data['error']}", fix="look at the server journal (journalctl -u sglang in the "
                          "container); roll back if a flag change caused it", host=ctx.host.name)
    candidate = Record(release, tuple(parse_answer(a) for a in data.get("answers") or [] if isinstance(a, dict)))
    ref, why_not = reference_record(ctx, data, reference)
    verdict = judge(candidate, ref, thresholds(ctx.profile.correctness))
    notes = [*verdict.notes] if ref is not None or why_not is None else [f"{why_not}: detectors only"]
    ctx.state.correctness = CorrectnessRun(verdict, notes, reference if ref else None,
                                           recorded=data.get("recorded") or None, seconds=data.get("seconds"))
    record.details["correctness"] = ctx.state.correctness.to_dict()
    for note in notes:
        ctx.say(f"  {note}")
    if not verdict.passed:
        for finding in verdict.findings[:12]:  # every prompt's first problem, before the rollback's lines
            ctx.say(f"  {finding.line()}")
        first = verdict.findings[0]
        more = f" (+{len(verdict.findings) - 1} more)" if len(verdict.findings) > 1 else ""
        raise CheckFailed(f"correctness gate: {first.line()}{more}"
                          + (f" [reference: release {reference}]" if ref is not None else ""),
                          fix=f"the server answers its golden prompts wrongly; golden.json in release {release} "
                              "holds the answers (see docs/gates.md); roll back if a flag change caused it",
                          host=ctx.host.name, details={"correctness": record.details["correctness"]})
    compared = sum(1 for r in verdict.results if r.compared)
    record.summary = (f"{len(verdict.results)} golden prompts ok ({compared} compared with {reference}"
                      if ref is not None else f"{len(verdict.results)} golden prompts ok (detectors only")
    record.summary += f", {data.get('seconds') or 0:.1f} s)"
    return verdict


@step("correctness", gate=GateSpec())
def correctness(ctx: StepContext, record: StepRecord) -> None:
    """Golden prompts at temperature 0: the new release's answers against the previous verified release's record."""
    if ctx.options.dry_run or not ctx.profile.correctness.enabled:
        record.status = "skipped"
        record.summary = "dry run" if ctx.options.dry_run else "disabled in the profile (correctness.enabled)"
        return
    server = ctx.state.server
    if server.release is None:
        record.status, record.summary = "skipped", "no release"
        return
    if not server.installed and not server.restarted:
        record.summary = f"release {server.release} unchanged (deploy check runs the gate on it)"
        return
    cand = ctx.state.candidate
    reference = cand.previous if cand is not None else server.previous
    judged(ctx, record, server.release, reference, write=server.installed)


def require_current_release(ctx: StepContext, why: str = "") -> str:
    """The container's current release (fact CT.current_release); CheckFailed when it has none."""
    ensure_facts(ctx)
    release = ctx.facts.get(CT.current_release)
    if release is None:
        raise CheckFailed(f"no current release in CT {ctx.vmid} (or the container is not running){why}",
                          fix=f"deploy up host {ctx.host.name}", host=ctx.host.name)
    return release


@step("correctness_check", ct_facts=(CT.current_release,))
def correctness_check(ctx: StepContext, record: StepRecord) -> None:
    """The correctness gate on the current release, against its own golden record; changes nothing."""
    release = require_current_release(ctx)
    judged(ctx, record, release, release, write=False)
