"""Leftover benches of dead runs: stopped inside the facts round trip of a run that holds the lock, and reported."""

from __future__ import annotations

from orchestrator.parsers.leftovers import parse_leftovers
from orchestrator.steps.session import ensure_facts

STOPPED = "stopped\tr-20261130-151527-89f9\t/var/lib/deploy/releases/R/bench-e2e--r-20261130-151527-89f9.jsonl\n"


class HeldLock:
    """Stands for the lock step's HostLock: only its presence matters to ensure_facts."""


def test_parse_leftovers_reads_stopped_and_gone_lines_only() -> None:
    found = parse_leftovers(STOPPED + "gone\tr-2\t/x.jsonl\nnoise\nstopped\t\t/y\n")
    assert [(f.run_id, f.stopped) for f in found] == [("r-20261130-151527-89f9", True), ("r-2", False)]
    assert "stopped a leftover bench of run r-20261130-151527-89f9" in found[0].message()


def test_a_locked_run_stops_leftovers_in_its_one_facts_round_trip(make_run) -> None:
    run = make_run({}, {})
    said: list[str] = []
    run.ctx.say = said.append
    run.ctx.facts.gathered = False
    run.ctx.playbook_steps = ["connect", "lock", "resolve_release"]
    run.ctx.host_lock = HeldLock()  # type: ignore[assignment]
    run.node.ct_after = {"stop_leftovers": STOPPED, "active": "active\n"}
    ensure_facts(run.ctx)
    (batch,) = run.node.commands("batch")  # one round trip, the stop inside it
    assert "kill -TERM" in batch and "/var/lib/deploy/runs" in batch
    assert said == [run.ctx.state.stopped_benches[0].message()]
    assert run.ctx.state.stopped_benches[0].run_id == "r-20261130-151527-89f9"


def test_a_dry_run_or_an_unlocked_run_stops_nothing(make_run) -> None:
    for dry_run, lock in ((True, HeldLock()), (False, None)):
        run = make_run({}, {}, dry_run=dry_run)
        run.ctx.facts.gathered = False
        run.ctx.playbook_steps = ["connect", "lock", "resolve_release"]
        run.ctx.host_lock = lock  # type: ignore[assignment]
        run.node.ct_after = {"stop_leftovers": STOPPED}
        ensure_facts(run.ctx)
        assert "kill -TERM" not in run.node.commands("batch")[0]
        assert run.ctx.state.stopped_benches == []
