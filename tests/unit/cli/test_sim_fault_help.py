"""`deploy sim fault --help` names every GPU hardware knob the simulator has, with what it does (issue 50, item 15):
the knobs were only in simulator/config.py's docstring."""

from __future__ import annotations

import dataclasses

from click.testing import CliRunner

from orchestrator.cli import cli
from simulator.config import HostFaults

GPU_KNOBS = ("xid", "gpu_lost", "ecc", "remap", "clocks_event", "link", "recovery")


def test_fault_help_lists_every_gpu_hardware_knob_with_its_meaning() -> None:
    res = CliRunner().invoke(cli, ["sim", "fault", "--help"], terminal_width=120)
    assert res.exit_code == 0, res.output
    assert set(GPU_KNOBS) <= {f.name for f in dataclasses.fields(HostFaults)}  # the help names real knobs
    lines = {line.split("=", 1)[0].strip(): line for line in res.output.splitlines() if "=" in line}
    for knob in GPU_KNOBS:
        assert knob in lines, f"{knob} missing from deploy sim fault --help"
        assert len(lines[knob].split("=", 1)[1].split()) >= 3  # a format and what it does, not just the name
    assert "Xid 154" in res.output and "GPU is lost" in res.output
