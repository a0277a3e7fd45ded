"""`deploy bench`, `deploy smoke`, `deploy compare`, and the ledger view behind `deploy history --bench`."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from orchestrator.bench.run import BenchRun
from orchestrator.cli.common import AppContext, common_options, parse_target, resolve_host, tofu_option
from orchestrator.cli.run import command_line, run_with_progress
from orchestrator.errors import ConfigError
from orchestrator.reports.sweep import (
    SweepPoint,
    SweepResult,
    TableData,
    bench_summary_table,
    gpu_table,
    sweep_table,
    write_sweep_report,
)
from orchestrator.state.ledger import Ledger
from orchestrator.steps.base import RunOptions
from orchestrator.steps.state import RollRequest, RunInputs


def rich_table(data: TableData, title: str) -> Table:
    table = Table(title=title)
    for h in data.headers:
        table.add_column(h)
    for row in data.rows:
        table.add_row(*row)
    return table


def _parse_kv(items: tuple[str, ...], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{what} {item!r} must be KEY=VALUE")
        out[key.strip().lstrip("-")] = value.strip()
    return out


def _sweep_values(spec: str) -> tuple[str, list[str]]:
    key, sep, values = spec.partition("=")
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not key.strip() or len(vals) < 2:
        raise ConfigError(f"--sweep {spec!r} must be KEY=V1,V2[,...] with at least two values",
                          fix="e.g. --sweep max-concurrency=256,512,1024,2048")
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
    (d / "result.json").write_text(json.dumps(run.to_dict(), indent=2, default=str))
    (d / "bench.jsonl").write_text(run.jsonl)
    return str(d)


def _report_sweep(app: AppContext, host: str, preset: str, parameter: str, values: list[str], runs: list[Any],
                  out_dir: Path) -> dict[str, Any]:
    points = []
    for value, run in zip(values, runs, strict=True):
        rdir = _save_point(out_dir, f"{parameter}={value}", run)
        points.append(SweepPoint(value=_numeric(value), bench=run.result, telemetry=run.telemetry,
                                 diagnosis=tuple(run.diagnosis), result_dir=rdir, run_id=run.run_id))
    result = SweepResult(parameter=parameter, points=tuple(points), host=host, preset=preset)
    png, html = write_sweep_report(result, out_dir)
    table = sweep_table(points)
    app.out.print(rich_table(table, f"sweep over {parameter} on {host} ({preset})"))
    app.out.line(f"plot: {png}\nreport: {html}")
    return {"parameter": parameter, "png": str(png), "html": str(html), "dir": str(out_dir),
            "points": [{"value": v, **r.to_dict()} for v, r in zip(values, runs, strict=True)]}


def _print_run(app: AppContext, run: Any) -> None:
    app.out.print(rich_table(bench_summary_table(run.result, run.telemetry), f"bench {run.preset} ({run.run_id})"))
    if run.telemetry is not None:
        app.out.print(rich_table(gpu_table(run.telemetry), "GPU telemetry over the bench window"))
    for d in run.diagnosis:
        app.out.line(f"  [{d.severity}] {d.message}")


@click.command("bench")
@click.argument("target", nargs=-1)
@click.option("--preset", default=None, help="Bench preset from the inventory (default: the profile's).")
@click.option("--set", "sets", multiple=True, metavar="FLAG=VALUE", help="Override a bench_serving flag.")
@click.option("--sweep", default=None, metavar="FLAG=V1,V2,…",
              help="Sweep a bench flag (e.g. max-concurrency=256,512,1024,2048).")
@click.option("--sweep-server", default=None, metavar="FLAG=V1,V2,…",
              help="Sweep a SERVER flag: each point is rolled with the roll machinery.")
@click.option("--keep-best", is_flag=True, help="After --sweep-server keep the best point instead of rolling back.")
@click.option("--out", "out_dir", default=None, help="Result directory (default ./deploy-results/HOST/TIME-PARAM).")
@click.option("--host", "import_host", default=None, help="With `bench import FILE`: the host to file it under.")
@tofu_option
@common_options
def bench(app: AppContext, target: tuple[str, ...], preset: str | None, sets: tuple[str, ...], sweep: str | None,
          sweep_server: str | None, keep_best: bool, out_dir: str | None, import_host: str | None,
          tofu: bool) -> int:
    """Run bench_serving in the container with GPU telemetry, a diagnosis and a ledger entry.

    `deploy bench host X [--preset P] [--set max-concurrency=512] [--sweep max-concurrency=256,512,1024]`;
    `deploy bench import FILE.jsonl --host NAME` records a JSONL produced elsewhere.
    """
    if target and target[0] == "import":
        if len(target) != 2 or not import_host:
            raise ConfigError("usage: deploy bench import FILE --host NAME")
        recs = Ledger().import_jsonl(target[1], host=import_host, preset=preset)
        app.out.emit({"ok": True, "imported": [r.model_dump(mode="json") for r in recs]})
        app.out.line(f"imported {len(recs)} run(s): {', '.join(r.id for r in recs)}")
        return 0
    if sweep and sweep_server:
        raise ConfigError("give --sweep or --sweep-server, not both")
    host = resolve_host(app, target)
    profile = app.inventory.profile_for(host)
    preset_name = preset or profile.bench_preset
    app.inventory.preset(preset_name)
    overrides = _parse_kv(sets, "--set")
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
    report = run_with_progress(app, target, "bench", options, RunInputs(bench_points=tuple(points)))
    runs = report.state.bench_runs
    payload: dict[str, Any] = {"ok": True, "host": host.name, "release": report.state.server.release,
                               "runs": [r.to_dict() for r in runs], "totals": report.to_dict()["totals"]}
    if sweep:
        out = Path(out_dir or f"deploy-results/{host.name}/{stamp}-{parameter}")
        payload["sweep"] = _report_sweep(app, host.name, preset_name, parameter, values, runs, out)
    else:
        for run in runs:
            _print_run(app, run)
            if out_dir:
                payload.setdefault("saved", []).append(_save_point(Path(out_dir), run.run_id, run))
                app.out.line(f"saved {out_dir}/{run.run_id}/result.json and bench.jsonl")
    app.out.emit(payload)
    return 0


def _server_sweep(app: AppContext, target: tuple[str, ...], host: str, preset: str, spec: str, keep_best: bool,
                  out_dir: str | None, stamp: str, tofu: bool) -> int:
    """Roll each server flag value (gate accepts regressions), bench it, then restore (or keep the best)."""
    parameter, values = _sweep_values(spec)
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
    best = max(range(len(runs)), key=lambda i: runs[i].result.output_throughput)
    final = releases[best] if keep_best else original
    if final:
        run_with_progress(app, target, "rollback", RunOptions(tofu=tofu, command=command_line()),
                          RunInputs(rollback_to=final))
    out = Path(out_dir or f"deploy-results/{host}/{stamp}-{parameter}")
    payload = {"ok": True, "host": host, "sweep": _report_sweep(app, host, preset, parameter, values, runs, out),
               "best": {"value": values[best], "release": releases[best]}, "final_release": final}
    app.out.line(f"best: {parameter}={values[best]} ({runs[best].result.output_throughput:.1f} tok/s); "
                 f"current release now {final}")
    app.out.emit(payload)
    return 0


@click.command("smoke")
@click.argument("target", nargs=-1)
@tofu_option
@common_options
def smoke(app: AppContext, target: tuple[str, ...], tofu: bool) -> int:
    """A real chat completion with a checked answer and /v1/models; prints the latency."""
    report = run_with_progress(app, target, "smoke", RunOptions(tofu=tofu, command="deploy smoke"), quiet=True)
    rec = report.steps[-1]
    app.out.emit({"ok": True, "host": report.host, **rec.details, "totals": report.to_dict()["totals"]})
    app.out.line(f"smoke ok on {report.host}: {rec.summary}; models {rec.details.get('models')}")
    return 0


def print_ledger_runs(app: AppContext, target: tuple[str, ...], limit: int) -> int:
    name = parse_target(target, required=False)
    host = app.inventory.find_host(name).name if name else None
    runs = Ledger().list_runs(host=host, limit=limit)
    app.out.emit({"ok": True, "runs": [r.model_dump(mode="json") for r in runs]})
    table = Table(title="bench runs (local ledger)")
    for col in ("run", "host", "source", "preset", "release", "out tok/s", "TPOT ms", "conc.", "W/GPU", "tok/J"):
        table.add_column(col)
    for r in runs:
        b, t = r.bench, r.telemetry
        per_gpu = None
        if t is not None and t.gpus:
            vals = [g.mean_power_w for g in t.gpus if g.mean_power_w is not None]
            per_gpu = sum(vals) / len(vals) if vals else None
        table.add_row(r.id, r.host, r.source, r.preset or "-", r.release_id or "-",
                      f"{b.output_throughput:.1f}" if b else "-",
                      f"{b.mean_tpot_ms:.2f}" if b and b.mean_tpot_ms is not None else "-",
                      f"{b.concurrency:.0f}" if b and b.concurrency is not None else "-",
                      f"{per_gpu:.0f}" if per_gpu is not None else "-",
                      f"{t.output_tokens_per_j:.2f}" if t and t.output_tokens_per_j is not None else "-")
    app.out.print(table)
    return 0


@click.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--threshold", type=float, default=5.0, show_default=True, help="Noise threshold in %%.")
@common_options
def compare(app: AppContext, run_a: str, run_b: str, threshold: float) -> int:
    """Two ledger runs side by side with deltas and the noise threshold."""
    rows = Ledger().compare(run_a, run_b, noise_pct=threshold)
    app.out.emit({"ok": True, "a": run_a, "b": run_b, "threshold_pct": threshold,
                  "rows": [r.model_dump(mode="json") for r in rows]})
    table = Table(title=f"{run_a} → {run_b} (noise ±{threshold:g} %)")
    for col in ("metric", "A", "B", "delta %", ""):
        table.add_column(col)
    for r in rows:
        mark = "" if not r.beyond_noise else ("[green]better[/]" if r.better else "[red]worse[/]")
        table.add_row(r.metric, f"{r.a:.2f}" if r.a is not None else "-", f"{r.b:.2f}" if r.b is not None else "-",
                      f"{r.delta_pct:+.1f}" if r.delta_pct is not None else "-", mark)
    app.out.print(table)
    return 0
