"""A tune's run context and its one measurement: a bench run of a point's release at one concurrency, recorded in
the tune's record and filed in the ledger the moment it ends. The flag search (driver.py) and the power phase
(power_phase.py) both measure through it, so neither imports the other's module for it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.bench.run import BenchRun
from orchestrator.commands.filing import file_runs, filed_if_stopped
from orchestrator.engine.runner import ProgressFn, run_playbook_to_end
from orchestrator.engine.state import ExpectedServer, RunInputs
from orchestrator.engine.step import RunOptions
from orchestrator.errors import HostChanged
from orchestrator.inventory.models import Host, Inventory
from orchestrator.parsers.server_process import ServerProcess
from orchestrator.store.store import ledger
from orchestrator.tune.plan import TunePlan
from orchestrator.tune.record import PointRecord, RunEntry, TuneRecord, save
from orchestrator.tune.slo import Slo

Say = Callable[[str], None]


@dataclass
class TuneContext:
    host: Host
    inventory: Inventory
    plan: TunePlan
    slo: Slo
    record: TuneRecord
    progress: ProgressFn | None
    say: Say
    tofu: bool = False
    started: float = 0.0
    #: each point's server process, as its first bench run of this session checked it (a later run must meet it)
    measured: dict[str, ServerProcess] = field(default_factory=dict)  # by point label: the process its runs measured

    def options(self, command: str) -> RunOptions:
        return RunOptions(preset=self.record.preset, command=command, tofu=self.tofu)


def prompts_for(ctx: TuneContext, concurrency: int) -> int:
    """At least two waves at this concurrency: a p99 of one wave is its last request, not a percentile."""
    return max(ctx.inventory.preset(ctx.record.preset).num_prompts, 2 * concurrency)


def bench_at(ctx: TuneContext, point: PointRecord, concurrency: int,
             purpose: Literal["search", "confirm", "power"]) -> RunEntry:
    """One bench run at `concurrency` on the running release, recorded in the tune and the ledger at once."""
    overrides = {"max-concurrency": str(concurrency), "num-prompts": str(prompts_for(ctx, concurrency))}
    # The bench step checks, before it measures, that the server is the point's release, run by the process
    # the point's earlier runs measured, with that release's flags (steps/checks.measured_server).
    seen = ctx.measured.get(point.label)
    expect = (ExpectedServer(point.release, seen.pid if seen else None, seen.restarts if seen else None)
              if point.release is not None else None)
    with filed_if_stopped(ctx.say):
        report = run_playbook_to_end("bench", ctx.host, ctx.inventory, ctx.options("deploy tune"),
                                     progress=ctx.progress, say=ctx.say,
                                     inputs=RunInputs(bench_points=(overrides,), expect=expect))
    file_runs(report, ctx.say)  # the ledger holds the run before the tune files it under its point
    if isinstance(report.failure, HostChanged):
        raise changed_under_tune(ctx, f"the bench at concurrency {concurrency} of point {point.label} (release "
                                      f"{point.release}) did not measure: {report.failure.what}")
    if report.failure is not None:
        raise report.failure
    if report.state.server.measured is not None:
        ctx.measured[point.label] = report.state.server.measured
    run: BenchRun = report.state.bench_runs[0]
    t = run.telemetry
    entry = RunEntry(run_id=run.run_id, concurrency=concurrency, purpose=purpose,
                     figures=ctx.slo.figures(run.result), output_tok_s=run.result.output_throughput,
                     tok_s_per_w=t.tokens_per_s_per_w if t else None,
                     j_per_token=t.j_per_output_token if t else None,
                     power_pct_of_limit=t.mean_power_pct_of_limit if t else None, failed=run.failure)
    point.runs.append(entry)
    save(ctx.record)
    try:
        # The ledger knows search and confirm runs; a power-phase run is a search run of its point, the limit
        # ("power 300 W"), so the ledger's tune view needs no other kind.
        ledger().link_tune_run(ctx.record.tune_id, run.run_id, point=point.label, concurrency=concurrency,
                               purpose="search" if entry.purpose == "power" else entry.purpose)
    except Exception as exc:  # the ledger is a local convenience; the record holds the run too
        ctx.say(f"  warning: could not file run {run.run_id} under the tune in the ledger: {exc}")
    figs = ", ".join(f"{k} {v:.0f} ms" for k, v in entry.figures.items() if v is not None)
    ctx.say(f"  [{point.label}] c={concurrency} ({purpose}): {entry.output_tok_s:.1f} tok/s, {figs}"
            + (f"; a failed bench, so it misses the SLO: {entry.failed}" if entry.failed else ""))
    return entry


def changed_under_tune(ctx: TuneContext, what: str) -> HostChanged:
    return HostChanged(f"tune {ctx.record.tune_id}: {what}; another command changed {ctx.host.name} during the "
                       "tune, so its figures are not recorded and nothing is restored over that change",
                       fix=f"`deploy status host {ctx.host.name}` shows what runs now; to go on with the tune, put "
                           f"its original back (`deploy rollback host {ctx.host.name} --to "
                           f"{ctx.record.original_release}`), then `deploy tune host {ctx.host.name} --resume "
                           f"{ctx.record.tune_id}`", host=ctx.host.name, step="tune")
