"""docs/development.md "… a gate", run: the worked example's latency gate, declared with the same `@step(…,
gate=GateSpec(…))`, is in every list of gates derived from the declarations, and its failure rolls a roll back
through the runner, counted under its declared reason.

The judgement and the step below are the example's two code blocks (its `orchestrator/gates/latency.py` and its
step beside `gate` in `orchestrator/steps/throughput.py`); the playbook here is roll.yaml's gate part."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.bench.run import BenchRun
from orchestrator.engine import metrics
from orchestrator.engine.runner import run_playbook_to_end
from orchestrator.engine.state import Candidate
from orchestrator.engine.state import Rollback as RolledBack
from orchestrator.engine.step import GateSpec, RunOptions, StepContext, step
from orchestrator.errors import CheckFailed
from orchestrator.flags.flagset import canonicalize
from orchestrator.flags.schema import FlagSchema
from orchestrator.inventory.loader import load_inventory
from orchestrator.monitoring.render import render
from orchestrator.monitoring.state import MetricsState, Observation, Rollback, advance
from orchestrator.parsers.bench import BenchResult
from orchestrator.releases.documents import ROLLED_BACK, ReleaseVerdict
from orchestrator.runlog import StepRecord
from orchestrator.steps import REGISTRY, gate_registry, load_all_steps, release
from tests.shared import EXAMPLE_INVENTORY


# ---- 1. the judgement (orchestrator/gates/latency.py in the example) ----------------------------------------------
@dataclass(frozen=True)
class LatencyResult:
    passed: bool
    reason: str


def judge_latency(new: BenchResult, baseline: BenchResult | None, *, noise_pct: float) -> LatencyResult:
    if baseline is None or baseline.p99_ttft_ms is None or new.p99_ttft_ms is None:
        return LatencyResult(True, "no baseline p99 TTFT: not judged")
    limit = baseline.p99_ttft_ms * (1 + noise_pct / 100)
    if new.p99_ttft_ms > limit:
        return LatencyResult(False, f"p99 TTFT {new.p99_ttft_ms:.0f} ms > {limit:.0f} ms (baseline "
                                    f"{baseline.p99_ttft_ms:.0f} ms + {noise_pct:g} %)")
    return LatencyResult(True, f"p99 TTFT {new.p99_ttft_ms:.0f} ms within {limit:.0f} ms")


# ---- 2. the step, declared a gate (registered by the fixture below, so no other test sees it) ------------------
def latency_gate(ctx: StepContext, record: StepRecord) -> None:
    """Latency gate: the candidate's p99 TTFT within the noise band of the baseline's, else roll back."""
    run, cand = ctx.state.bench_run, ctx.state.candidate
    if run is None:
        record.status, record.summary = "skipped", "no bench"
        return
    result = judge_latency(run.result, cand.baseline if cand is not None else None,
                           noise_pct=float(ctx.profile.regression_threshold_pct))
    record.details["latency"] = {"passed": result.passed, "reason": result.reason}  # the --json record only
    if not result.passed:
        raise CheckFailed(f"latency gate: {result.reason}", fix="change the flags", host=ctx.host.name)
    record.summary = result.reason


def declare() -> None:
    step("latency_gate", gate=GateSpec(publishes="latency", rollback_reason="latency"))(latency_gate)


@pytest.fixture
def declared() -> Iterator[None]:
    load_all_steps()
    before = dict(REGISTRY)
    declare()
    yield
    REGISTRY.clear()
    REGISTRY.update(before)


def bench(p99_ttft_ms: float) -> BenchResult:
    return BenchResult(source="jsonl", completed=64, num_prompts=64, failed=0, output_throughput=1000.0,
                       p99_ttft_ms=p99_ttft_ms)


# ---- 3. every list of gates derives from the declaration ------------------------------------------------------
def test_the_declared_gate_is_in_every_derived_list(declared: None, make_run: Any) -> None:
    gates = gate_registry()
    assert gates.published["latency_gate"] == "latency" and "latency" in gates.gates
    assert gates.rollback_reasons[-3:] == ("interrupted", "manual", "other") and "latency" in gates.rollback_reasons
    assert "latency_gate" not in gates.serving  # a tune reads its failure as a verdict, not a crash
    # The shipped gates, as they were registered by hand before they were declared.
    assert {k: v for k, v in gates.published.items() if k != "latency_gate"} == {
        "health": "health", "smoke": "smoke", "correctness": "correctness", "throughput": "throughput",
        "gate": "throughput"}
    assert set(gates.rollback_reasons) == {"health", "smoke", "correctness", "throughput", "gate", "latency",
                                           "interrupted", "manual", "other"}
    assert gates.serving == {"health", "smoke"}

    # The run's end publishes its result (steps/metrics.py) and counts a rollback by it (monitoring/).
    run = make_run({}, {})
    run.ctx.state.server.release = "r-2"
    run.ctx.records.append(StepRecord("latency_gate", status="failed"))
    obs = metrics.observe(run.ctx, "roll", now=10.0)
    assert obs.judged["r-2"]["latency"].passed is False
    obs = Observation(at=10.0, command="roll", release="r-1", judged=obs.judged,
                      rollbacks=(Rollback(at=10.0, reason="latency", candidate="r-2", to="r-1"),))
    text = render("gpu-1", advance(MetricsState(), obs, gates.rollback_reasons))
    assert 'deploy_rollbacks_total{host="gpu-1",release="r-1",reason="latency"} 1' in text
    assert 'deploy_rollbacks_total{host="gpu-1",release="r-1",reason="manual"} 0' in text


# ---- 4. a failing gate rolls the roll back, through the runner, in-process ---------------------------------------
def test_a_failing_declared_gate_rolls_back_through_the_runner(declared: None, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    schema = FlagSchema.load("0.5.12.post1")
    base, new = canonicalize({"tp-size": 8}, schema), canonicalize({"tp-size": 8, "max-running-requests": 64}, schema)
    verdicts: list[tuple[str, ReleaseVerdict]] = []
    back_to: list[str] = []

    def connect(ctx: StepContext, record: StepRecord) -> None:
        pass  # no host: the example's steps decide from the run's state

    def installed(ctx: StepContext, record: StepRecord) -> None:
        """Stands for install_release: the candidate current, the real undo armed, the bench run measured."""
        ctx.state.candidate = Candidate(previous="r-1", base_flags=base, new_flags=new,
                                        flag_diff=[("max-running-requests", None, 64)], baseline=bench(800.0))
        ctx.state.server.release = "r-2"
        ctx.state.bench_run = BenchRun("run1", "e2e", datetime(2026, 12, 1), bench(1400.0), None, [], "/x", "")
        release.arm_rollback(ctx, "r-2", "r-1", ctx.state.candidate)

    def roll_back_to(ctx: StepContext, to: str, record: StepRecord, *, reason: str) -> float:
        back_to.append(to)  # the remote part (make current, wait for health) is the e2e suite's
        record.details["rollback_verified"] = f"{to} current"
        return 12.0

    monkeypatch.setitem(REGISTRY, "connect", dataclasses.replace(REGISTRY["connect"], fn=connect))
    step("test_installed")(installed)
    monkeypatch.setattr(release, "write_verdict", lambda ctx, rid, v, guard=False: verdicts.append((rid, v)))
    monkeypatch.setattr(release, "roll_back_to", roll_back_to)
    book = tmp_path / "roll-gate.yaml"
    book.write_text("name: roll-gate\nsteps:\n  - connect\n  - test_installed\n  - latency_gate\n")
    inv = load_inventory(EXAMPLE_INVENTORY)
    report = run_playbook_to_end(str(book), inv.hosts["pve-gpu-1"], inv, RunOptions())

    err = report.failure
    assert isinstance(err, CheckFailed) and err.step == "latency_gate"
    assert err.what.startswith("latency gate: p99 TTFT 1400 ms > 840 ms (baseline 800 ms + 5 %)")
    assert "rolled back to r-1" in err.what
    assert back_to == ["r-1"]
    assert report.state.rollback == RolledBack(to="r-1", candidate="r-2", reason="latency")  # its declared reason
    ((rid, verdict),) = verdicts
    assert rid == "r-2" and verdict.verdict == ROLLED_BACK and verdict.failed_step == "latency_gate"


def test_the_gates_table_of_the_docs_is_the_declarations() -> None:
    """docs/gates.md "The gates" is the one list a reader sees: each row as its step declares it."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "gates.md").read_text()
    table = text.split("## The gates\n", 1)[1].split("\n## ", 1)[0]
    rows = {cells[0].strip("` "): (cells[2].strip("` "), cells[3].strip("` "), cells[4].strip() == "a crash")
            for line in table.splitlines() if line.startswith("| `")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}
    gates = gate_registry()
    assert rows == {name: (gates.published[name], REGISTRY[name].rollback_reason, name in gates.serving)
                    for name in gates.published}
