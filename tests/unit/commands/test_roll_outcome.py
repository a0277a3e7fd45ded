"""One host's roll outcome is decided by the run's typed state, never by the words of an error message."""

from __future__ import annotations

from orchestrator.commands.roll import RollResult, judge, refused
from orchestrator.engine.runner import RunReport
from orchestrator.engine.state import Candidate, CurrentFlags, Rollback, RunState, ServerRun
from orchestrator.envelope import envelope
from orchestrator.errors import CheckFailed, ConfigError, LockLost
from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.fleet.engine import HostOutcome
from orchestrator.fleet.host_rolls import record_roll
from orchestrator.fleet.rollout import HostRoll
from orchestrator.runlog import StepRecord


def report(state: RunState | None = None, *, dry_run: bool = False) -> RunReport:
    return RunReport(host="gpu-1", playbook="roll", dry_run=dry_run, state=state or RunState())


def test_a_run_without_error_is_kept_or_planned() -> None:
    kept = judge("gpu-1", report(RunState(server=ServerRun(release="r-2"))), None, dry_run=False)
    assert kept.result is RollResult.KEPT and kept.release == "r-2" and kept.exit_code == 0
    assert judge("gpu-1", report(dry_run=True), None, dry_run=True).result is RollResult.PLANNED


def test_a_verified_rollback_is_rolled_back_to_that_release() -> None:
    err = CheckFailed("health: the server did not come up", step="health")
    state = RunState(server=ServerRun(release="r-2", installed=True), rollback=Rollback(to="r-1", candidate="r-2"))
    outcome = judge("gpu-1", report(state), err, dry_run=False)
    assert outcome.result is RollResult.ROLLED_BACK
    assert (outcome.release, outcome.rolled_back_to, outcome.failed_step, outcome.exit_code) == ("r-1", "r-1",
                                                                                                  "health", 1)


def test_words_about_a_rollback_do_not_make_one() -> None:
    err = LockLost("lock lost; candidate r-2 was NOT rolled back to r-1 by this run", step="gate")
    outcome = judge("gpu-1", report(RunState(server=ServerRun(release="r-2", installed=True))), err, dry_run=False)
    assert outcome.result is RollResult.FAILED and outcome.release is None and outcome.exit_code == 3


def test_refusals_before_the_install() -> None:
    unchanged = judge("gpu-1", report(RunState(already_on=CurrentFlags("r-1", {"tp-size": 8}))),
                      ConfigError("nothing to roll"), dry_run=False)
    assert unchanged.result is RollResult.UNCHANGED and unchanged.release == "r-1"
    assert judge("gpu-1", report(), ConfigError("bad flag"), dry_run=True).result is RollResult.REFUSED
    assert refused("gpu-1", ConfigError("no host gpu-1")).payload()["ok"] is False
    assert judge("gpu-1", report(), CheckFailed("CT 120 is not running"), dry_run=False).result is RollResult.FAILED


def test_a_kept_roll_that_did_not_rejoin_the_router_fails_on_its_new_release() -> None:
    host = HostRoll(host="gpu-1", wave=0, previous_release="r-1", release="r-1")
    kept = judge("gpu-1", report(RunState(server=ServerRun(release="r-2"))), None, dry_run=False)
    record_roll(host, kept, HostOutcome("gpu-1", "failed", exit_code=3, detail="router: not healthy"))
    assert (host.state, host.release, host.exit_code, host.detail) == ("failed", "r-2", 3, "router: not healthy")


def test_a_rolled_back_host_is_recorded_on_its_previous_release() -> None:
    host = HostRoll(host="gpu-1", wave=0, previous_release="r-1", previous_flags_sha="abc")
    state = RunState(rollback=Rollback(to="r-1", candidate="r-2"))
    back = judge("gpu-1", report(state), CheckFailed("gate: regression", step="gate"), dry_run=False)
    record_roll(host, back, HostOutcome("gpu-1", "failed", exit_code=1, detail="gate: gate: regression"))
    assert (host.state, host.release, host.flags_sha) == ("rolled_back", "r-1", "abc")


def test_the_release_to_go_back_to_is_the_one_the_roll_started_from() -> None:
    """Issue 21 item 1: the fleet preflight's plan no longer restores an interrupted roll's candidate (r-9), so it
    records r-9 as the host's previous release; the roll itself restored r-1 first and rolled from it."""
    schema = FlagSchema.load("0.5.12.post1")
    base = canonicalize({"tp-size": 8}, schema)
    new = canonicalize({"tp-size": 8, "max-running-requests": 64}, schema)
    cand = Candidate(previous="r-1", base_flags=base, new_flags=new, flag_diff=[("max-running-requests", None, 64)],
                     baseline=None)
    host = HostRoll(host="gpu-1", wave=0, previous_release="r-9", previous_flags_sha="sha-of-r-9", release="r-9")
    kept = judge("gpu-1", report(RunState(server=ServerRun(release="r-2"), candidate=cand)), None, dry_run=False)
    record_roll(host, kept, HostOutcome("gpu-1", "changed"))
    assert (host.state, host.release, host.previous_release) == ("rolled", "r-2", "r-1")
    assert host.previous_flags_sha == kept.previous_flags_sha != "sha-of-r-9"


def test_a_failed_roll_document_keeps_its_steps_totals_and_the_release_it_rolled_back_to() -> None:
    """Issue 25 item 5: a failed roll's --json document has the envelope, the steps and totals it ran, how it
    ended and the release it rolled back to; `error` is the stable code, not a class name."""
    err = CheckFailed("gate: 7% below the baseline", step="gate", host="gpu-1")
    state = RunState(server=ServerRun(release="r-2", installed=True), rollback=Rollback(to="r-1", candidate="r-2"))
    run = RunReport(host="gpu-1", playbook="roll", dry_run=False, ok=False, error=err.to_dict(), failure=err,
                    state=state, ssh_round_trips=12, duration_s=3.5,
                    steps=[StepRecord("install_release", "changed", ssh_round_trips=5),
                           StepRecord("gate", "failed", err.what, ssh_round_trips=7)])
    outcome = judge("gpu-1", run, err, dry_run=False)
    doc = envelope(outcome.payload(), exit_code=outcome.exit_code)
    assert (doc["ok"], doc["exit_code"], doc["error"], doc["changed"]) == (False, 1, "check-failed", True)
    assert [(s["name"], s["status"]) for s in doc["steps"]] == [("install_release", "changed"), ("gate", "failed")]
    assert doc["totals"]["ssh_round_trips"] == 12 and doc["totals"]["duration_s"] == 3.5
    assert (doc["result"], doc["rolled_back_to"], doc["release"]) == ("rolled back", "r-1", "r-1")
    assert (doc["step"], doc["host"], doc["what"]) == ("gate", "gpu-1", "gate: 7% below the baseline")
    # a roll refused before any run: the same envelope, no steps
    refusal = refused("gpu-1", ConfigError("no host gpu-1"))
    doc = envelope(refusal.payload(), exit_code=refusal.exit_code)
    assert (doc["ok"], doc["exit_code"], doc["error"], doc["steps"], doc["totals"]) == (False, 2, "config-error",
                                                                                         [], {})
