"""Issue 21 item 1: a plan (`roll --dry-run`, a fleet preflight) changes nothing, even when the current release
looks like an interrupted roll's candidate (it may be a live roll's, still loading): it says what a run holding
the host lock would restore."""

from __future__ import annotations

import json

import pytest

from orchestrator.errors import RemoteError
from orchestrator.steps.state import RollRequest, RunInputs

PREVIOUS = "20261130T000000-aaaaaaaa"
CANDIDATE = "20261201T000000-bbbbbbbb"


def interrupted_facts(profile) -> dict[str, str]:
    return {"releases": f"{PREVIOUS}\n{CANDIDATE}\n", "current_release": f"releases/{CANDIDATE}\n",
            "current_flags": json.dumps(dict(profile.flags)), "sglang_version": profile.sglang_version,
            "current_meta": json.dumps({"id": CANDIDATE, "source": "roll", "previous": PREVIOUS})}


def test_a_roll_plan_over_an_unverified_candidate_sends_nothing_and_says_what_it_would_restore(make_run) -> None:
    profile = make_run().ctx.profile
    said: list[str] = []
    run = make_run({}, interrupted_facts(profile), dry_run=True,
                   inputs=RunInputs(roll=RollRequest(set=("num-continuous-decode-steps=4",))))
    run.ctx.say = said.append
    # No answer is declared: any command at all (a verdict write, a `current` switch, a restart) fails the test.
    rec = run.step("resolve_release")
    assert run.node.calls == []
    assert rec.status == "would-change"
    assert any(f"would restore the interrupted release {PREVIOUS}" in c for c in rec.changes)
    assert rec.details["would_restore"] == {"release": PREVIOUS, "candidate": CANDIDATE}
    assert any("would restore" in line for line in said)


def test_a_run_holding_the_lock_still_restores_the_interrupted_release(make_run) -> None:
    profile = make_run().ctx.profile
    run = make_run({}, interrupted_facts(profile), skip_bench=True,
                   inputs=RunInputs(roll=RollRequest(set=("num-continuous-decode-steps=4",))))
    run.node.answer("verdict.json", rc=7, stderr="disk full")  # the first change a restore makes
    with pytest.raises(RemoteError, match="abandoned"):
        run.step("resolve_release")
    assert run.node.sent("verdict.json")
