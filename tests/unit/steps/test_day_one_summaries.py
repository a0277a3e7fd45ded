"""Issue 25 item 14: summaries say what happened: a roll plan with a diff "would change", every skipped step
says why, and counts agree with their nouns."""

from __future__ import annotations

import json

from orchestrator.engine.progress import totals_line
from orchestrator.engine.runner import RunReport
from orchestrator.engine.state import RollRequest, RunInputs


def test_a_roll_plan_with_a_diff_says_would_change(make_run) -> None:
    profile = make_run().ctx.profile
    facts = {"current_release": "20261130T000000-aaaaaaaa", "current_flags": json.dumps(dict(profile.flags)),
             "sglang_version": profile.sglang_version}
    run = make_run({}, facts, dry_run=True,
                   inputs=RunInputs(roll=RollRequest(set=("num-continuous-decode-steps=4",))))
    rec = run.step("resolve_release")
    assert rec.summary.startswith("1 flag change(s)") and rec.status == "would-change"
    report = RunReport(host="pve-gpu-1", playbook="roll-plan", dry_run=True, steps=[rec])
    assert totals_line(report).startswith("would change on pve-gpu-1")


def test_skipped_steps_say_why(make_run) -> None:
    for name in ("release_verdict", "unlock", "health", "smoke", "throughput"):
        rec = make_run({}, {}, dry_run=True).step(name)
        assert rec.status == "skipped" and rec.summary, name


def test_totals_count_in_the_singular_and_the_plural() -> None:
    one = RunReport(host="h", playbook="status", dry_run=False, ssh_round_trips=1, ssh_connects=1, api_calls=1)
    assert "1 SSH round trip (0 before smoke), 1 connection, 1 API call" in totals_line(one)
    two = RunReport(host="h", playbook="status", dry_run=False, ssh_round_trips=2, ssh_connects=2, api_calls=0)
    assert "2 SSH round trips (0 before smoke), 2 connections, 0 API calls" in totals_line(two)
