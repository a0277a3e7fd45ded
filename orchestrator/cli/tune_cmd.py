"""`deploy tune`: the best server flags under a latency SLO (docs/tune.md). Parses and refuses here; the tune
itself is orchestrator/tune/driver.py, its report orchestrator/reports/tune.py."""

from __future__ import annotations

import itertools
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.common import AppContext, common_options, resolve_host, tofu_option
from orchestrator.commands.rotation import out_of_rotation, routes_to
from orchestrator.errors import ConfigError, HungUp, Interrupted, Terminated
from orchestrator.flags.schema import FlagSchema
from orchestrator.inventory.models import Host
from orchestrator.locks.claims import claim_fleet
from orchestrator.tune.driver import TuneContext, ranked, run_tune
from orchestrator.tune.plan import TunePlan, make_plan
from orchestrator.tune.power import parse_power_step
from orchestrator.tune.record import CURRENT, PointRecord, TuneRecord, load, new_tune_id, save
from orchestrator.tune.report import tune_table, write_tune_report
from orchestrator.tune.search import choose
from orchestrator.tune.slo import parse_slo
from orchestrator.ui.tables import Column, spec

DEFAULT_RANGE = "8:256:8"
DEFAULT_CONFIRM = 2
DEFAULT_NOISE_PCT = 5.0


def _new_record(host: str, preset: str, slo: str, over: tuple[str, ...], range_text: str, budget: str | None,
                apply: bool, confirm: int, noise_pct: float, plan: TunePlan) -> TuneRecord:
    points = [PointRecord(label=CURRENT, sets=[])]
    points += [PointRecord(label=p.label, sets=list(p.sets)) for p in plan.points]
    return TuneRecord(tune_id=new_tune_id(), host=host, preset=preset, slo=slo, over=list(over), range=range_text,
                      budget=budget, apply=apply, confirm=confirm, noise_pct=noise_pct,
                      started_at=datetime.now().isoformat(timespec="seconds"), points=points)


def power_lines(record: TuneRecord) -> list[str]:
    """The power phase under the verdict: each limit tried, then the choice and what the host keeps."""
    if record.power_step_w is None:
        return []
    lines = [f"power {p.watts} W at c={p.concurrency}: {p.output_tok_s or 0:.1f} tok/s, "
             + (f"{p.j_per_token:.3f} J/token" if p.j_per_token is not None else "no J/token")
             + (", SLO held" if p.holds else f", SLO missed ({'; '.join(p.misses)})")
             for p in record.power_points if p.runs]
    lines.append(f"power verdict: {record.power_verdict or 'not run'}")
    if record.power_applied:
        lines.append(f"power limit now {record.power_winner} W, kept by deploy-gpu-power.service")
    elif record.power_original is not None:
        lines.append("power limits restored to " + " / ".join(f"{w:g} W" for w in sorted(set(record.power_original)))
                     + " (--apply persists the chosen one)")
    return lines


def _step(plan: TunePlan) -> int:
    g = plan.grid
    return max((b - a for a, b in itertools.pairwise(g)), default=0)


@click.command("tune")
@click.argument("target", nargs=-1)
@click.option("--slo", default=None, metavar='"ttft_p99<=2s,tpot_p99<=80ms"', help="Latency bounds to meet.")
@click.option("--over", multiple=True, metavar="FLAG=V1,V2,…", help="A server flag's values (repeatable).")
@click.option("--range", "range_text", default=None, metavar="LO:HI[:STEP]",
              help=f"The concurrency grid searched per point (default {DEFAULT_RANGE}).")
@click.option("--preset", default=None, help="Bench preset (default: the profile's).")
@click.option("--budget", default=None, metavar="30m", help="Time budget; points not started by then are skipped.")
@click.option("--confirm", type=click.IntRange(1, 10), default=None,
              help=f"Extra runs at each point's SLO limit, for its goodput's confidence interval [default: "
                   f"{DEFAULT_CONFIRM}].")
@click.option("--noise", "noise_pct", type=click.FloatRange(0, 50), default=None,
              help=f"Noise band in %: a figure this close to a bound is measured again [default: "
                   f"{DEFAULT_NOISE_PCT:g}].")
@click.option("--apply", "apply", is_flag=True, help="Roll the winner as a normal release (all gates).")
@click.option("--power-step", "power_step", default=None, metavar="WATTS",
              help="Then search the GPUs' power limit, from their maximum down this many watts apart, for the "
                   "lowest J/token holding the SLO (--apply persists it).")
@click.option("--resume", default=None, metavar="TUNE_ID", help="Go on with an interrupted tune.")
@click.option("--out", "out_dir", default=None, help="Report directory (default ./deploy-results/HOST/TUNE_ID).")
@click.option("--drain-timeout", type=float, default=120.0, show_default=True,
              help="A router worker: seconds to wait for its in-flight requests once out of the router.")
@click.option("--no-drain", is_flag=True,
              help="A router worker: tune it in place, in the router (its clients see every restart).")
@tofu_option
@common_options
def tune(app: AppContext, target: tuple[str, ...], slo: str | None, over: tuple[str, ...], range_text: str | None,
         preset: str | None, budget: str | None, confirm: int | None, noise_pct: float | None, apply: bool,
         resume: str | None, out_dir: str | None, drain_timeout: float, no_drain: bool, tofu: bool,
         power_step: str | None) -> int:
    """Find the server flags with the best goodput under a latency SLO, and optionally roll them.

    `deploy tune host X --slo "ttft_p99<=2s,tpot_p99<=80ms" --over num-continuous-decode-steps=4,8
    --over max-running-requests=64,128 [--range 8:256:8] [--preset P] [--budget 30m] [--apply]`.
    Each flag point is rolled (every gate of a roll), then its SLO limit is bracketed (at most
    ceil(log2(grid)) + 2 bench runs) and confirmed. Without --apply the original release is restored.
    A router worker is drained from the router for the whole tune and added back at its end (--no-drain: not).
    """
    host = resolve_host(app, target)
    if resume:
        given = [name for name, value in (("--slo", slo), ("--over", over), ("--range", range_text),
                                          ("--budget", budget), ("--apply", apply), ("--preset", preset),
                                          ("--confirm", confirm is not None), ("--noise", noise_pct is not None),
                                          ("--power-step", power_step))
                 if value]
        if given:
            raise ConfigError(f"--resume takes the tune's own settings (its record fixes them); {', '.join(given)} "
                              "would be ignored", fix=f"deploy tune host {host.name} --resume {resume} (or start a "
                                                      "new tune with the new settings)")
        record = load(resume)
        if record.host != host.name:
            raise ConfigError(f"tune {resume} ran on {record.host}, not {host.name}",
                              fix=f"deploy tune host {record.host} --resume {resume}")
        if record.phase == "done":
            raise ConfigError(f"tune {resume} is finished", fix="start a new tune")
    else:
        if not slo:
            raise ConfigError("deploy tune needs --slo", fix='e.g. --slo "ttft_p99<=2s,tpot_p99<=80ms"')
        profile = app.inventory.profile_for(host)
        preset_name = preset or profile.bench_preset
        app.inventory.preset(preset_name)
        parse_slo(slo)
        parse_power_step(power_step)
        make_plan(over, range_text or DEFAULT_RANGE, budget, FlagSchema.load(profile.sglang_version),
                  profile.secret_flags, power_only=power_step is not None)
        record = None
    # Everything above refused bad input; only now is anything written or any host touched.
    profile = app.inventory.profile_for(host)
    if record is None:
        assert slo is not None
        plan = make_plan(over, range_text or DEFAULT_RANGE, budget, FlagSchema.load(profile.sglang_version),
                         profile.secret_flags, power_only=power_step is not None)
        record = _new_record(host.name, preset or profile.bench_preset, parse_slo(slo).text(), over,
                             range_text or DEFAULT_RANGE, budget, apply,
                             DEFAULT_CONFIRM if confirm is None else confirm,
                             DEFAULT_NOISE_PCT if noise_pct is None else noise_pct, plan)
        record.power_step_w = parse_power_step(power_step)
    plan = make_plan(tuple(record.over), record.range, record.budget, FlagSchema.load(profile.sglang_version),
                     profile.secret_flags, power_only=record.power_step_w is not None)
    # The tune owns its host from here to its end, restore included: a roll, an up, a bench or a second session
    # of this tune on this machine is refused (locks/claims.py) instead of meeting the host between two runs. A
    # router worker is drained for the tune, so the router is claimed too (no fleet command re-adds it meanwhile).
    drain = not no_drain and routes_to(app.inventory, host.name)
    with claim_fleet([host.name], f"deploy tune {record.tune_id}", router=drain):
        if resume:
            record = load(record.tune_id)  # re-read under the claim: the session that held it may have moved on
            if record.phase == "done":
                raise ConfigError(f"tune {record.tune_id} is finished", fix="start a new tune")
        record.phase = "running"
        if not drain:
            return _run(app, host, record, plan, out_dir, tofu)
        tuned = record
        with out_of_rotation(app.inventory, host.name, say=app.out.line, drain_timeout_s=drain_timeout, http=app.http,
                             back_ok=lambda: tuned.host_release is not None
                             and tuned.host_release == tuned.original_release):
            return _run(app, host, record, plan, out_dir, tofu)


def _run(app: AppContext, host: Host, record: TuneRecord, plan: TunePlan, out_dir: str | None, tofu: bool) -> int:
    save(record)
    app.out.line(f"tune {record.tune_id} on {host.name}: {len(record.points)} points (the current flags and "
                 f"{len(plan.points)} rolled), concurrency {record.range} ({len(plan.grid)} values, at most "
                 f"{plan.max_runs_per_point} search runs a point), SLO {record.slo}")
    printer = app.step_printer()
    ctx = TuneContext(host, app.inventory, plan, parse_slo(record.slo), record, printer, printer.say, tofu=tofu)
    try:
        run_tune(ctx)
    except (KeyboardInterrupt, SystemExit, BrokenPipeError) as stop:
        raise stopped(host.name, record, stop) from None
    finally:
        printer.close()
    return _report(app, record, plan, out_dir)


def stopped(host: str, record: TuneRecord, stop: BaseException) -> Interrupted:
    """The error of a tune that a signal or a closed output stopped, saying what the host was read back running
    after the restore: "restored" only when it was."""
    cls: type[Interrupted]
    if output_closed(stop):
        cls, how = HungUp, "stopped (its output was closed)"
    elif type(stop).__name__ == "_SigHup" or (isinstance(stop, SystemExit) and stop.code == 129):
        cls, how = HungUp, "stopped (SIGHUP)"
    elif type(stop).__name__ == "_SigTerm" or isinstance(stop, SystemExit):  # run_command's, or the lease's SIGTERM
        cls, how = Terminated, "terminated"
    else:
        cls, how = Interrupted, "interrupted"
    original, now = record.original_release, record.host_release
    if now is not None and now == original:
        state = f"the original release {original} was restored (read back from the host)"
    elif now is not None:
        state = (f"the restore of the original release {original} did not finish: {host} runs release {now}, "
                 f"a trial of this tune")
    else:
        state = f"what {host} runs could not be read back after the restore of release {original}"
    return cls(f"tune {record.tune_id} {how}; {state}",
               fix=f"deploy tune host {host} --resume {record.tune_id} (it restores the original first, then goes "
                   "on)" + ("" if now == original else f"; or put the original back: deploy rollback host {host} "
                                                        f"--to {original}"))


def output_closed(stop: BaseException) -> bool:
    """A write to a closed stdout (`deploy tune … | head -2`): Python's BrokenPipeError, or the SystemExit(1) that
    rich raises in its place (Console.on_broken_pipe, which also points stdout at /dev/null so that the restore's
    lines and the exit's flush land nowhere). Not a SIGTERM's SystemExit: that one is 143, and not "terminated"."""
    return isinstance(stop, BrokenPipeError) or (isinstance(stop, SystemExit)
                                                 and isinstance(stop.__context__, BrokenPipeError))


def _report(app: AppContext, record: TuneRecord, plan: TunePlan, out_dir: str | None) -> int:
    verdict = choose(ranked(record), CURRENT)
    out = Path(out_dir or f"deploy-results/{record.host}/{record.tune_id}")
    lines = [f"verdict: {record.verdict}"]
    if verdict.best and verdict.margin_pct is not None and verdict.best != CURRENT:
        lines.append(f"best point {verdict.best}: {verdict.margin_pct:+.1f} % goodput over the current flags")
    if verdict.indistinguishable:
        lines.append(f"not distinguishable from {verdict.best} (95 % intervals overlap): "
                     + ", ".join(verdict.indistinguishable))
    lines.append(f"release now {record.final_release} (was {record.original_release})")
    lines += power_lines(record)
    png, page = write_tune_report(record, out, _step(plan), lines)
    table = tune_table(record, _step(plan))
    headers: list[str | Column] = [table.headers[0], table.headers[1], *(Column(h, "right") for h in
                                                                         table.headers[2:8]), table.headers[8]]
    app.out.table(spec(f"tune {record.tune_id} on {record.host} ({record.preset}), SLO {record.slo}", headers,
                       list(table.rows)))
    for line in lines:
        app.out.line(line)
    app.out.line(f"plot: {png}\nreport: {page}")
    payload: dict[str, Any] = {
        "ok": True, "tune_id": record.tune_id, "host": record.host, "preset": record.preset, "slo": record.slo,
        "over": record.over, "grid": list(plan.grid), "max_search_runs_per_point": plan.max_runs_per_point,
        "points": [p.model_dump(mode="json") for p in record.points], "winner": record.winner,
        "best": verdict.best, "margin_pct": verdict.margin_pct, "indistinguishable": list(verdict.indistinguishable),
        "verdict": record.verdict, "original_release": record.original_release,
        "final_release": record.final_release, "changed": record.final_release != record.original_release,
        "power": {"step_w": record.power_step_w, "original_w": record.power_original,
                  "points": [p.model_dump(mode="json") for p in record.power_points], "winner_w": record.power_winner,
                  "verdict": record.power_verdict, "applied": record.power_applied}
        if record.power_step_w is not None else None,
        "report": {"png": str(png), "html": str(page)}}
    app.out.emit(payload)
    return 0
