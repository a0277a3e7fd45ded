"""Every fact against its fixtures (pyinfra's model): tests/facts/<NS.fact>/<case>.json holds the fact's command for
the example inventory's host, an output (real captures where there are, `source` says which) and the value the
fact's parser must make of it (or the error it must raise). A fact without a fixture fails here, and so does a
fixture of no fact. The typed reads outside the batch (`READ.<name>`: orchestrator/facts/reads.py's `READS`, the
router's `ROUTER_READS`) have fixtures the same way, without a command (theirs depend on the run). Regenerating a
fixture is a decision: check its value by eye, it is the specification."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from orchestrator.facts import CT_FACTS, HOST_FACTS
from orchestrator.facts.base import Fact, RouterFact
from orchestrator.facts.reads import READS
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import RouterSpec
from orchestrator.remote.batch import CommandOutput
from orchestrator.router.facts import ROUTER_FACTS, ROUTER_READS
from tests.shared import EXAMPLE_INVENTORY

FIXTURES = Path(__file__).resolve().parents[1] / "facts"
#: The router the router facts' commands are rendered for, and the argv its probe checks.
ROUTER_SPEC = RouterSpec(runs_on="pve-gpu-1", package="sglang-router")
ROUTER_ARGV = ("--policy", "random")


def namespaces() -> dict[str, Fact[Any] | RouterFact[Any]]:
    """Every fact by its fixture folder: HOST.name, CT.name, ROUTER.name."""
    return {**{f"HOST.{n}": f for n, f in HOST_FACTS.items()}, **{f"CT.{n}": f for n, f in CT_FACTS.items()},
            **{f"ROUTER.{f.name}": f for f in ROUTER_FACTS}}


def reads() -> dict[str, Callable[[CommandOutput], Any]]:
    """Every typed read by its fixture folder: READ.name."""
    return {f"READ.{n}": r for n, r in {**READS, **ROUTER_READS}.items()}


def context(fact: Fact[Any] | RouterFact[Any]) -> tuple[Any, ...]:
    """What the fact's command is rendered from: the example host and its profile, or the router and its argv."""
    if isinstance(fact, RouterFact):
        return ROUTER_SPEC, ROUTER_ARGV
    inv = load_inventory(EXAMPLE_INVENTORY)
    host = inv.hosts["pve-gpu-1"]
    return host, inv.profile_for(host)


def jsonable(value: Any) -> Any:
    """A fact's value as the fixture writes it: dataclasses and models as objects, tuple keys joined by `|`, sets
    sorted."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {"|".join(map(str, k)) if isinstance(k, tuple) else str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return sorted(jsonable(v) for v in value)
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    raise TypeError(f"no JSON form for {type(value).__name__}")


def cases() -> list[Path]:
    return sorted(FIXTURES.glob("*/*.json"))


def test_every_fact_has_a_fixture_and_every_fixture_a_fact() -> None:
    have = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    facts = set(namespaces()) | set(reads())
    assert not facts - have, f"facts without a fixture in tests/facts/: {', '.join(sorted(facts - have))}"
    assert not have - facts, f"fixtures of no fact: {', '.join(sorted(have - facts))}"
    assert all(any((FIXTURES / name).glob("*.json")) for name in have)


@pytest.mark.parametrize("path", cases(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fact_fixture(path: Path) -> None:
    check_fixture(namespaces().get(path.parent.name), path)


def check_fixture(fact: Fact[Any] | RouterFact[Any] | None, path: Path) -> None:
    """One fixture case: the fact's command for the example host, and its parser's value (or error) of the output.
    Also run on docs/development.md's example fact (tests/unit/steps/test_add_a_fact.py)."""
    case = json.loads(path.read_text())
    if path.parent.name in reads():
        parse = reads()[path.parent.name]
    else:
        assert fact is not None, f"{path.parent.name}: no such fact"
        assert fact.command(*context(fact)) == case["command"], "the fact's command changed: update its fixtures"
        parse = fact.parse
    out = CommandOutput(case["output"]["rc"], case["output"]["stdout"], case["output"]["stderr"])
    if "raises" in case:
        with pytest.raises(Exception) as err:
            parse(out)
        assert type(err.value).__name__ == case["raises"]
    else:
        assert jsonable(parse(out)) == case["value"]
