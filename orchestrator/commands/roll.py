"""One host's roll and rollback as typed results: what `deploy roll host X` prints and what a fleet roll decides on.

Why typed: the fleet used to read each host's result back from the command's JSON and tell a rollback from a
failure by the words of its message. Here the run's own state says it: `RunState.rollback` is set only once the
automatic rollback finished and was verified, `RunState.already_on` only when the host already runs the flags.
`payload()` is the command's `--json` document, kept here so the fleet report carries the same one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from orchestrator.commands.filing import file_runs, filed_if_stopped
from orchestrator.commands.result import RunResult
from orchestrator.engine.runner import ProgressFn, RunReport, run_playbook_to_end
from orchestrator.engine.state import Candidate, CurrentFlags, RollRequest, RunInputs, RunState
from orchestrator.engine.step import RunOptions
from orchestrator.errors import ConfigError, DeployError
from orchestrator.flags.digest import flags_sha
from orchestrator.inventory.models import Host, Inventory
from orchestrator.locks.claims import claim_hosts
from orchestrator.runlog import StepRecord

Say = Callable[[str], None]


class RollResult(Enum):
    """How one host's roll ended."""

    KEPT = "kept"  # the candidate passed every gate and is the current release
    PLANNED = "planned"  # a dry run: resolved and validated in the container; nothing changed
    UNCHANGED = "unchanged"  # refused: the host already runs the requested flags
    REFUSED = "refused"  # refused before a candidate was installed (bad flags, no release to roll from, …)
    ROLLED_BACK = "rolled back"  # a step failed after the install; the previous release is current and healthy
    FAILED = "failed"  # a step failed and no verified rollback followed: the host needs attention


@dataclass(frozen=True)
class RollOutcome:
    host: str
    result: RollResult
    report: RunReport | None = None  # None when the run could not start (unknown host, bad playbook)
    error: DeployError | None = None  # why it did not end KEPT or PLANNED

    @property
    def exit_code(self) -> int:
        return self.error.exit_code if self.error is not None else 0

    @property
    def failed_step(self) -> str | None:
        return (self.error.step or None) if self.error is not None else None

    @property
    def _state(self) -> RunState:
        return self.report.state if self.report is not None else RunState()

    @property
    def candidate(self) -> Candidate | None:
        return self._state.candidate

    @property
    def previous(self) -> str | None:
        """The release current before the roll (known once the request was resolved)."""
        return self.candidate.previous if self.candidate is not None else None

    @property
    def release(self) -> str | None:
        """The release current after the roll, where the run knows it."""
        state = self._state
        if self.result is RollResult.KEPT:
            return state.server.release
        if self.result is RollResult.ROLLED_BACK and state.rollback is not None:
            return state.rollback.to
        if self.result is RollResult.UNCHANGED and state.already_on is not None:
            return state.already_on.release
        return self.previous if self.result is RollResult.PLANNED else None

    @property
    def installed(self) -> str | None:
        """The release this run installed and made current (its candidate), whatever came after; None if none."""
        server = self._state.server
        return server.release if server.installed else None

    @property
    def rolled_back_to(self) -> str | None:
        rollback = self._state.rollback
        return rollback.to if rollback is not None else None

    @property
    def already_on(self) -> CurrentFlags | None:
        return self._state.already_on

    @property
    def flags_sha(self) -> str | None:
        """Over the flags as stored (a secret flag as its marker): the digest tells nothing of a secret."""
        return flags_sha(self.candidate.stored(self.candidate.new_flags)) if self.candidate is not None else None

    @property
    def previous_flags_sha(self) -> str | None:
        return flags_sha(self.candidate.stored(self.candidate.base_flags)) if self.candidate is not None else None

    # What the fleet judges (fleet/outcome.HostResult): the run's steps, round trips and changes, if it ran.
    @property
    def steps(self) -> list[StepRecord]:
        return self.report.steps if self.report is not None else []

    @property
    def ssh_round_trips(self) -> int | None:
        return self.report.ssh_round_trips if self.report is not None else None

    @property
    def changed(self) -> bool:
        return self.report is not None and self.report.changed

    @property
    def dry_run(self) -> bool:
        return self.report is not None and self.report.dry_run

    def detail(self) -> str:
        return ""

    def payload(self) -> dict[str, Any]:
        """The `deploy roll host X --json` document. A failed roll's keeps the steps and totals it ran, says how
        it ended (`result`) and, after an automatic rollback, the release it rolled back to (`rolled_back_to`,
        then also `release`)."""
        if self.report is None:
            return {"ok": False, "result": self.result.value, **(self.error.to_dict() if self.error else {})}
        payload = self.report.to_dict()
        cand = self.candidate
        payload["result"] = self.result.value
        payload["release"] = self.report.state.server.release if self.error is None else self.release
        payload["previous"] = self.previous
        if self.error is not None:
            payload["rolled_back_to"] = self.rolled_back_to
            payload.update(self.error.to_dict())
        payload["diff"] = [{"flag": k, "old": a, "new": b} for k, a, b in (cand.flag_diff if cand else [])]
        if cand is not None:
            payload["flags_sha"] = self.flags_sha
            payload["previous_flags_sha"] = self.previous_flags_sha
        if self.report.state.gate is not None:
            payload["gate"] = self.report.state.gate.model_dump(mode="json")
        return payload


def judge(host: str, report: RunReport | None, error: DeployError | None, *, dry_run: bool) -> RollOutcome:
    """Pure: the result a roll run's report and error amount to."""
    state = report.state if report is not None else RunState()
    if error is None:
        result = RollResult.PLANNED if dry_run else RollResult.KEPT
    elif state.rollback is not None:
        result = RollResult.ROLLED_BACK
    elif state.already_on is not None:
        result = RollResult.UNCHANGED
    elif isinstance(error, ConfigError) and not state.server.installed:
        result = RollResult.REFUSED
    else:
        result = RollResult.FAILED
    return RollOutcome(host, result, report, error)


def refused(host: str, error: DeployError) -> RollOutcome:
    """A roll that could not start (the host or the inventory was refused before any run)."""
    return judge(host, None, error, dry_run=False)


def roll_host(host: Host, inventory: Inventory, request: RollRequest, options: RunOptions, *,
              progress: ProgressFn | None = None, say: Say | None = None) -> RollOutcome:
    """Roll `request` on one host (a plan of it with options.dry_run): resolve, validate, install, gate, and
    roll back on a failed gate. Never raises a DeployError: the outcome carries it."""
    playbook = "roll-plan" if options.dry_run else "roll"
    if request.stack_profile is not None and request.stack_profile != host.profile:
        # `roll --profile P`: the host runs this roll under P, so P's stack is the one built and rolled onto.
        host = host.model_copy(update={"profile": request.stack_profile})
    try:
        with claim_hosts([host.name], options.command, exclusive=False), filed_if_stopped(say):  # locks/claims.py
            report = run_playbook_to_end(playbook, host, inventory, options, progress=progress, say=say,
                                         inputs=RunInputs(roll=request))
        file_runs(report, say)  # the ledger, after the gate kept the candidate or rolled it back
    except DeployError as err:
        return judge(host.name, None, err, dry_run=options.dry_run)
    return judge(host.name, report, report.failure, dry_run=options.dry_run)


def rollback_host(host: Host, inventory: Inventory, to_release: str | None, options: RunOptions, *,
                  progress: ProgressFn | None = None, say: Say | None = None) -> RunReport:
    """Re-install `to_release` (None: the current release's predecessor); the report's `failure` says if not.
    Raises LockHeld when another deploy command on this machine holds the host (locks/claims.py)."""
    with claim_hosts([host.name], options.command, exclusive=False):
        return run_playbook_to_end("rollback", host, inventory, options, progress=progress, say=say,
                                   inputs=RunInputs(rollback_to=to_release))


def rollback_payload(report: RunReport) -> dict[str, Any]:
    """The `deploy rollback host X --json` document."""
    return RolledBack(report).payload()


@dataclass(frozen=True)
class RolledBack(RunResult):
    """A rollback run's typed result: its report; a finished one's document names the release now current."""

    def payload(self) -> dict[str, Any]:
        if self.report.failure is not None:  # keeps the steps and totals it ran, with the error's code
            return self.report.to_dict()
        return {**self.report.to_dict(), "release": self.report.state.server.release}
