"""Issue 21 item 1: a plan (`roll --dry-run`, a fleet preflight) changes nothing, even when the current release
looks like an interrupted roll's candidate (it may be a live roll's, still loading): it says what a run holding
the host lock would restore."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.engine.state import RollRequest, RunInputs
from orchestrator.errors import CheckFailed, RemoteError
from orchestrator.steps.release import NOT_CANDIDATE, NOT_CANDIDATE_RC, candidate_guard

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
    # Only the read of the release the run would restore is answered: any other command (a verdict write, a
    # `current` switch, a restart) fails the test.
    run.node.answer(f"cat /var/lib/deploy/releases/{PREVIOUS}/flags.json", json.dumps(dict(profile.flags)))
    rec = run.step("resolve_release")
    assert [c for c in run.node.commands("run") if "flags.json" not in c] == []
    assert rec.status == "would-change"
    assert any(f"would restore the interrupted release {PREVIOUS}" in c for c in rec.changes)
    assert rec.details["would_restore"] == {"release": PREVIOUS, "candidate": CANDIDATE}
    assert any("would restore" in line for line in said)


def test_a_plan_over_an_interrupted_candidate_rolls_from_the_release_it_would_restore(make_run) -> None:
    """A fleet `--resume` after a kill: the candidate already has the requested flags, the release before it does
    not. The plan must not call the host "already on these flags" (the fleet would skip it and leave the never
    verified candidate current); it plans the roll from the release the real run restores first."""
    profile = make_run().ctx.profile
    facts = interrupted_facts(profile)
    facts["current_flags"] = json.dumps({**dict(profile.flags), "num-continuous-decode-steps": 4})
    run = make_run({}, facts, dry_run=True,
                   inputs=RunInputs(roll=RollRequest(set=("num-continuous-decode-steps=4",))))
    run.node.answer(f"cat /var/lib/deploy/releases/{PREVIOUS}/flags.json", json.dumps(dict(profile.flags)))
    rec = run.step("resolve_release")
    assert run.ctx.state.already_on is None
    cand = run.ctx.state.candidate
    assert cand is not None and cand.previous == PREVIOUS
    assert [k for k, _, _ in cand.flag_diff] == ["num-continuous-decode-steps"]
    assert rec.summary == f"1 flag change(s) from release {PREVIOUS}"


def test_a_run_holding_the_lock_still_restores_the_interrupted_release(make_run) -> None:
    profile = make_run().ctx.profile
    run = make_run({}, interrupted_facts(profile), skip_bench=True,
                   inputs=RunInputs(roll=RollRequest(set=("num-continuous-decode-steps=4",))))
    run.node.answer("verdict.json", rc=7, stderr="disk full")  # the first change a restore makes
    with pytest.raises(RemoteError, match="abandoned"):
        run.step("resolve_release")
    assert run.node.sent("verdict.json")


# ------------------------------------------------- the gate keeps only the server it measured (the candidate)
def _guard_output(guard: str, tmp_path: Path, current: str, active: str) -> subprocess.CompletedProcess[str]:
    """Run the guard for real in bash: `current` a symlink under tmp_path, systemctl a stub answering `active`."""
    (tmp_path / "releases").mkdir(exist_ok=True)
    link = tmp_path / "current"
    link.unlink(missing_ok=True)
    link.symlink_to(f"releases/{current}")
    stub = tmp_path / "bin" / "systemctl"
    stub.parent.mkdir(exist_ok=True)
    stub.write_text(f"#!/bin/sh\necho {active}\n")
    stub.chmod(0o755)
    script = guard.replace("/var/lib/deploy/current", str(link)) + "echo WROTE\n"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": f"{stub.parent}:{os.environ['PATH']}"})


def test_the_kept_verdict_is_written_only_while_the_candidate_is_current_and_active(make_run, tmp_path) -> None:
    run = make_run({}, {}, skip_bench=True)
    run.ctx.state.server.release = CANDIDATE
    run.ctx.on_failure = lambda err, rec: None
    run.node.answer("verdict.json", "")
    run.step("gate")
    [script] = run.node.commands("script")
    assert "readlink /var/lib/deploy/current" in script and "systemctl is-active sglang" in script
    guard = candidate_guard(run.ctx, CANDIDATE)
    assert guard in script  # the check and the write are one round trip
    ok = _guard_output(guard, tmp_path, CANDIDATE, "active")
    assert ok.returncode == 0 and ok.stdout == "WROTE\n"
    moved = _guard_output(guard, tmp_path, PREVIOUS, "active")
    assert moved.returncode == NOT_CANDIDATE_RC and moved.stdout == f"{NOT_CANDIDATE} {PREVIOUS} active\n"
    stopped = _guard_output(guard, tmp_path, CANDIDATE, "inactive")
    assert stopped.returncode == NOT_CANDIDATE_RC and "WROTE" not in stopped.stdout


def test_a_gate_whose_server_is_no_longer_the_candidate_fails_instead_of_keeping_it(make_run) -> None:
    """The reported race: a dry run restored the previous release while the roll's candidate loaded; health and
    smoke then passed against the previous release. The gate must fail the roll, not report `kept`."""
    run = make_run({}, {}, skip_bench=True)
    run.ctx.state.server.release = CANDIDATE
    armed = lambda err, rec: None  # noqa: E731 - the rollback hook install_release arms
    run.ctx.on_failure = armed
    run.node.answer("verdict.json", f"{NOT_CANDIDATE} {PREVIOUS} active\n", rc=NOT_CANDIDATE_RC)
    with pytest.raises(CheckFailed) as failed:
        run.step("gate")
    assert f"not the candidate {CANDIDATE}: the current release is now {PREVIOUS}" in failed.value.what
    assert run.ctx.on_failure is armed  # the runner's failure path still runs (the roll fails, never `kept`)


def test_an_up_plan_over_an_unverified_candidate_says_it_would_restore_it(make_run) -> None:
    profile = make_run().ctx.profile
    run = make_run({}, {**interrupted_facts(profile), "active": "active\n"}, dry_run=True)
    rec = run.step("server_unit")
    assert any(f"would restore the interrupted release {PREVIOUS}" in c for c in rec.changes)
    assert not run.node.sent("verdict.json") and not run.node.sent("ln -sfn")
