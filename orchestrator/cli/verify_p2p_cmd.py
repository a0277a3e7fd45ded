"""`deploy verify-p2p [host ADDR] [--bandwidth]` live, or offline from saved nvidia-smi output files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from orchestrator.cli.common import AppContext, common_options, existing_file, resolve_host, tofu_option
from orchestrator.cli.fleet import fleet_options
from orchestrator.commands.p2p import P2PRequest, P2PResult, p2p_host
from orchestrator.engine.progress import StepPrinter
from orchestrator.errors import ConfigError
from orchestrator.inventory.models import Inventory
from orchestrator.p2p.parse import parse_p2p
from orchestrator.p2p.verdict import P2PVerdict, p2p_verdict
from orchestrator.parsers import ParseError
from orchestrator.parsers.topo import TopoMatrix, parse_topo
from orchestrator.ui.output import Output
from orchestrator.ui.tables import Cell, Column, TableSpec, spec

VERDICT_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}
PAIR_STYLE = {"pass": "green", "warn": "yellow", "fail": "red"}


def matrix_table(topo: TopoMatrix, verdict: P2PVerdict, title: str) -> TableSpec:
    """GPU × GPU: the link type and, where measured, read/write P2P status, coloured by the pair verdict."""
    pairs = {frozenset((p.a, p.b)): p for p in verdict.pairs}
    rows: list[tuple[Cell, ...]] = []
    for a in topo.gpus:
        row: list[Cell] = [a]
        for b in topo.gpus:
            if a == b:
                row.append(Text("X", style="dim"))
                continue
            pv = pairs.get(frozenset((a, b)))
            link = topo.link(a, b)
            if pv is None:
                row.append(Text(link, style="dim"))
                continue
            p2p = "/".join(s.value for s in (pv.read, pv.write) if s is not None)
            row.append(Text(f"{link}{' ' + p2p if p2p else ''}", style=PAIR_STYLE.get(pv.status, "")))
        rows.append(tuple(row))
    return spec(title, ["", *(Column(g, "center") for g in topo.gpus)], rows)


BANDWIDTH_STYLE = {"ok": "green", "slow": "bold red", "no-peer": "bold red", "unchecked": "dim"}


def bandwidth_matrix(bw: Mapping[str, Any]) -> tuple[TableSpec, list[str]]:
    """The copy probe's verdict as a source × destination matrix of GB/s, and the lines under it: the summary,
    the threshold with what each link is expected to give, and every failing pair. Pure: `bw` is the
    p2p_bandwidth step's result (the `bandwidth` of `--json`)."""
    pairs = list(bw.get("pairs") or [])
    gpus = sorted({int(p["src"]) for p in pairs} | {int(p["dst"]) for p in pairs})
    by_pair = {(int(p["src"]), int(p["dst"])): p for p in pairs}
    rows: list[tuple[Cell, ...]] = []
    for a in gpus:
        row: list[Cell] = [f"GPU{a}"]
        for b in gpus:
            p = by_pair.get((a, b))
            if a == b or p is None:
                row.append(Text("X" if a == b else "-", style="dim"))
            else:
                mark = "" if p["status"] == "ok" else f" {p['status']}"
                row.append(Text(f"{p['gbps']:.1f}{mark}", style=BANDWIDTH_STYLE.get(p["status"], "")))
        rows.append(tuple(row))
    table = spec("GPU-to-GPU copy GB/s (row: from, column: to)",
                 ["", *(Column(f"GPU{g}", "right") for g in gpus)], rows)
    expected: dict[float, list[str]] = {}
    for p in pairs:
        if p.get("expected_gbps") and p.get("link") and p["link"] not in expected.get(p["expected_gbps"], []):
            expected.setdefault(p["expected_gbps"], []).append(p["link"])
    over = ", ".join(f"~{gbps:.0f} GB/s over {'/'.join(sorted(links))}" for gbps, links in sorted(expected.items()))
    lines = [str(bw.get("summary", "")),
             f"threshold: a pair below {float(bw.get('min_fraction', 0.5)) * 100:.0f} % of its link's expected "
             f"bandwidth is slow" + (f" (expected {over})" if over else "")]
    lines += [f"  - {p['message']}" for p in pairs if p["status"] in ("slow", "no-peer")]
    links = bw.get("links")
    if isinstance(links, Mapping):
        lines.append(str(links.get("summary", "")))
    return table, lines


def print_verdict(out: Output, topo: TopoMatrix, verdict: P2PVerdict, title: str) -> None:
    out.table(matrix_table(topo, verdict, title))
    style = VERDICT_STYLE.get(verdict.status, "")
    out.print(f"verdict: [{style}]{verdict.status.upper()}[/] (P2P {verdict.p2p}, {len(verdict.gpus)} GPUs)")
    for reason in verdict.reasons:
        out.line(f"  - {reason}")
    for fix in verdict.fixes:
        out.line(f"  fix: {fix}")


def _read(path: Path | None) -> str | None:
    return path.read_text() if path is not None else None


def offline(app: AppContext, topo_file: str, read_file: str | None, write_file: str | None) -> int:
    try:
        topo = parse_topo(_read(existing_file(topo_file, "--topo-file")) or "")
        read = parse_p2p(_read(existing_file(read_file, "--p2p-read-file")) or "", "read") if read_file else None
        write = parse_p2p(_read(existing_file(write_file, "--p2p-write-file")) or "", "write") if write_file else None
    except ParseError as exc:
        raise ConfigError(f"cannot parse the saved output: {exc}",
                          fix="save `nvidia-smi topo -m` and `nvidia-smi topo -p2p r|w` output as is") from exc
    verdict = p2p_verdict(topo, read, write)
    app.out.emit({"ok": verdict.ok, "source": "files", "verdict": verdict.to_dict(), "topology": topo.to_dict()})
    print_verdict(app.out, topo, verdict, f"P2P from {Path(topo_file).name}")
    return 0 if verdict.ok else 1


def live(app: AppContext, target: tuple[str, ...], bandwidth: bool, size_mib: int, tofu: bool) -> int:
    host = resolve_host(app, target)
    result = p2p_host(app.inventory, P2PRequest(host, bandwidth, size_mib, tofu))
    p2p, bw, report = result.p2p, result.bandwidth, result.report
    app.out.emit(result.payload())
    primary = p2p.container if p2p.container.topo is not None else p2p.host
    assert primary.topo is not None
    print_verdict(app.out, primary.topo, result.verdict, f"P2P in CT {host.container.vmid} on {host.name}"
                  if primary is p2p.container else f"P2P on host {host.name} (container not running)")
    if p2p.comparison is not None:
        app.out.line("container topology " + ("matches the host's" if p2p.comparison.same
                                              else "DIFFERS from the host's: " + p2p.comparison.describe()))
    if bw is not None:
        table, lines = bandwidth_matrix(bw)
        app.out.table(table)
        for line in lines:
            app.out.line(line)
    else:
        app.out.line("PCIe links: not judged (no load; idle links downshift): --bandwidth samples them under the "
                     "copy matrix")
    app.out.line(f"{report.ssh_round_trips} SSH round trip(s), {report.duration_s:.2f} s")
    return result.exit_code


def offline_sources(target: tuple[str, ...], topo_file: str | None, read_file: str | None,
                    write_file: str | None) -> bool:
    """Whether the command reads saved files (offline) instead of a host; refuses a mix of both."""
    if topo_file:
        if target:
            raise ConfigError("give either a host or --topo-file, not both")
        return True
    if read_file or write_file:
        raise ConfigError("--p2p-read-file/--p2p-write-file need --topo-file")
    return False


def verify_p2p_on(inventory: Inventory, name: str, options: dict[str, Any], printer: StepPrinter) -> P2PResult:
    """One host of a fleet `verify-p2p` (the live form; its run reports no step progress, as on one host)."""
    offline_sources(("host", name), options["topo_file"], options["p2p_read_file"], options["p2p_write_file"])
    return p2p_host(inventory, P2PRequest(inventory.find_host(name), options["bandwidth"], options["size_mib"],
                                          options["tofu"]))


@click.command("verify-p2p")
@click.argument("target", nargs=-1)
@click.option("--topo-file", default=None, help="Saved `nvidia-smi topo -m` output (offline mode).")
@click.option("--p2p-read-file", default=None, help="Saved `nvidia-smi topo -p2p r` output.")
@click.option("--p2p-write-file", default=None, help="Saved `nvidia-smi topo -p2p w` output.")
@click.option("--bandwidth", is_flag=True, help="Also run a GPU-to-GPU copy matrix in the container (torch).")
@click.option("--size-mib", default=256, show_default=True, help="Copy size per pair for --bandwidth.")
@tofu_option
@common_options
@fleet_options(verify_p2p_on)
def verify_p2p(app: AppContext, target: tuple[str, ...], topo_file: str | None, p2p_read_file: str | None,
               p2p_write_file: str | None, bandwidth: bool, size_mib: int, tofu: bool) -> int:
    """Topology and P2P status as a matrix with a verdict. Exit 0 pass/warn, 1 fail.

    Live: `deploy verify-p2p host 10.1.230.174` reads the container and the host in one SSH round trip.
    Offline: `deploy verify-p2p --topo-file topo.txt --p2p-read-file r.txt --p2p-write-file w.txt`.
    """
    if offline_sources(target, topo_file, p2p_read_file, p2p_write_file):
        assert topo_file is not None
        return offline(app, topo_file, p2p_read_file, p2p_write_file)
    return live(app, target, bandwidth, size_mib, tofu)


__all__ = ["verify_p2p"]
