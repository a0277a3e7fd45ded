"""`deploy up`'s drain options through click's CliRunner: they name `up host`'s drain, so a fleet `up` given one
is refused with exit 2 before any host is reached (the seeds' inventory names hosts no test can reach)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from orchestrator.cli import cli
from tests.shared import EXAMPLE_INVENTORY


@pytest.mark.parametrize("args, named", [
    (["--no-drain"], "--no-drain is for one host"),
    (["--drain-timeout", "5"], "--drain-timeout is for one host"),
    (["--no-drain", "--drain-timeout", "5"], "--no-drain and --drain-timeout are for one host"),
])
def test_a_fleet_up_refuses_the_drain_options(args: list[str], named: str) -> None:
    res = CliRunner().invoke(cli, ["--inventory", str(EXAMPLE_INVENTORY), "up", "--all", *args])
    assert res.exit_code == 2, res.output
    assert f"{named} (`up host`): a fleet up does not drain its workers" in res.output, res.output
    assert "Traceback" not in res.output
