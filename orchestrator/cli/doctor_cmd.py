"""`deploy doctor host ADDR`: host prerequisites, each failure with its fix. Changes nothing."""

from __future__ import annotations

import click
from rich.text import Text

from orchestrator.cli.common import AppContext, common_options, resolve_host, tofu_option
from orchestrator.cli.fleet import fleet_options
from orchestrator.fleet.details import doctor_detail
from orchestrator.ui.tables import spec
from orchestrator.verdicts.host import worst_status

STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


@click.command("doctor")
@click.argument("target", nargs=-1)
@tofu_option
@common_options
@fleet_options(detail=doctor_detail)
def doctor(app: AppContext, target: tuple[str, ...], tofu: bool) -> int:
    """Check the host: driver loaded and its version, /dev/nvidia-uvm, uvm_disable_hmm, IOMMU, ACS, PVE version,
    and each GPU's hardware state (Xids in the host's kernel log, ECC, row remapping, slowdowns, PCIe links).

    One SSH round trip. Exit 0 when nothing fails (warnings allowed), 1 otherwise.
    """
    from orchestrator.runner import run_playbook
    from orchestrator.steps.base import RunOptions

    host = resolve_host(app, target)
    options = RunOptions(dry_run=True, tofu=tofu, command="deploy doctor")
    report = run_playbook("doctor", host, app.inventory, options)
    findings = report.state.doctor_findings
    status = worst_status(findings)
    hardware = report.state.hardware
    app.out.emit({"ok": status != "fail", "host": host.name, "status": status,
                  "findings": [f.to_dict() for f in findings],
                  "hardware": hardware.to_dict(host.name) if hardware is not None else None,
                  "totals": report.to_dict()["totals"]})
    rows = [(f.check, Text(f.status, style=STYLE[f.status]), f.observed, f.fix if f.status != "ok" else "")
            for f in findings]
    app.out.table(spec(f"doctor: {host.name} ({host.address})", ("check", "status", "observed", "fix"), rows))
    app.out.line(f"{status.upper()} — {report.ssh_round_trips} SSH round trip(s), {report.duration_s:.2f} s")
    return 1 if status == "fail" else 0
