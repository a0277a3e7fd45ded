"""Each host of a fleet roll: its single-host roll, plan and revert (orchestrator.roll) run on the fleet engine,
and what its typed outcome leaves in the fleet roll's record.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from orchestrator.commands.roll import RolledBack, RollOutcome, RollResult, refused, roll_host, rollback_host
from orchestrator.engine.runner import run_playbook_to_end
from orchestrator.engine.state import RollRequest, RunInputs
from orchestrator.engine.step import RunOptions
from orchestrator.errors import DeployError
from orchestrator.fleet.engine import HostEvents, HostOutcome
from orchestrator.fleet.outcome import Refused, host_outcome
from orchestrator.fleet.progress import EventPrinter
from orchestrator.fleet.rollout import HostRoll, RollSpec
from orchestrator.inventory.models import Inventory
from orchestrator.runlog import StepRecord


def roll_request(spec: RollSpec) -> RollRequest:
    """The single-host request that a fleet roll's record replays on every host (and --resume replays again)."""
    return RollRequest(set=tuple(spec.set), unset=tuple(spec.unset), replacement=spec.replacement,
                       accept_regression=spec.accept_regression, threshold_pct=spec.threshold_pct,
                       gate_metrics=tuple(spec.gate_metrics), stack_profile=spec.stack_profile)


@dataclass(frozen=True)
class HostRolls:
    """Each host's single-host roll, plan and revert (orchestrator.roll), its steps reported as engine events."""

    inventory: Inventory
    request: RollRequest
    options: RunOptions  # preset, skip_bench, tofu and the command line, as the fleet roll was given them

    def _roll(self, name: str, events: HostEvents, *, dry_run: bool) -> tuple[RollOutcome, HostOutcome]:
        records: list[StepRecord] = []
        printer = EventPrinter(events, records)
        try:
            host = self.inventory.find_host(name)
        except DeployError as err:
            rolled = refused(name, err)
        else:
            rolled = roll_host(host, self.inventory, self.request, replace(self.options, dry_run=dry_run),
                               progress=printer, say=printer.say)
        return rolled, host_outcome(name, rolled, records)

    def plan(self, name: str, events: HostEvents) -> tuple[RollOutcome, HostOutcome]:
        """`roll --dry-run`: resolve and validate in the container; changes nothing."""
        return self._roll(name, events, dry_run=True)

    def roll(self, name: str, events: HostEvents) -> tuple[RollOutcome, HostOutcome]:
        return self._roll(name, events, dry_run=False)

    def releases(self, name: str) -> tuple[str | None, list[str]]:
        """The host's current release and every release id stored on it (the `history` playbook: one round
        trip); raises DeployError when they cannot be read."""
        options = RunOptions(tofu=self.options.tofu, command=self.options.command)
        report = run_playbook_to_end("history", self.inventory.find_host(name), self.inventory, options,
                                     inputs=RunInputs(history_limit=200))
        if report.failure is not None:
            raise report.failure
        rows = report.state.history
        current = next((r.current for r in rows if r.current is not None), None)
        return (current or None), sorted(r.id for r in rows if r.id is not None)

    def revert(self, name: str, events: HostEvents, to_release: str) -> HostOutcome:
        """`rollback host X --to ID`."""
        records: list[StepRecord] = []
        printer = EventPrinter(events, records)
        options = RunOptions(tofu=self.options.tofu, command=self.options.command, cancel=self.options.cancel)
        try:
            report = rollback_host(self.inventory.find_host(name), self.inventory, to_release, options,
                                   progress=printer, say=printer.say)
        except DeployError as err:
            return host_outcome(name, Refused(err), records)
        return host_outcome(name, RolledBack(report), records)


def record_roll(host: HostRoll, rolled: RollOutcome | None, outcome: HostOutcome) -> None:
    """Pure: what a host's roll (None: never started, its drain failed) and the router around it leave in the
    record. A host whose roll was kept but that is not back in the router counts as failed, on its new release.

    The release to go back to is the one the roll started from: the preflight's plan changes nothing, so on a host
    whose current release was an interrupted roll's candidate it saw that candidate; the roll (holding the lock)
    restored its predecessor first and rolled from there."""
    if rolled is not None and rolled.previous is not None and rolled.previous != host.previous_release:
        host.previous_release, host.previous_flags_sha = rolled.previous, rolled.previous_flags_sha
    if outcome.exit_code == 0 and rolled is not None:
        host.state, host.exit_code = "rolled", 0
        host.release = rolled.release or host.release
        host.flags_sha = rolled.flags_sha or host.flags_sha
        diff = rolled.candidate.flag_diff if rolled.candidate is not None else []
        host.detail = "; ".join(f"--{flag}: {old} → {new}" for flag, old, new in diff)
        return
    result = rolled.result if rolled is not None else None
    undone = outcome.extras.get("rolled_back") is True  # kept, failed the router's checks, then rolled back
    host.state = "rolled_back" if result is RollResult.ROLLED_BACK or undone else "failed"
    if rolled is not None and result is RollResult.KEPT and not undone:  # rolled, then not back in the router
        host.release, host.flags_sha = rolled.release, rolled.flags_sha
    else:
        host.release, host.flags_sha = host.previous_release, host.previous_flags_sha
    host.exit_code = outcome.exit_code or 1
    what = rolled.error.what if rolled is not None and rolled.error is not None else ""
    host.detail = outcome.detail or what
