"""`deploy doctor host ADDR`: host prerequisites, each failure with its fix. Changes nothing."""

from __future__ import annotations

from typing import Any

import click
from rich.text import Text

from orchestrator.cli.common import AppContext, common_options, resolve_host, tofu_option
from orchestrator.cli.fleet import fleet_options
from orchestrator.commands.doctor import DoctorResult, HostRequest, doctor_host
from orchestrator.engine.progress import StepPrinter
from orchestrator.inventory.models import Inventory
from orchestrator.ui.tables import spec

STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def doctor_on(inventory: Inventory, name: str, options: dict[str, Any], printer: StepPrinter) -> DoctorResult:
    """One host of a fleet `doctor` (its checks report no step progress, as on one host)."""
    return doctor_host(inventory, HostRequest(inventory.find_host(name), options["tofu"]))


@click.command("doctor")
@click.argument("target", nargs=-1)
@tofu_option
@common_options
@fleet_options(doctor_on)
def doctor(app: AppContext, target: tuple[str, ...], tofu: bool) -> int:
    """Check the host: driver loaded and its version, /dev/nvidia-uvm, uvm_disable_hmm, IOMMU, ACS, PVE version,
    and each GPU's hardware state (Xids in the host's kernel log, ECC, row remapping, slowdowns, PCIe links).

    One SSH round trip. Exit 0 when nothing fails (warnings allowed), 1 otherwise.
    """
    host = resolve_host(app, target)
    result = doctor_host(app.inventory, HostRequest(host, tofu))
    app.out.emit(result.payload())
    rows = [(f.check, Text(f.status, style=STYLE[f.status]), f.observed, f.fix if f.status != "ok" else "")
            for f in result.findings]
    app.out.table(spec(f"doctor: {host.name} ({host.address})", ("check", "status", "observed", "fix"), rows))
    report = result.report
    app.out.line(f"{result.status.upper()} — {report.ssh_round_trips} SSH round trip(s), {report.duration_s:.2f} s")
    return result.exit_code

