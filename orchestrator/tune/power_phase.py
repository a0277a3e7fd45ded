"""The power phase of a tune on the host (the pure search is tune/power.py): read the GPUs' limits, walk the
ladder from the maximum down with `deploy power`'s own step (a trial limit is set, not persisted), probe each at
the flags' SLO limit concurrency, choose, then persist the choice (--apply: the host unit records it) or put
back the limits found, whatever stopped the phase."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from orchestrator.engine.runner import run_playbook
from orchestrator.engine.state import RunInputs
from orchestrator.errors import CheckFailed
from orchestrator.hardware.power_limit import GpuPowerLimit, common_range
from orchestrator.render.power_unit import PowerSetting
from orchestrator.tune.measure import Say, TuneContext, bench_at
from orchestrator.tune.power import PowerTrial, choose_power, ladder, mean
from orchestrator.tune.record import PointRecord, PowerPointRecord, save
from orchestrator.tune.search import Measurement, probe


def set_limit(ctx: TuneContext, setting: PowerSetting | None, *, dry_run: bool = False) -> list[GpuPowerLimit]:
    """One `power` playbook run (lock, set, read back; dry: read only); the limits it read back."""
    report = run_playbook("power", ctx.host, ctx.inventory, replace(ctx.options("deploy tune (power)"),
                                                                    dry_run=dry_run),
                          inputs=RunInputs(power_limit=setting))
    return report.state.power_limits


def restore_limits(ctx: TuneContext, say: Say) -> None:
    """Put back the limits the phase found (one `-pl` per distinct value; the unit, untouched, still records the
    host's own), unless --apply persisted the chosen one."""
    rec = ctx.record
    if rec.power_original is None or rec.power_applied:
        return
    by_value: dict[float, list[int]] = defaultdict(list)
    for index, watts in enumerate(rec.power_original):
        by_value[watts].append(index)
    for watts, indices in by_value.items():
        whole = len(indices) == len(rec.power_original)
        set_limit(ctx, PowerSetting(round(watts), None if whole else tuple(indices), persist=False))
    say("power limits restored: " + ", ".join(f"{w:g} W on GPU {','.join(map(str, i))}" for w, i in by_value.items()))


def power_phase(ctx: TuneContext, concurrency: int) -> None:
    """Search the limit at `concurrency` on the release the tune ends with; the record keeps every trial."""
    rec = ctx.record
    assert rec.power_step_w is not None
    if rec.power_original is None:
        found = set_limit(ctx, None, dry_run=True)
        span = common_range(found)
        if span is None:
            rec.power_verdict = "power phase skipped: these GPUs have no common software power limit range"
            save(rec)
            return
        rec.power_original = [g.limit_w or 0.0 for g in found]
        rec.power_points = [PowerPointRecord(watts=w, concurrency=concurrency)
                            for w in ladder(span[0], span[1], rec.power_step_w)]
        save(rec)
    ctx.say(f"— power limit: {', '.join(f'{p.watts} W' for p in rec.power_points)} at concurrency {concurrency}, "
            "from the top down until the SLO breaks")
    for point in rec.power_points:
        if point.runs:  # measured by an earlier session of this tune
            if not point.holds:
                break
            continue
        set_limit(ctx, PowerSetting(point.watts, persist=False))
        shell = PointRecord(label=f"power {point.watts} W", sets=[], release=rec.final_release)

        def measure(c: int, shell: PointRecord = shell) -> Measurement:
            return bench_at(ctx, shell, c, "power").measurement()

        result = probe(ctx.slo, measure, concurrency, noise_pct=rec.noise_pct)
        point.runs = shell.runs
        point.holds, point.misses = result.met, list(result.misses)
        point.j_per_token = mean([r.j_per_token for r in point.runs])
        point.output_tok_s = mean([r.output_tok_s for r in point.runs])
        save(rec)
        j = f"{point.j_per_token:.3f} J/token" if point.j_per_token is not None else "no J/token reading"
        ctx.say(f"  {point.watts} W: {point.output_tok_s or 0:.1f} tok/s, {j}, SLO "
                + ("held" if point.holds else "missed: " + "; ".join(point.misses)))
        if not point.holds:
            break
    trials = [PowerTrial(p.watts, p.holds, p.j_per_token, p.output_tok_s) for p in rec.power_points if p.runs]
    choice = choose_power(trials, rec.noise_pct)
    rec.power_winner, rec.power_verdict = choice.watts, choice.reason
    save(rec)
    if rec.apply and choice.watts is not None:
        ctx.say(f"— applying the power limit {choice.watts} W (persisted by the host unit)")
        back = set_limit(ctx, PowerSetting(choice.watts))
        if any(g.limit_w is None or abs(g.limit_w - choice.watts) >= 0.5 for g in back):
            raise CheckFailed(f"--apply: the power limit read back is not {choice.watts} W", host=ctx.host.name)
        rec.power_applied = True
        save(rec)
    else:
        restore_limits(ctx, ctx.say)
