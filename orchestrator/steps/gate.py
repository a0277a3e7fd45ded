"""The throughput gate's step (`gate`, docs/gates.md): the candidate's bench figures against the baseline, judged by
orchestrator/gates/throughput.py; a pass writes the roll's "kept" verdict (steps/release.py write_verdict) and ends
the roll's undo, a regression fails the step, so the roll rolls back."""

from __future__ import annotations

from orchestrator.engine.step import GateSpec, StepContext, step
from orchestrator.errors import CheckFailed, ConfigError
from orchestrator.releases.documents import KEPT, ReleaseVerdict
from orchestrator.runlog import StepRecord
from orchestrator.steps.release import verdict_figures, write_verdict


@step("gate", gate=GateSpec(publishes="throughput"))
def gate(ctx: StepContext, record: StepRecord) -> None:
    """Throughput gate: below the baseline by more than the noise threshold → roll back (unless accepted)."""
    request = ctx.inputs.roll
    run = ctx.state.bench_run
    rid = ctx.state.server.release
    if rid is None:
        raise ConfigError("no candidate release to gate", fix="run install_release before gate in the playbook",
                          host=ctx.host.name)
    if run is None:
        write_verdict(ctx, rid, ReleaseVerdict(verdict=KEPT, reason="health and smoke passed; bench skipped"),
                      guard=True)
        ctx.on_failure = None
        record.summary = f"{rid} kept (no bench)"
        return
    baseline = ctx.state.candidate.baseline if ctx.state.candidate is not None else None
    threshold = (request.threshold_pct if request and request.threshold_pct else
                 ctx.profile.regression_threshold_pct)
    gated = tuple((request.gate_metrics if request else ()) or ctx.profile.gate_metrics)
    from orchestrator.gates.throughput import gate as regression_gate

    result = regression_gate(run.result, baseline, noise_pct=float(threshold),
                             accept_regression=bool(request and request.accept_regression),
                             min_output_throughput=ctx.profile.min_output_throughput, gated=gated)
    ctx.state.gate = result
    record.details["gate"] = result.model_dump(mode="json")
    seen = ctx.state.candidate.baseline_evidence if ctx.state.candidate is not None else None
    record.details["baseline"] = seen.to_dict() if seen is not None else None
    if seen is not None:
        ctx.say(f"  baseline: {seen.describe()}; noise band ±{float(threshold):g} %")
    for d in result.deltas:
        if d.baseline is not None and d.new is not None:
            ctx.say(f"  {d.label:<28} {d.baseline:>10.2f} → {d.new:>10.2f}  ({d.delta_pct:+.1f} %)")
    if not result.passed:
        raise CheckFailed(f"throughput gate: {result.verdict}: " + "; ".join(result.reasons),
                          fix="keep it anyway with --accept-regression, or change the flags",
                          host=ctx.host.name, details={"gate": result.model_dump(mode="json")})
    telemetry = run.telemetry.model_dump(mode="json") if run.telemetry else None
    write_verdict(ctx, rid, ReleaseVerdict(verdict=KEPT, gate=result.model_dump(mode="json"), preset=run.preset,
                                           candidate=verdict_figures(run.result),
                                           baseline=verdict_figures(baseline) if baseline else None,
                                           baseline_evidence=seen.to_dict() if seen is not None else None,
                                           telemetry=telemetry), guard=True)
    ctx.on_failure = None
    record.summary = f"{rid} kept: {result.verdict}" + (f" ({result.reasons[0]})" if result.reasons else "")
