"""`deploy bench`, `deploy smoke`, `deploy compare`, and the ledger view behind `deploy history --bench`."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from orchestrator.bench.repeat import repeat_stats, repeat_table
from orchestrator.bench.report import (
    SweepPoint,
    SweepResult,
    TableData,
    bench_summary_table,
    gpu_table,
    sweep_table,
    write_sweep_report,
)
from orchestrator.bench.run import BenchRun
from orchestrator.bench.stats import median_index
from orchestrator.cli.bench_import import imported_run_json, imported_run_line
from orchestrator.cli.common import (
    AppContext,
    all_inventories_option,
    common_options,
    parse_target,
    resolve_host,
    tofu_option,
)
from orchestrator.cli.presets import BenchCommand
from orchestrator.cli.run import command_line, run_with_progress
from orchestrator.commands.history import BenchRuns, LedgerScope, bench_runs, host_bench_runs
from orchestrator.engine.state import RollRequest, RunInputs
from orchestrator.engine.step import RunOptions
from orchestrator.errors import ConfigError
from orchestrator.flags import FlagSchema, refuse_secret_dimension
from orchestrator.fleet.targets import TargetSpec, parse_targets, resolve_targets
from orchestrator.ledger.compare import comparability, flag_changes, header_lines
from orchestrator.ledger.sqlite import RunRecord
from orchestrator.local.files import write_file
from orchestrator.redact import redact, redact_text
from orchestrator.store.store import ledger as store_ledger
from orchestrator.ui.tables import Column, TableSpec, spec

if TYPE_CHECKING:  # the fleet bench loads paramiko only when it runs
    from orchestrator.fleet.bench import FleetBenchPoint


def table_spec(data: TableData, title: str) -> TableSpec:
    return spec(title, data.headers, data.rows)


def _parse_kv(items: tuple[str, ...], what: str) -> dict[str, str]:
    """`--set K=V` of bench_serving's parameters; a secret-named K is refused (flags/flagset.py's one rule)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if key.strip():
            refuse_secret_dimension(what, key)  # before the value is echoed in any message
        if not sep or not key.strip():
            raise ConfigError(f"{what} {item!r} must be KEY=VALUE")
        out[key.strip().lstrip("-")] = value.strip()
    return out


def _sweep_values(spec: str, option: str = "--sweep", schema: FlagSchema | None = None,
                  marked: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """`KEY=V1,V2,…` of --sweep (bench parameters) or --sweep-server (server flags: `schema` and the profile's
    secret_flags mark secrets too); a secret KEY is refused, as tune's --over is (flags/flagset.py)."""
    key, sep, values = spec.partition("=")
    if key.strip():
        refuse_secret_dimension(option, key, schema, marked)
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not key.strip() or len(vals) < 2:
        raise ConfigError(f"{option} {spec!r} must be KEY=V1,V2[,...] with at least two values",
                          fix=f"e.g. {option} max-concurrency=256,512,1024,2048" if option == "--sweep" else
                          f"e.g. {option} max-running-requests=64,128")
    return key.strip().lstrip("-"), vals


def _numeric(v: str) -> float | int | str:
    try:
        f = float(v)
    except ValueError:
        return v
    return int(f) if f.is_integer() else f


def _save_point(out_dir: Path, name: str, run: Any) -> str:
    d = out_dir / name
    d.mkdir(parents=True, exist_ok=True)
    # Reports leave the machine more often than anything else: the same redaction as --json.
    write_file(d / "result.json", json.dumps(redact(json.loads(json.dumps(run.to_dict(), default=str))), indent=2))
    write_file(d / "bench.jsonl", redact_text(run.jsonl))
    return str(d)


def _report_sweep(app: AppContext, host: str, preset: str, parameter: str, values: list[str], runs: list[Any],
                  out_dir: Path, *, release: str | None = None, overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    points = []
    for value, run in zip(values, runs, strict=True):
        rdir = _save_point(out_dir, f"{parameter}={value}", run)
        points.append(SweepPoint(value=_numeric(value), bench=run.result, telemetry=run.telemetry,
                                 diagnosis=tuple(run.diagnosis), result_dir=rdir, run_id=run.run_id))
    started = min((r.started_at for r in runs), default=None)
    result = SweepResult(parameter=parameter, points=tuple(points), host=host, preset=preset, release=release,
                         started_at=started.isoformat(timespec="seconds") if started else None, overrides=overrides)
    png, html = write_sweep_report(result, out_dir)
    table = sweep_table(points)
    app.out.table(table_spec(table, result.title().replace("Sweep", "sweep", 1)))
    for point in points:  # the diagnosis belongs on the terminal too, not only in the HTML
        for d in point.diagnosis:
            app.out.line(f"  {parameter}={point.value}: [{d.severity}] {d.message}")
    app.out.line(f"plot: {png}\nreport: {html}")
    return {"parameter": parameter, "png": str(png), "html": str(html), "dir": str(out_dir),
            "points": [{"value": v, **r.to_dict()} for v, r in zip(values, runs, strict=True)]}


def failed_runs(labels: list[str], runs: list[BenchRun]) -> dict[str, Any]:
    """The payload keys and the exit of a command whose runs include failed benches (orchestrator/bench/failures.py):
    {} when every run counts, else `what`/`fix` and `exit_code` 1, so a bench that lost its requests never exits 0."""
    failed = [f"{label} (run {run.run_id}): {run.failure}" for label, run in zip(labels, runs, strict=True)
              if run.failure]
    if not failed:
        return {}
    return {"ok": False, "exit_code": 1, "what": f"{len(failed)} of {len(runs)} bench run(s) failed: "
            + "; ".join(failed),
            "fix": "read the server journal (`journalctl -u sglang` in the container) and `deploy status`: a server "
                   "that drops requests under this load is the finding; a preset whose failures are expected sets "
                   "max_failed_fraction (docs/bench.md, Failed requests)"}


def _say_failed(app: AppContext, verdict: dict[str, Any]) -> int:
    if verdict:
        app.out.line(f"FAILED: {verdict['what']}\n  fix: {verdict['fix']}")
    return int(verdict.get("exit_code", 0))


def _print_run(app: AppContext, run: Any) -> None:
    app.out.table(table_spec(bench_summary_table(run.result, run.telemetry), f"bench {run.preset} ({run.run_id})"))
    if run.telemetry is not None:
        app.out.table(table_spec(gpu_table(run.telemetry), "GPU telemetry over the bench window"))
        if run.telemetry.energy is not None:
            app.out.line(energy_line(run.telemetry.energy))
    for d in run.diagnosis:
        if not d.code.startswith("profile-"):  # the profile's verdict is printed below, with its breakdown
            app.out.line(f"  [{d.severity}] {d.message}")
    if run.profile is not None:
        _print_profile(app, run.profile)


def energy_line(e: Any) -> str:
    """The validated energy in one line: the figures and whether the samples covered the window."""
    def f(v: float | None, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    verdict = "valid" if e.valid else "INVALID: " + "; ".join(e.problems)
    return (f"  energy {e.total_energy_j / 1000:.2f} kJ over {e.window_s:.1f} s ({verdict}): "
            f"{f(e.j_per_output_token, '.3f')} J/output token, {f(e.j_per_total_token, '.3f')} J/total token, "
            f"{f(e.output_tok_s_per_gpu, '.1f')} output tok/s per GPU, {f(e.output_tok_s_per_user, '.1f')} per user")


def _print_profile(app: AppContext, outcome: Any) -> None:
    from orchestrator.cli.profile_cmd import print_breakdown

    if outcome.breakdown is None or outcome.verdict is None:
        app.out.line(f"  [warn] no step-time breakdown: {outcome.problem}")
        return
    print_breakdown(app, outcome.breakdown, outcome.verdict)
    if outcome.since is not None:
        app.out.line(f"  since the roll: {outcome.since.line()}")
    if outcome.problem:
        app.out.line(f"  [warn] {outcome.problem}")


@click.command("bench", cls=BenchCommand)
@click.argument("target", nargs=-1)
@click.option("--preset", default=None, help="Bench preset from the inventory (default: the profile's).")
@click.option("--set", "sets", multiple=True, metavar="FLAG=VALUE", help="Override a bench_serving flag.")
@click.option("--sweep", default=None, metavar="FLAG=V1,V2,…",
              help="Sweep a bench flag (e.g. max-concurrency=256,512,1024,2048).")
@click.option("--sweep-server", default=None, metavar="FLAG=V1,V2,…",
              help="Sweep a SERVER flag: each point is rolled with the roll machinery.")
@click.option("--repeat", type=click.IntRange(1, 20), default=1, show_default=True,
              help="Run each point N times: mean, 95 % confidence interval and spread.")
@click.option("--keep-best", is_flag=True, help="After --sweep-server keep the best point instead of rolling back.")
@click.option("--out", "out_dir", default=None, help="Result directory (default ./deploy-results/HOST/TIME-PARAM).")
@click.option("--host", "import_host", default=None, help="With `bench import FILE`: the host to file it under.")
@click.option("--profile", "profile_steps", type=click.IntRange(1, 64), default=None, metavar="STEPS",
              help="Profile STEPS decode steps on every rank during each run: step-time breakdown and verdict "
                   "(docs/bench-diagnosis.md).")
@tofu_option
@common_options
def bench(app: AppContext, target: tuple[str, ...], preset: str | None, sets: tuple[str, ...], sweep: str | None,
          sweep_server: str | None, repeat: int, keep_best: bool, out_dir: str | None, import_host: str | None,
          profile_steps: int | None, tofu: bool) -> int:
    """Run bench_serving in the container with GPU telemetry, a diagnosis and a ledger entry.

    `deploy bench host X [--preset P] [--set max-concurrency=512] [--sweep max-concurrency=256,512,1024]`;
    `deploy bench import FILE --host NAME` records a run made elsewhere: bench_serving's --output-file JSONL or
    its printed `Serving Benchmark Result` block saved from a terminal.
    """
    if target and target[0] == "import":
        if len(target) != 2 or not import_host:
            raise ConfigError("usage: deploy bench import FILE --host NAME")
        recs = store_ledger().import_jsonl(target[1], host=import_host, preset=preset)
        app.out.emit({"ok": True, "imported": [imported_run_json(r) for r in recs]})
        app.out.line(f"imported {len(recs)} run(s) from {target[1]}:")
        for r in recs:
            app.out.line(f"  {r.id}: {imported_run_line(r)}")
        return 0
    if sweep and sweep_server:
        raise ConfigError("give --sweep or --sweep-server, not both")
    if profile_steps and (sweep_server or (target and parse_targets(target).fleet)):
        raise ConfigError("--profile takes one host's bench (or its --sweep, --repeat)",
                          fix="profile one host: deploy bench host NAME --profile 8")
    if repeat > 1 and (sweep_server or (target and parse_targets(target).fleet)):
        raise ConfigError("--repeat takes one host's bench or --sweep",
                          fix="deploy tune measures server flags with repeats (docs/tune.md)")
    targets = parse_targets(target)
    if targets.fleet:
        if sweep_server or keep_best:
            raise ConfigError("--sweep-server rolls one host; a fleet bench takes --sweep (bench flags) only",
                              fix="roll the fleet (deploy roll) and bench it, or sweep one host")
        return fleet_bench(app, targets, preset, sets, sweep, tofu)
    host = resolve_host(app, target)
    profile = app.inventory.profile_for(host)
    preset_name = preset or profile.bench_preset
    app.inventory.preset(preset_name)
    overrides = _parse_kv(sets, "--set")
    if sweep_server:  # checked here, where the profile is known: its schema and secret_flags mark secrets too
        _sweep_values(sweep_server, "--sweep-server", FlagSchema.load(profile.sglang_version),
                      tuple(profile.secret_flags))
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
    if sweep_server:
        return _server_sweep(app, target, host.name, preset_name, sweep_server, keep_best, out_dir, stamp, tofu)
    points = [overrides]
    parameter, values = "", list[str]()
    if sweep:
        parameter, values = _sweep_values(sweep)
        points = [{**overrides, parameter: v} for v in values]
    # Validate every override before touching the host.
    from orchestrator.bench.command import bench_argv

    for pt in points:
        bench_argv(app.inventory.preset(preset_name), profile, "/tmp/x.jsonl", pt)
    options = RunOptions(preset=preset_name, tofu=tofu, command=command_line())
    repeated = tuple(pt for pt in points for _ in range(repeat))
    report = run_with_progress(app, target, "bench", options, RunInputs(bench_points=repeated,
                                                                         profile_steps=profile_steps))
    all_runs = report.state.bench_runs
    groups = [all_runs[i:i + repeat] for i in range(0, len(all_runs), repeat)]
    # Each point is told by its median run (tables, sweep report); the repeats' statistics stand beside it.
    runs = [g[median_index([r.result.output_throughput for r in g])] for g in groups]
    payload: dict[str, Any] = {"ok": True, "host": host.name, "release": report.state.server.release,
                               "runs": [r.to_dict() for r in all_runs], "totals": report.to_dict()["totals"]}
    if repeat > 1:
        labels = [", ".join(f"{k}={v}" for k, v in pt.items()) or preset_name for pt in points]
        stats = [repeat_stats(g) for g in groups]
        payload["repeat"] = [{"point": label, "runs": [r.run_id for r in g], **st.to_dict()}
                             for label, g, st in zip(labels, groups, stats, strict=True)]
        app.out.table(repeat_table(labels, stats, f"{repeat} runs per point on {host.name} ({preset_name})"))
    if sweep:
        out = Path(out_dir or f"deploy-results/{host.name}/{stamp}-{parameter}")
        payload["sweep"] = _report_sweep(app, host.name, preset_name, parameter, values, runs, out,
                                         release=report.state.server.release,
                                         overrides=tuple(f"{k}={v}" for k, v in overrides.items()))
    else:
        for run in (runs if repeat > 1 else all_runs):
            _print_run(app, run)
            if out_dir:
                payload.setdefault("saved", []).append(_save_point(Path(out_dir), run.run_id, run))
                app.out.line(f"saved {out_dir}/{run.run_id}/result.json and bench.jsonl")
    if runs:
        app.out.line(f"recorded in the local ledger: `deploy history --bench` lists the runs; "
                     f"`deploy compare {runs[0].run_id} OTHER_RUN` compares two runs of the same preset")
    labels = [", ".join(f"{k}={v}" for k, v in r.overrides.items()) or preset_name for r in all_runs]
    verdict = failed_runs(labels, all_runs)
    payload.update({k: v for k, v in verdict.items() if k != "exit_code"})
    app.out.emit(payload)
    return _say_failed(app, verdict)


def _share_row(label: str, tokens: int | None, tok_s: float | None, watts: float | None, per_w: float | None,
               j_tok: float | None) -> tuple[str, ...]:
    def f(v: float | int | None, fmt: str) -> str:
        return format(v, fmt) if v is not None else "-"

    return (label, f(tokens, "d"), f(tok_s, ".1f"), f(watts, ".0f"), f(per_w, ".3f"), f(j_tok, ".3f"))


FLEET_HEADERS: list[str | Column] = ["host", Column("out tokens", "right"), Column("out tok/s", "right"),
                                     Column("GPU W", "right"), Column("tok/s per W", "right"),
                                     Column("J/token", "right")]


def _router_line(point: FleetBenchPoint) -> str:
    """smg's own view of a fleet bench point in one line ("" behind sglang-router, which exports none)."""
    w = point.router_window
    if w is None:
        return f"  router: {point.router_note}" if point.router_note else ""
    sent = ", ".join(f"{s.host} {s.router_requests if s.router_requests is not None else '?'}" for s in point.shares)
    errors = (", ".join(f"{k or 'unlabelled'} {v}" for k, v in w.errors.items()) if w.errors else "none")
    states = sorted({s.circuit for s in point.shares if s.circuit})
    circuit = ("circuit breakers " + "/".join(states)) if states else "no circuit-breaker series"
    opened = [s.host for s in point.shares if s.circuit not in (None, "closed")]
    line = (f"  router (smg): requests sent per worker {sent}; request errors {errors}; {circuit}"
            + (f" (not closed: {', '.join(opened)})" if opened else ""))
    if point.router_unlisted:
        line += "; sent to URLs that are no inventory worker: " + ", ".join(
            f"{u} {n}" for u, n in point.router_unlisted.items())
    return line


def fleet_bench(app: AppContext, targets: TargetSpec, preset: str | None, sets: tuple[str, ...],
                sweep: str | None, tofu: bool) -> int:
    """`deploy bench group G`: through the router, every host's GPUs sampled at once (orchestrator/bench/fleet.py)."""
    from orchestrator.bench.command import bench_argv
    from orchestrator.fleet.bench import bench_client_host, run_fleet_bench

    overrides = _parse_kv(sets, "--set")  # the command line first: it needs no inventory
    points, parameter, values = [overrides], "", list[str]()
    if sweep:
        parameter, values = _sweep_values(sweep)
        points = [{**overrides, parameter: v} for v in values]
    inventory = app.inventory
    hosts = resolve_targets(inventory, targets)
    profile = inventory.profile_for(bench_client_host(inventory))
    preset_name = preset or profile.bench_preset
    inventory.preset(preset_name)
    for pt in points:  # every override checked before any host is touched
        bench_argv(inventory.preset(preset_name), profile, "/tmp/x.jsonl", pt)
    say = (lambda _m: None) if app.as_json else app.out.line
    results = run_fleet_bench(inventory, hosts, preset_name, points, tofu=tofu, say=say)
    for point in results:
        title = (f"bench {point.run.preset}"
                 + (" " + ", ".join(f"{k}={v}" for k, v in point.run.overrides.items()) if point.run.overrides else "")
                 + f" through the router {point.router_url} (client {point.client}, {point.run.run_id})")
        rows = [_share_row(s.host, s.output_tokens, s.output_tok_s, s.mean_power_w, s.tok_s_per_w, s.j_per_token)
                for s in point.shares]
        rows.append(_share_row("total", point.run.result.total_output_tokens, point.output_tok_s,
                               point.mean_power_w, point.tok_s_per_w, point.j_per_token))
        app.out.table(spec(title, FLEET_HEADERS, rows))
        r = point.run.result
        app.out.line(f"  {r.completed} requests completed, {r.failed or 0} failed; per-host shares from each "
                     f"server's generation-token counter ({point.attributed_tokens} of {r.total_output_tokens} "
                     "tokens attributed)")
        for s in point.shares:
            if s.error:
                app.out.line(f"  {s.host}: {s.error}")
        router_line = _router_line(point)
        if router_line:
            app.out.line(router_line)
    payload: dict[str, Any] = {"ok": True, "targets": targets.describe(), "client": bench_client_host(inventory).name,
                               "preset": preset_name, "points": [p.to_dict() for p in results]}
    verdict = failed_runs([", ".join(f"{k}={v}" for k, v in p.run.overrides.items()) or preset_name
                           for p in results], [p.run for p in results])
    payload.update({k: v for k, v in verdict.items() if k != "exit_code"})
    if sweep:
        rows = [(v, *_share_row("", p.run.result.total_output_tokens, p.output_tok_s, p.mean_power_w,
                                p.tok_s_per_w, p.j_per_token)[1:]) for v, p in zip(values, results, strict=True)]
        app.out.table(spec(f"fleet sweep over {parameter} ({len(hosts)} hosts, through the router)",
                           [parameter, *FLEET_HEADERS[1:]], rows))
        payload["sweep"] = {"parameter": parameter, "values": values}
    app.out.emit(payload)
    return _say_failed(app, verdict)


def _server_sweep(app: AppContext, target: tuple[str, ...], host: str, preset: str, spec: str, keep_best: bool,
                  out_dir: str | None, stamp: str, tofu: bool) -> int:
    """Roll each server flag value (gate accepts regressions), bench it, then restore (or keep the best)."""
    parameter, values = _sweep_values(spec, "--sweep-server")
    status = run_with_progress(app, target, "status", RunOptions(tofu=tofu, command="deploy status"), quiet=True)
    original = status.state.status.release if status.state.status is not None else None
    runs: list[BenchRun] = []
    releases: list[str | None] = []
    for value in values:
        app.out.line(f"— {parameter}={value}")
        request = RollRequest(set=(f"{parameter}={value}",), accept_regression=True)
        run: BenchRun | None
        try:
            rep = run_with_progress(app, target, "roll", RunOptions(preset=preset, tofu=tofu,
                                                                    command=command_line()), RunInputs(roll=request))
            run, rid = rep.state.bench_run, rep.state.server.release
        except ConfigError as exc:
            if "equals the current release" not in exc.what:
                raise
            rep = run_with_progress(app, target, "bench", RunOptions(preset=preset, tofu=tofu,
                                                                     command=command_line()))
            run, rid = rep.state.bench_runs[0], rep.state.server.release
        if run is None:
            raise ConfigError(f"the roll of {parameter}={value} ran no bench", fix="do not combine with --skip-bench")
        runs.append(run)
        releases.append(rid)
    counted = [i for i, r in enumerate(runs) if not r.failure] or list(range(len(runs)))  # a failed bench never wins
    best = max(counted, key=lambda i: runs[i].result.output_throughput)
    final = releases[best] if keep_best else original
    if final:
        run_with_progress(app, target, "rollback", RunOptions(tofu=tofu, command=command_line()),
                          RunInputs(rollback_to=final))
    out = Path(out_dir or f"deploy-results/{host}/{stamp}-{parameter}")
    swept = _report_sweep(app, host, preset, parameter, values, runs, out,
                          release=f"one per point, then {final or original}")
    verdict = failed_runs([f"{parameter}={v}" for v in values], runs)
    payload = {"ok": True, "host": host, "sweep": swept,
               "best": {"value": values[best], "release": releases[best]}, "final_release": final,
               **{k: v for k, v in verdict.items() if k != "exit_code"}}
    app.out.line(f"best: {parameter}={values[best]} ({runs[best].result.output_throughput:.1f} tok/s); "
                 f"current release now {final}")
    app.out.emit(payload)
    return _say_failed(app, verdict)


@click.command("smoke")
@click.argument("target", nargs=-1)
@tofu_option
@common_options
def smoke(app: AppContext, target: tuple[str, ...], tofu: bool) -> int:
    """A real chat completion with a checked answer and /v1/models; prints the latency."""
    report = run_with_progress(app, target, "smoke", RunOptions(tofu=tofu, command="deploy smoke"), quiet=True)
    rec, seen = report.steps[-1], report.state.smoke
    app.out.emit({"ok": True, "host": report.host, **(seen.to_dict() if seen is not None else {}),
                  "totals": report.to_dict()["totals"]})
    app.out.line(f"smoke ok on {report.host}: {rec.summary}; models {seen.models if seen is not None else None}")
    return 0


def ledger_scope(app: AppContext, all_inventories: bool, *, required: bool = True) -> LedgerScope:
    """The inventory's hosts (or every host with --all-inventories). Without `required`, an inventory that
    cannot be read means no scope: full run ids need no inventory."""
    if all_inventories:
        return LedgerScope(None, "every host")
    try:
        hosts = tuple(sorted(app.inventory.hosts))
    except ConfigError as err:
        if not required:
            return LedgerScope(None, "every host (no inventory could be read)")
        raise ConfigError(err.what, fix=f"{err.fix}; or pass --all-inventories to list every run in the ledger"
                          ) from None
    return LedgerScope(hosts, f"{', '.join(hosts) or 'no host'} (the hosts of inventory {app.inventory_paths})")


def _ledger_host(app: AppContext, name: str, all_inventories: bool) -> str:
    """A host named on the command line: the inventory's name for it; with --all-inventories any ledger host."""
    try:
        return app.inventory.find_host(name).name
    except ConfigError:
        if all_inventories:
            return name
        raise


def _per_gpu_w(r: RunRecord) -> float | None:
    t = r.telemetry
    vals = [g.mean_power_w for g in t.gpus if g.mean_power_w is not None] if t is not None else []
    return sum(vals) / len(vals) if vals else None


def ledger_table(runs: list[RunRecord], title: str) -> TableSpec:
    rows: list[tuple[str, ...]] = []
    for r in runs:
        b, t, per_gpu = r.bench, r.telemetry, _per_gpu_w(r)
        source = f"{r.source} {r.label}" if r.source == "sweep" and r.label else r.source
        rows.append((r.id, r.host, source, r.preset or "-", r.release_id or "-",
                     f"{b.output_throughput:.1f}" if b else "-",
                     f"{b.mean_tpot_ms:.2f}" if b and b.mean_tpot_ms is not None else "-",
                     f"{b.concurrency:.0f}" if b and b.concurrency is not None else "-",
                     f"{per_gpu:.0f}" if per_gpu is not None else "-",
                     f"{t.output_tokens_per_j:.2f}" if t and t.output_tokens_per_j is not None else "-"))
    numbers = ("out tok/s", "TPOT ms", "conc.", "W/GPU", "tok/J")
    headers: list[str | Column] = ["run", "host", "source", "preset", "release"]
    headers += [Column(h, "right") for h in numbers]
    if any(r.by for r in runs):  # a team store's runs name who recorded them (docs/team.md)
        headers.append("by")
        rows = [(*row, r.by or "-") for row, r in zip(rows, runs, strict=True)]
    return spec(title, headers, rows)


def ledger_runs(app: AppContext, target: tuple[str, ...], limit: int, all_inventories: bool = False) -> BenchRuns:
    """One host's runs, the inventory's hosts' runs, or (--all-inventories) all."""
    ledger = store_ledger()
    name = parse_target(target, required=False)
    if name:
        return host_bench_runs(ledger, _ledger_host(app, name, all_inventories), limit)
    return bench_runs(ledger, ledger_scope(app, all_inventories), limit)


def print_ledger_runs(app: AppContext, target: tuple[str, ...], limit: int, all_inventories: bool = False) -> int:
    """`deploy history --bench`."""
    listing = ledger_runs(app, target, limit, all_inventories)
    whose, runs, hidden = listing.scope.whose, listing.runs, listing.hidden
    app.out.emit(listing.payload())
    app.out.table(ledger_table(runs, f"bench runs of {whose}, newest first (ledger {listing.ledger})"))
    if not runs:
        app.out.line(f"no bench runs of {whose} yet: `deploy bench` records one")
    if hidden:
        app.out.line(f"{sum(hidden.values())} run(s) of {len(hidden)} other host(s) not shown "
                     f"({', '.join(sorted(hidden))}): `deploy history --bench --all-inventories` lists them")
    return 0


@click.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--threshold", type=float, default=5.0, show_default=True, help="Noise threshold in %.")
@click.option("--force", is_flag=True,
              help="Show the deltas even when the runs ran different benchmarks (presets, token lengths).")
@all_inventories_option
@common_options
def compare(app: AppContext, run_a: str, run_b: str, threshold: float, force: bool, all_inventories: bool) -> int:
    """Two ledger runs side by side with deltas and the noise threshold.

    Runs of different presets (or token lengths) are refused, exit 2: their deltas measure the benchmark, not
    the server. `--force` shows them anyway under a warning. Other hosts, other GPUs or a different load are
    shown with a warning. A run id prefix is looked up among the inventory's hosts (all with --all-inventories).
    """
    ledger = store_ledger()
    scope = ledger_scope(app, all_inventories, required=False)
    a, b = ledger.get_run(run_a, scope.hosts), ledger.get_run(run_b, scope.hosts)
    check = comparability(a, b)
    if not check.comparable and not force:
        raise ConfigError(f"will not compare {a.id} with {b.id}: {'; '.join(check.refusals)}; their deltas "
                          "would measure the benchmarks, not the server",
                          fix="compare two runs of the same preset (`deploy history --bench` shows each run's "
                              "preset), or pass --force to see the deltas anyway")
    problems = [*check.refusals, *check.warnings]
    rows = ledger.compare(a, b, noise_pct=threshold)
    app.out.emit({"ok": True, "a": a.id, "b": b.id, "threshold_pct": threshold, "comparable": check.comparable,
                  "warning": "; ".join(problems) or None, "warnings": problems,
                  "runs": {k: {"host": r.host, "preset": r.preset, "release_id": r.release_id, "flags": r.flags}
                           for k, r in (("a", a), ("b", b))},
                  "flag_changes": flag_changes(a.flags, b.flags) if a.flags and b.flags else None,
                  "rows": [r.model_dump(mode="json") for r in rows]})
    if not check.comparable:
        app.out.print(Text("WARNING: NOT THE SAME BENCHMARK (--force): " + "; ".join(check.refusals)
                           + ". The deltas below measure the benchmarks, not the server.", style="bold red"))
    for w in check.warnings:
        app.out.print(Text(f"warning: {w}", style="yellow"))
    for line in header_lines(a, b):
        app.out.line(line)
    marks = {True: Text("better", style="green"), False: Text("worse", style="red")}
    table_rows = [(r.metric, f"{r.a:.2f}" if r.a is not None else "-", f"{r.b:.2f}" if r.b is not None else "-",
                   f"{r.delta_pct:+.1f}" if r.delta_pct is not None else "-",
                   marks[r.better] if r.beyond_noise and r.better is not None else "") for r in rows]
    headers: list[str | Column] = ["metric", Column("A", "right"), Column("B", "right"), Column("delta %", "right"), ""]
    app.out.table(spec(f"{a.id} ({a.preset or 'no preset'}, {a.host}) → {b.id} ({b.preset or 'no preset'}, "
                       f"{b.host}); noise ±{threshold:g} %", headers, table_rows))
    if not check.comparable:
        app.out.print(Text("(forced comparison of different benchmarks: read no verdict into these deltas)",
                           style="bold red"))
    return 0
