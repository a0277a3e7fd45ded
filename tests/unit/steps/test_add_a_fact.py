"""docs/development.md "… a fact", run: its worked example's fact (`CT.model_free`, with its pure parser), the step
that names it and that step's in-process tests are the doc's own code blocks, taken from the page and executed here
("Worked example: a step that checks the disk before a download", blocks 1, 2 and 4), so the page cannot drift.

Checked through the real machinery: the parser against the example's fixtures (tests/fixtures/worked_examples/,
in tests/facts/'s form, checked by the same function as every shipped fact's), the fact's command run by this
machine's shell and df and parsed, its registration (the step's declaration puts it in the playbook's one facts
round trip, the batch carries its command) and the doc's step tests on the fake node."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.step import StepContext, step
from orchestrator.errors import CheckFailed
from orchestrator.facts import CT, CT_FACTS, CtFact
from orchestrator.facts.base import q
from orchestrator.inventory.loader import load_inventory
from orchestrator.remote.batch import CommandOutput
from orchestrator.runlog import StepRecord
from orchestrator.steps import REGISTRY, load_all_steps
from orchestrator.steps.session import ensure_facts, playbook_facts, unknown_until_started
from tests.shared import EXAMPLE_INVENTORY, FIXTURES, doc_examples
from tests.unit.test_fact_fixtures import check_fixture

SECTION = "Worked example: a step that checks the disk before a download"
CASES = FIXTURES / "worked_examples" / "CT.model_free"


@pytest.fixture
def example() -> Iterator[dict[str, Any]]:
    """The doc's fact added to CT (and so to the facts by name), its step declared; both gone afterwards."""
    fact_block, step_block, tests_block = doc_examples(SECTION)
    ns: dict[str, Any] = {"CtFact": CtFact, "q": q}
    exec(fact_block, ns)  # the page's own code is what is under test
    fact = ns["CT"].model_free
    load_all_steps()
    before = dict(REGISTRY)
    CT.model_free = fact  # type: ignore[attr-defined]
    CT_FACTS["model_free"] = fact
    ns.update(CT=CT, step=step, StepContext=StepContext, StepRecord=StepRecord, ensure_facts=ensure_facts,
              unknown_until_started=unknown_until_started, CheckFailed=CheckFailed)
    try:
        exec(step_block, ns)
        exec(tests_block, ns)
        yield ns
    finally:
        del CT.model_free  # type: ignore[attr-defined]
        del CT_FACTS["model_free"]
        REGISTRY.clear()
        REGISTRY.update(before)


def test_the_parser_and_the_fact_against_their_fixtures(example: dict[str, Any]) -> None:
    fact = example["CT"].model_free
    assert isinstance(fact, CtFact) and fact.name == "model_free"
    cases = sorted(CASES.glob("*.json"))
    assert [p.stem for p in cases] == ["free", "no-df"]
    for path in cases:
        check_fixture(fact, path)
    assert example["parse_free_bytes"](" 412000000000\n") == 412000000000
    assert example["parse_free_bytes"]("Avail\n") is None


def test_the_command_runs_in_a_shell_and_parses(example: dict[str, Any], tmp_path: Path) -> None:
    """The command climbs to the nearest directory that exists (the weights' directory does not yet) and df's
    answer there parses to bytes; a path with a space and a quote is quoted."""
    inv = load_inventory(EXAMPLE_INVENTORY)
    host = inv.hosts["pve-gpu-1"]
    profile = inv.profile_for(host).model_copy(update={"model_path": str(tmp_path / "it's new" / "GLM")})
    fact = example["CT"].model_free
    proc = subprocess.run(["sh", "-c", fact.command(host, profile)], capture_output=True, text=True, timeout=30,
                          check=False)
    free = fact.parse(CommandOutput(proc.returncode, proc.stdout, proc.stderr))
    assert isinstance(free, int) and free > 0, (proc.returncode, proc.stdout, proc.stderr)


def test_naming_the_fact_on_a_step_registers_it_in_the_one_round_trip(example: dict[str, Any],
                                                                      make_run: Any) -> None:
    fact = example["CT"].model_free
    assert REGISTRY["weights_disk"].ct_facts == (CT.weights, fact)
    _host, ct_facts = playbook_facts(["model_weights", "weights_disk"], stopping=False)
    assert fact in ct_facts and CT.weights in ct_facts
    run = make_run({}, {})
    run.ctx.facts.gathered = False
    run.ctx.playbook_steps = ["weights_disk"]
    ensure_facts(run.ctx)
    (batch,) = run.node.commands("batch")
    assert "df -B1 --output=avail" in batch  # the fact's command rides in the facts round trip


def test_the_doc_step_tests_pass(example: dict[str, Any], make_run: Any) -> None:
    tests = [name for name in example if name.startswith("test_")]
    assert tests == ["test_too_little_space_stops_before_the_download", "test_present_weights_need_no_space"]
    for name in tests:
        example[name](make_run)
