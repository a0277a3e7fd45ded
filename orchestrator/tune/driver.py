"""One host's tune: the current flags, then each flag point rolled (roll.py, every gate), bracketed and
confirmed; the original flags restored (or, with apply, the winner rolled as a normal release).

Every bench run is saved in the tune's record and filed in the ledger under the tune the moment it ends, so a
killed tune resumes from there (`TuneRecord`); a SIGINT/SIGTERM (or a closed output pipe, or any error) restores
the original release before it exits, with further signals held until the restore ended (orchestrator/signals.py),
and the record keeps what the host was read back running afterwards.

A tune owns its host: the command holds the host's claim for the whole run (cli/tune_cmd.py), every release it
rolls is marked as its trial (steps/state.TuneTrial), and every bench run checks that it measured the point's own
release: a host changed by someone else stops the tune (HostChanged) without filing figures or restoring.
"""

from __future__ import annotations

import time

from orchestrator.bench.stats import Estimate
from orchestrator.commands.roll import RollResult, roll_host, rollback_host
from orchestrator.engine.runner import run_playbook_to_end
from orchestrator.engine.state import RollRequest, TuneTrial
from orchestrator.errors import CheckFailed, DeployError, HostChanged
from orchestrator.local import signals
from orchestrator.steps import gate_registry
from orchestrator.tune.measure import Say, TuneContext, bench_at, changed_under_tune
from orchestrator.tune.power_phase import power_phase, restore_limits
from orchestrator.tune.record import CURRENT, PointRecord, TuneRecord, save
from orchestrator.tune.search import Measurement, Ranked, Verdict, bracket, choose, goodput


class BudgetSpent(Exception):
    """--budget ran out in the middle of a point: the point stops before its next bench run."""


def over_budget(ctx: TuneContext) -> bool:
    budget = ctx.plan.budget_s
    return budget is not None and ctx.record.elapsed_s + (time.monotonic() - ctx.started) > budget


def measure_point(ctx: TuneContext, point: PointRecord) -> None:
    """Bracket the point's SLO limit (replaying the runs a killed session already made), then confirm."""
    cached = [r for r in point.runs if r.purpose == "search"]
    confirms = [r for r in point.runs if r.purpose == "confirm"]
    point.runs = []
    replay = list(cached)

    def measure(c: int) -> Measurement:
        if replay and replay[0].concurrency == c:  # the same search asks again what it asked before the kill
            entry = replay.pop(0)
            point.runs.append(entry)
            return entry.measurement()
        replay.clear()  # off the old trace: the rest of it answers other questions
        if over_budget(ctx):
            raise BudgetSpent
        return bench_at(ctx, point, c, "search").measurement()

    result = bracket(ctx.plan.grid, ctx.slo, measure, noise_pct=ctx.record.noise_pct)
    point.runs = [r for r in point.runs if r.purpose == "search"] + confirms
    point.search_runs, point.repeats = result.search_runs, result.repeats
    point.limit, point.at_top = result.limit, result.at_top
    if result.limit is None:
        low = result.probes[-1]
        point.status = "lost"
        point.reason = f"SLO: missed even at concurrency {low.concurrency} ({'; '.join(low.misses)})"
        save(ctx.record)
        return
    confirms = [c for c in confirms if c.concurrency == result.limit]
    point.runs = [r for r in point.runs if r.purpose == "search"] + confirms
    while len(confirms) < ctx.record.confirm:
        if over_budget(ctx):
            raise BudgetSpent
        confirms.append(bench_at(ctx, point, result.limit, "confirm"))
    est = goodput(result, [c.measurement() for c in confirms if c.concurrency == result.limit],
                  noise_pct=ctx.record.noise_pct)
    point.goodput = est.to_dict() if est is not None else None
    point.status = "done"
    failed = next((c for c in confirms if c.failed), None)
    if failed is not None:
        point.status = "lost"
        point.reason = (f"SLO: the confirmation run at concurrency {failed.concurrency} was a failed bench "
                        f"({failed.failed})")
    save(ctx.record)


def own_releases(ctx: TuneContext) -> set[str]:
    """The releases this tune made current: the original and each rolled point's."""
    rec = ctx.record
    return {r for r in (rec.original_release, *(p.release for p in rec.points)) if r is not None}


def restore(ctx: TuneContext, release: str | None) -> None:
    """Make `release` current again (a rollback to it, gates of a rollback: health, smoke), but only over one of
    this tune's own releases: over anyone else's it stops (HostChanged) instead of discarding their change."""
    if release is None:
        return
    now, trial_of = host_now(ctx)
    if now == release:
        return
    if now not in own_releases(ctx) and trial_of != ctx.record.tune_id:
        raise changed_under_tune(ctx, f"the host runs release {now}, which this tune did not install")
    ctx.say(f"restoring release {release}")
    report = rollback_host(ctx.host, ctx.inventory, release, ctx.options("deploy tune (restore)"),
                           progress=ctx.progress, say=ctx.say)
    if report.failure is not None:
        raise report.failure


def host_now(ctx: TuneContext) -> tuple[str | None, str | None]:
    """The host's current release, and the tune it is a trial of (read from its meta.json), in one status run."""
    report = run_playbook_to_end("status", ctx.host, ctx.inventory, ctx.options("deploy status"))
    if report.failure is not None:
        raise report.failure
    status = report.state.status
    return (status.release, status.tune_trial) if status is not None else (None, None)


def current_release(ctx: TuneContext) -> str | None:
    return host_now(ctx)[0]


def roll_point(ctx: TuneContext, point: PointRecord) -> bool:
    """Roll the point's flags; False (and why, on the point) when a gate, a refusal or a crash stopped it."""
    ctx.say(f"— {point.label}: roll")
    # Validation, health, smoke and a crash still stop a point; the throughput gate measures but does not revert
    # (as --sweep-server): its baseline is the previous candidate at the preset's one load, while the tune judges
    # goodput at each point's own SLO limit. --apply rolls the winner with the full gate against the original.
    trial = TuneTrial(ctx.record.tune_id, ctx.record.original_release)
    outcome = roll_host(ctx.host, ctx.inventory,
                        RollRequest(set=tuple(point.sets), accept_regression=True, trial=trial),
                        ctx.options("deploy tune"), progress=ctx.progress, say=ctx.say)
    if outcome.result is RollResult.KEPT:
        point.release = outcome.release
        save(ctx.record)
        return True
    if outcome.result is RollResult.UNCHANGED:  # these flags are the current ones
        point.release = outcome.release
        return True
    err = outcome.error
    what = err.what if err is not None else outcome.result.value
    kind = {RollResult.ROLLED_BACK: "gate", RollResult.REFUSED: "refused"}.get(outcome.result, "crash")
    if outcome.failed_step in gate_registry().serving and outcome.result is RollResult.ROLLED_BACK:
        kind = "crash"  # the server did not come up or did not answer: not a throughput verdict
    point.status, point.reason = "lost", f"{kind}: {what}"
    save(ctx.record)
    if outcome.result is RollResult.FAILED:
        restore(ctx, ctx.record.original_release)  # no verified rollback: put the original back ourselves
    return False


def ranked(record: TuneRecord) -> list[Ranked]:
    out = []
    for p in record.points:
        g = p.goodput
        est = (Estimate(int(g["n"]), float(g["mean"]), float(g["stdev"]), float(g["ci95_low"]),
                        float(g["ci95_high"]), float(g["min"]), float(g["max"])) if g else None)
        out.append(Ranked(p.label, est if p.status == "done" else None))
    return out


def _tune(ctx: TuneContext) -> Verdict:
    """Each pending point, the verdict, then the restore (or the winner's roll)."""
    rec = ctx.record
    now = current_release(ctx)
    if rec.original_release is None:
        rec.original_release = now
        save(rec)
    elif now != rec.original_release:  # a killed session left a candidate: take it down first
        ctx.say(f"resuming: release {now} is current, not the original {rec.original_release}")
        restore(ctx, rec.original_release)
    for point in rec.points:
        if point.status != "pending":
            continue
        if over_budget(ctx):
            point.status, point.reason = "skipped", "budget: --budget spent before this point"
            save(rec)
            continue
        if point.label == CURRENT:
            point.release = rec.original_release
            ctx.say(f"— current flags (release {rec.original_release})")
        elif not roll_point(ctx, point):
            continue
        try:
            measure_point(ctx, point)
        except BudgetSpent:
            point.status = "skipped"
            point.reason = f"budget: --budget spent during this point, after {len(point.runs)} run(s)"
            save(rec)
        except HostChanged:
            raise
        except CheckFailed as err:  # the bench itself failed: the server broke under load
            point.status, point.reason = "lost", f"crash: {err.what}"
            save(rec)
    verdict = choose(ranked(rec), CURRENT)
    rec.winner, rec.verdict = verdict.winner, verdict.reason
    apply_winner = (rec.apply and verdict.winner not in (None, CURRENT))
    restore(ctx, rec.original_release)
    if apply_winner:
        winner = rec.point(str(verdict.winner))
        ctx.say(f"— applying {winner.label} as a release")
        outcome = roll_host(ctx.host, ctx.inventory, RollRequest(set=tuple(winner.sets)),
                            ctx.options("deploy tune --apply"), progress=ctx.progress, say=ctx.say)
        if outcome.result is not RollResult.KEPT:
            rec.verdict += f"; --apply: the roll of {winner.label} ended {outcome.result.value}"
            rec.final_release = current_release(ctx)
            rec.elapsed_s += time.monotonic() - ctx.started
            rec.phase = "done"
            save(rec)
            raise outcome.error or CheckFailed(f"--apply: the roll ended {outcome.result.value}")
        rec.final_release = outcome.release
    else:
        rec.final_release = rec.original_release
    if rec.power_step_w is not None:
        power_after_flags(ctx, str(verdict.winner) if apply_winner else CURRENT)
    rec.host_release = current_release(ctx)  # read back: the report names what the host runs, not what was meant
    if rec.host_release != rec.final_release:
        raise changed_under_tune(ctx, f"after the tune the host runs release {rec.host_release}, not "
                                      f"{rec.final_release}")
    rec.elapsed_s += time.monotonic() - ctx.started
    rec.phase = "done"
    save(rec)
    return verdict


def power_after_flags(ctx: TuneContext, label: str) -> None:
    """The power phase (tune/power_phase.py) at the SLO limit of the flags the host now runs."""
    rec = ctx.record
    limit = rec.point(label).limit
    if limit is None:
        rec.power_verdict = f"power phase skipped: the flags of {label} have no SLO limit concurrency"
        save(rec)
        return
    power_phase(ctx, limit)


def run_tune(ctx: TuneContext) -> Verdict:
    """The whole tune (or the rest of a resumed one). When it stops early, for any reason but a host changed by
    someone else (a signal, SIGTERM under the host lease's SystemExit, a closed output pipe, an error), the
    original release is restored with further signals held, read back into `record.host_release`, and the record
    marked interrupted before the stop goes on up."""
    rec = ctx.record
    ctx.started = time.monotonic()
    # After the first signal every later one is held, until the restore read back what the host runs: a quick
    # second Ctrl-C cannot cut short the unwinding of the run the first one stopped (its lease's release).
    with signals.one_stop(f"the stop of tune {rec.tune_id} (its restore of the original release)",
                          quiet(ctx.say)):
        return _run_tune(ctx)


def _run_tune(ctx: TuneContext) -> Verdict:
    rec = ctx.record
    try:
        return _tune(ctx)
    except HostChanged:
        rec.elapsed_s += time.monotonic() - ctx.started
        rec.phase = "interrupted"
        rec.host_release = None
        save(rec)
        raise
    except BaseException as stop:
        rec.elapsed_s += time.monotonic() - ctx.started
        rec.phase = "interrupted"
        save(rec)
        say = quiet(ctx.say)
        what = "stopped" if isinstance(stop, DeployError) else "interrupted"
        say(f"{what}: restoring the original release (then `deploy tune --resume {rec.tune_id}` goes on)")
        with signals.finishing(f"the restore of release {rec.original_release}", say):
            restore_and_read_back(ctx, say)
        raise


def restore_and_read_back(ctx: TuneContext, say: Say) -> None:
    """The restore of an interrupted tune; whatever happens, the record ends with what the host runs."""
    rec = ctx.record
    quiet_ctx = TuneContext(ctx.host, ctx.inventory, ctx.plan, ctx.slo, rec, None, say, ctx.tofu, ctx.started)
    try:
        restore(quiet_ctx, rec.original_release)
    except DeployError as err:
        say(f"  the restore failed: {err.what}")
    if rec.power_original is not None and not rec.power_applied:
        try:
            restore_limits(quiet_ctx, say)
        except DeployError as err:
            say(f"  the restore of the power limits failed: {err.what}")
    try:
        rec.host_release = current_release(quiet_ctx)
    except DeployError as err:
        rec.host_release = None
        say(f"  could not read back what {ctx.host.name} runs: {err.what}")
    save(rec)


def quiet(say: Say) -> Say:
    """`say` that never raises: after a closed pipe or terminal the restore must still run to its end."""
    def safe(message: str) -> None:
        try:
            say(message)
        except (OSError, ValueError):
            pass
    return safe
