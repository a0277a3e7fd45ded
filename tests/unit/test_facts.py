"""Typed facts: one object per fact (name, command, parser), looked up by object so a typo is a mypy error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.facts import CT, CT_FACTS, HOST, HOST_FACTS, CtFact, Facts, HostFact
from orchestrator.inventory.loader import load_inventory
from orchestrator.parsers.sections import CommandOutput
from tests.shared import EXAMPLE_INVENTORY

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def facts() -> Facts:
    inv = load_inventory(EXAMPLE_INVENTORY)
    host = inv.hosts["pve-gpu-1"]
    return Facts(None, host, inv.profile_for(host))  # type: ignore[arg-type]  # nothing is gathered here


def test_each_fact_is_named_as_its_attribute_and_names_are_unique() -> None:
    for ns, table, kind in ((HOST, HOST_FACTS, HostFact), (CT, CT_FACTS, CtFact)):
        attrs = {a: f for a, f in vars(ns).items() if isinstance(f, kind)}
        assert attrs and {a: f.name for a, f in attrs.items()} == {a: a for a in attrs}
        assert table == attrs


def test_get_parses_and_says_what_is_unknown(facts: Facts) -> None:
    facts.host = {"ct_status": CommandOutput(0, "status: running\n", "")}
    facts.ct = {"current_meta": CommandOutput(0, '{"release": "r1"}', ""),
                "current_verdict": CommandOutput(1, "", "cat: no such file\n")}
    assert facts.get(HOST.ct_status) == "running"
    assert facts.get(CT.current_meta) == {"release": "r1"}
    assert facts.get(CT.current_verdict) is None  # the file is not there
    assert facts.get(CT.active) is None  # not read: container not running
    assert facts.find(HOST.gpu_power) is None  # not read by this run
    with pytest.raises(KeyError):
        facts.get(HOST.gpu_power)  # a host fact a step reads must be named in its host_facts=


def test_a_misspelt_or_string_fact_is_a_type_error(tmp_path: Path) -> None:
    snippet = tmp_path / "typo.py"
    snippet.write_text("from orchestrator.facts import CT, HOST, Facts\n\n\n"
                       "def read(facts: Facts) -> None:\n"
                       "    facts.get(HOST.driver_verison)\n"
                       "    facts.get(\"driver_version\")\n"
                       "    meta: str = facts.get(CT.current_meta)\n")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", str(snippet)],
                          cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert 'typo.py:5: error: "type[HOST]" has no attribute "driver_verison"' in proc.stdout
    assert "typo.py:6: error: No overload variant" in proc.stdout
    assert "typo.py:7: error:" in proc.stdout


def test_create_only_facts_cost_no_program_start_once_the_ct_exists(facts: Facts) -> None:
    """The appliance index and the storage's templates matter only for a CT to create: once its config file exists
    they print nothing, and the test for that is the shell's, not a second `pct status` (a Perl program)."""
    h, p = facts.host_cfg, facts.profile
    for fact in (HOST.aplinfo, HOST.templates):
        assert fact.command(h, p).startswith("test -e /etc/pve/lxc/120.conf || pvesh get /nodes/pve-gpu-1/")
    assert [f.name for f in HOST_FACTS.values() if "pct " in f.command(h, p)] == ["ct_status"]
