"""Fleet progress without a terminal (issue 25, item 13): one line per host event with its step, status and
seconds; skipped steps counted, not listed; the router's converge (and its install) says when it starts and ends."""

from __future__ import annotations

import io
import re
from contextlib import nullcontext
from typing import Any

import pytest
from rich.console import Console

from orchestrator.commands.result import RunResult
from orchestrator.engine.runner import RunReport
from orchestrator.errors import RemoteError
from orchestrator.fleet.engine import HostEvents, HostOutcome, run_fleet
from orchestrator.fleet.outcome import Refused, host_outcome
from orchestrator.fleet.progress import EventPrinter
from orchestrator.fleet.view import FleetView
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import RouterSpec
from orchestrator.router import converge
from orchestrator.router.facts import RouterFacts
from orchestrator.router.places import SiteAddresses
from orchestrator.runlog import StepRecord
from tests.shared import EXAMPLE_INVENTORY

STEPS = [("connect", "ok", 0.4), ("host_prereqs", "skipped", 0.0), ("container", "changed", 3.25),
         ("weights", "skipped", 0.0), ("server", "ok", 1.5)]


def job(host: str, events: HostEvents) -> HostOutcome:
    records: list[StepRecord] = []
    printer = EventPrinter(events, records)
    for name, status, seconds in STEPS:
        printer(name, None)
        printer(name, StepRecord(name, status=status, duration_s=seconds))  # type: ignore[arg-type]
    return host_outcome(host, RunResult(RunReport(host, "up", dry_run=False, steps=list(records))), records)


def plain_run(hosts: list[str]) -> list[str]:
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=False, color_system=None, highlight=False)
    view = FleetView(console, hosts, enabled=True, tty=False)
    with view:
        run_fleet(hosts, job, parallel=2, on_event=view, on_tick=view.tick, tick_s=0.01)
    return buf.getvalue().splitlines()


def test_plain_progress_is_one_line_per_step_with_status_and_seconds() -> None:
    lines = plain_run(["gpu-1", "gpu-2"])
    mine = [ln for ln in lines if ln.startswith("gpu-1: ")]
    assert mine[0] == "gpu-1: started"
    assert re.fullmatch(r"gpu-1: connect ok \(0\.4 s; \d+\.\d s elapsed\)", mine[1])
    assert re.fullmatch(r"gpu-1: container changed \(3\.2 s; \d+\.\d s elapsed\)", mine[2]) \
        or re.fullmatch(r"gpu-1: container changed \(3\.3 s; \d+\.\d s elapsed\)", mine[2])
    assert re.fullmatch(r"gpu-1: server ok \(1\.5 s; \d+\.\d s elapsed\)", mine[3])
    assert re.fullmatch(r"gpu-1: changed, 1 changed, 2 step\(s\) skipped \(\d+\.\d s\)", mine[4])
    assert len(mine) == 5  # no line per skipped step, no bare step names
    assert not any("host_prereqs" in ln or "weights" in ln for ln in lines)
    assert len([ln for ln in lines if ln.startswith("gpu-2: ")]) == 5


def failing_job(host: str, events: HostEvents) -> HostOutcome:
    """A host whose second step raises: the runner reports no end for that step, only the host's failure."""
    records: list[StepRecord] = []
    printer = EventPrinter(events, records)
    printer("connect", None)
    printer("connect", StepRecord("connect", status="ok", duration_s=0.1))  # type: ignore[arg-type]
    printer("host_prereqs", None)
    err = RemoteError("/dev/nvidia-uvm is missing", host=host, step="host_prereqs")
    return host_outcome(host, Refused(err), records)


def test_plain_progress_names_the_step_that_failed() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=False, color_system=None, highlight=False)
    view = FleetView(console, ["gpu-1"], enabled=True, tty=False)
    with view:
        run_fleet(["gpu-1"], failing_job, parallel=1, on_event=view, on_tick=view.tick, tick_s=0.01)
    lines = buf.getvalue().splitlines()
    assert re.fullmatch(r"gpu-1: host_prereqs failed \(\d+\.\d s elapsed\)", lines[2]), lines
    assert lines[3].startswith("gpu-1: failed"), lines


def test_plain_progress_prints_nothing_with_json() -> None:
    buf = io.StringIO()
    view = FleetView(Console(file=buf, force_terminal=False), ["gpu-1"], enabled=False, tty=False)
    run_fleet(["gpu-1"], job, parallel=1, on_event=view, tick_s=0.01)
    assert buf.getvalue() == ""


def test_router_converge_says_when_it_starts_when_the_install_starts_and_ends_and_when_it_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import orchestrator.remote.ssh as ssh

    inv = load_inventory(EXAMPLE_INVENTORY)
    inv = inv.model_copy(update={"router": RouterSpec(runs_on="pve-gpu-1", package="sglang-router")})
    reads: list[int] = []

    def read_facts(ct: Any, spec: Any, argv: list[str]) -> RouterFacts:
        reads.append(1)
        if len(reads) > 1:  # after the install: stop here, the lines so far are what this test is about
            raise RemoteError("facts unreadable", fix="-")
        return RouterFacts(probe='{"version": null}', file_sha={}, active="inactive")

    monkeypatch.setattr(ssh, "SshHost", lambda *a, **k: nullcontext(object()))
    monkeypatch.setattr(converge, "router_api_key", lambda _inv: None)
    monkeypatch.setattr(converge, "learn_fleet", lambda _inv, tofu: SiteAddresses({("pve-gpu-1", 120): "10.9.0.5"}))
    monkeypatch.setattr(converge, "_read_facts", read_facts)
    monkeypatch.setattr(converge, "_install", lambda ct, spec, script: None)
    said: list[str] = []
    report = converge.converge_router(inv, ["pve-gpu-1"], ["pve-gpu-1"], say=said.append)
    assert report is not None and report.exit_code == 3
    assert said[0].startswith("converging the router on ") and said[0].endswith("(1 healthy worker(s))")
    assert said[1] == "install sglang-router==0.3.2 in /opt/sglang-router (found none)"
    assert re.fullmatch(r"installed sglang-router==0\.3\.2 in \d+\.\d s", said[2])
    assert re.fullmatch(r"failed in \d+\.\d s", said[3]) and len(said) == 4
