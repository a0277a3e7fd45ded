"""`deploy roll group G` and `deploy rollback group G`: canary first, then waves, each host drained through the router.

Why it is built on the single-host roll (orchestrator.roll): each host's roll is exactly `deploy roll host X`
(validation, health, smoke, throughput gate against that host's own baseline, automatic rollback), run on the
fleet engine; its typed outcome (kept, rolled back, failed, refused, already on the flags) decides what the
record says. This module only decides which host goes when (waves, at most --max-unavailable out of service at
once), drains it around its roll, stops at the first failure, and keeps the record (rollout.py) that --resume
and `rollback group` read.
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from orchestrator.commands.roll import RollOutcome, RollResult
from orchestrator.engine.step import RunOptions
from orchestrator.envelope import failure
from orchestrator.errors import CheckFailed, ConfigError, DeployError, Interrupted, RemoteError
from orchestrator.flags.digest import flags_sha
from orchestrator.fleet.engine import DEFAULT_PARALLEL, FleetRun, HostEvents, HostOutcome, run_fleet
from orchestrator.fleet.host_rolls import HostRolls, record_roll, roll_request
from orchestrator.fleet.rollout import (
    STATE_WORDS,
    FleetRoll,
    HostRoll,
    RollSpec,
    RollStore,
    new_roll_id,
    now_text,
    plan_waves,
    process_alive,
)
from orchestrator.fleet.router_column import RouterColumn, added_back, after_undo, left_out
from orchestrator.fleet.targets import TargetSpec, resolve_targets
from orchestrator.fleet.view import FleetView
from orchestrator.inventory.models import Inventory
from orchestrator.locks.claims import claim_fleet, ensure_held
from orchestrator.locks.lease import free_dead_runs_leases
from orchestrator.remote.http import Transport
from orchestrator.router.drain import Drainer
from orchestrator.router.session import RouterSession
from orchestrator.ui.output import Output
from orchestrator.ui.tables import Column
from orchestrator.ui.tables import spec as table_spec

Payload = dict[str, Any]


class Caller(Protocol):
    """What a fleet roll needs from the command that runs it (the CLI's AppContext is one): the loaded
    inventory, the directories it came from (for the record) and where output goes."""

    @property
    def inventory(self) -> Inventory: ...

    @property
    def inventory_paths(self) -> str: ...

    @property
    def out(self) -> Output: ...

    @property
    def http(self) -> Transport | None:
        """How the router and its workers are reached (None: real HTTP; a handler in unit tests)."""


class FleetRouter(RouterSession):
    """The router's side of a fleet roll: the run's router session (router/session.py) with each host's
    router column, a Drainer per host job, and the drain around each host's roll."""

    def __init__(self, inv: Inventory, drain_timeout_s: float, cancel: threading.Event | None = None, *,
                 http: Transport | None = None) -> None:
        super().__init__(inv, drain_timeout_s, cancel, http=http)
        #: Each host's router column in this run (one statement of where it is now, router_column.RouterColumn).
        self.columns: dict[str, RouterColumn] = {}

    def note(self, host: HostRoll, now: str, *, drained: str | None = None) -> None:
        """Set where `host` is in the router now (replacing what this run said before) and its record's column."""
        column = self.columns.setdefault(host.host, RouterColumn())
        column.now = now
        if drained is not None:
            column.drained = drained
        host.router = column.text()

    def drainer(self, events: HostEvents) -> Drainer:
        return self.drain_with(events.say)

    def around(self, host: HostRoll, events: HostEvents, action: Callable[[], HostOutcome],
               undo: Callable[[], HostOutcome] | None = None) -> HostOutcome:
        """Drain, act, and add the host back only when the action succeeded (a failed host stays out). When the
        router checks after the add fail (the worker does not answer, or the router does not reach it), `undo`
        puts the host back on its previous release and it is added back once that release passes them."""
        url = self.urls.get(host.host)
        if self.base is not None and host.host in self.unknown:
            err = self.unknown[host.host].at(host=host.host, step="drain")
            self.note(host, f"drain failed: {err.what}")
            return HostOutcome(host.host, "failed", exit_code=err.exit_code, report=failure(err),
                               detail=f"drain: {err.what}")
        if self.base is None or url is None:
            self.note(host, "no router: not drained" if self.base is None else "not a router worker: not drained")
            return action()
        drainer = self.drainer(events)
        try:
            events.step("drain")
            began = time.monotonic()
            try:
                drained = drainer.drain(url)
            except DeployError as err:
                events.ended("drain", "failed", time.monotonic() - began)
                err.at(host=host.host, step="drain")
                self.note(host, f"drain failed: {err.what}")
                return HostOutcome(host.host, "failed", exit_code=err.exit_code,
                                   report=failure(err), detail=f"drain: {err.what}")
            events.ended("drain", "ok", time.monotonic() - began)
            outcome = action()
            if outcome.exit_code != 0:
                self.note(host, left_out(interrupted=self.cancel.is_set()), drained=drained.note)
                return outcome
            events.step("router add")
            began = time.monotonic()
            try:
                took = drainer.restore(url, self.worker_keys.get(host.host))
            except DeployError as err:
                events.ended("router add", "failed", time.monotonic() - began)
                err.at(host=host.host, step="router")
                self.note(host, f"NOT back in the router: {err.what}", drained=drained.note)
                outcome.exit_code, outcome.result = err.exit_code, "failed"
                outcome.detail = f"router: {err.what}"
                if undo is not None:
                    self._undo(host, drainer, url, undo, outcome, err.what)
                return outcome
            events.ended("router add", "ok", time.monotonic() - began)
            reach = f"; {drainer.last_reach.note}" if drainer.last_reach is not None else ""
            self.note(host, f"back in the router, healthy after {took:.1f} s{reach}", drained=drained.note)
            return outcome
        finally:
            drainer.client.close()


    def _undo(self, host: HostRoll, drainer: Drainer, url: str, undo: Callable[[], HostOutcome],
              outcome: HostOutcome, failed: str) -> None:
        """The new release failed the router's checks (`failed`): back to the previous release, and back into the
        router once that release passes the same checks (else it stays out, and the record says so)."""
        reverted = undo()
        outcome.extras["rolled_back"] = reverted.exit_code == 0
        if reverted.exit_code != 0:
            self.note(host, after_undo(failed, reverted.detail, None))
            return
        try:
            drainer.restore(url, self.worker_keys.get(host.host))
        except DeployError as err:
            self.note(host, after_undo(failed, None, err.what))
            return
        self.note(host, after_undo(failed, None, None))


    def rejoin(self, hosts: list[HostRoll]) -> dict[str, DeployError]:
        """Put each host the router does not list back, after the same checks as a roll's add-back (the worker
        answers with its key, is listed healthy, and a request through the router reaches it). A host that an
        interrupted roll left out (rolled, never re-added) comes back here; returns the hosts that did not."""
        missing: dict[str, DeployError] = {}
        if self.base is None:
            return missing
        with self.client() as client:
            listed = {w.url for w in client.list_workers()}
            drainer = self.drain_with(client=client)
            for host in hosts:
                url = self.urls.get(host.host)
                if url is None or url in listed:
                    continue
                try:
                    took = drainer.restore(url, self.worker_keys.get(host.host))
                except DeployError as err:
                    err.at(host=host.host, step="router")
                    missing[host.host] = err
                    self.note(host, f"NOT back in the router: {err.what}")
                    continue
                was_out = self.columns[host.host].now if host.host in self.columns else ""
                self.note(host, added_back(took, drainer.last_reach.note if drainer.last_reach is not None else "",
                                           was_out=was_out))
        return missing


def _on_previous(rolled: RollOutcome) -> bool:
    """Pure: the host runs its previous release after an interrupted roll (never installed, or rolled back)."""
    if rolled.result is RollResult.ROLLED_BACK:
        return True
    return rolled.result is RollResult.FAILED and isinstance(rolled.error, Interrupted) and rolled.installed is None


def _on_candidate(rolled: RollOutcome) -> bool:
    """Pure: the roll was interrupted after it installed its candidate (a gate, the verdict or the unlock still to
    come): the host runs that candidate, verified or not."""
    return rolled.result is RollResult.FAILED and isinstance(rolled.error, Interrupted) and rolled.installed is not None


def _error_for(code: int, what: str, fix: str) -> DeployError:
    cls: type[DeployError] = {2: ConfigError, 3: RemoteError}.get(code, CheckFailed)
    return cls(what, fix=fix, step="preflight")


class FleetRoller:
    """One fleet roll (new or resumed) or revert, with its record saved after every host."""

    def __init__(self, app: Caller, roll: FleetRoll, rolls: HostRolls, store: RollStore,
                 drain_timeout_s: float, cancel: threading.Event | None = None) -> None:
        self.app, self.roll, self.rolls, self.store = app, roll, rolls, store
        #: Set on Ctrl-C/SIGTERM/SIGHUP (the engine does it): each host's run stops before its next step.
        self.cancel = cancel or threading.Event()
        self.router = FleetRouter(app.inventory, drain_timeout_s, self.cancel, http=app.http)
        self.roll.router = self.router.base
        self._lock = threading.Lock()
        self.outcomes: dict[str, HostOutcome] = {}
        #: Hosts whose job ran to its end and recorded what it left (a job that raised never gets here).
        self._recorded: set[str] = set()

    def save(self) -> None:
        with self._lock:
            self.store.save(self.roll)

    def _wave(self, names: list[str], job: Callable[[str, HostEvents], HostOutcome], parallel: int,
              title: str) -> bool:
        """Run one wave; True when every host in it succeeded."""
        ensure_held()  # a safe point: claims lost with a team store stop the roll before this wave (locks/claims.py)
        self.app.out.line(title)
        view = FleetView(self.app.out.console, names, enabled=not self.app.out.as_json, tty=sys.stdout.isatty())
        try:
            with view:
                run = run_fleet(names, job, parallel=max(1, min(parallel, len(names))), fail_fast=True,
                                on_event=view, on_tick=view.tick, cancel=self.cancel)
        except KeyboardInterrupt as stop:
            # Every worker has ended through its own cleanup (leases released); what each left is recorded.
            self._record(getattr(stop, "run", None))
            raise
        self._record(run)
        return all(o.exit_code == 0 and o.result != "skipped" for o in run.outcomes)

    def _record(self, run: FleetRun | None) -> None:
        if run is None:
            self.save()
            return
        for o in run.outcomes:
            self.outcomes[o.host] = o
            host = self.roll.host(o.host)
            if o.exit_code != 0 and host.state == "in_progress" and o.host not in self._recorded:  # the job raised
                host.state, host.exit_code, host.detail = "failed", o.exit_code, o.detail
        self.save()

    # ------------------------------------------------------------------------------------------ preflight
    def preflight(self, names: list[str]) -> None:
        """Validate the flag request on every host still to roll (its own sglang's parser); refuse on any problem."""
        if not names:
            return

        planned: dict[str, RollOutcome] = {}

        def job(name: str, events: HostEvents) -> HostOutcome:
            planned[name], outcome = self.rolls.plan(name, events)
            return outcome

        self.app.out.line(f"checking the flag change on {len(names)} host(s) before touching any")
        view = FleetView(self.app.out.console, names, enabled=not self.app.out.as_json, tty=sys.stdout.isatty())
        with view:
            run = run_fleet(names, job, parallel=DEFAULT_PARALLEL, on_event=view, on_tick=view.tick)
        problems: dict[str, list[str]] = {}  # one message → the hosts that gave it (a bad flag is refused by all)
        fixes: list[str] = []
        for o in run.outcomes:
            host = self.roll.host(o.host)
            rolled = planned.get(o.host)
            result = rolled.result if rolled is not None else None
            if rolled is not None and result is RollResult.PLANNED:
                if host.previous_release is None:
                    host.previous_release = rolled.previous
                    host.previous_flags_sha = rolled.previous_flags_sha
                host.release = host.release or rolled.previous
                host.flags_sha = host.flags_sha or rolled.previous_flags_sha
            elif rolled is not None and rolled.already_on is not None:
                # Already on the requested flags (a roll that stopped earlier, or a killed run that finished it):
                # nothing to roll here, and nothing for `rollback group` to put back.
                host.state, host.release = "rolled", rolled.already_on.release
                host.flags_sha = flags_sha(rolled.already_on.flags)
                host.detail = "already on these flags: nothing to roll"
                if host.previous_release is None:
                    host.previous_flags_sha = host.flags_sha
            else:
                problems.setdefault(o.detail, []).append(o.host)
                fix = rolled.error.fix if rolled is not None and rolled.error is not None else ""
                if fix and fix not in fixes:
                    fixes.append(fix)
        if problems:
            worst = max(o.exit_code for o in run.outcomes)
            count = sum(len(h) for h in problems.values())
            text = "; ".join(f"{', '.join(hosts)}: {detail}" for detail, hosts in problems.items())
            raise _error_for(worst, f"the flag change was refused on {count} host(s) before any was changed: {text}",
                             "; ".join([*fixes, "no host was drained or restarted: fix it and roll again"]))

    # ------------------------------------------------------------------------------------------ roll
    def roll_job(self, name: str, events: HostEvents) -> HostOutcome:
        host = self.roll.host(name)
        host.state = "in_progress"
        self.save()
        rolled: list[RollOutcome] = []

        def act() -> HostOutcome:
            result, outcome = self.rolls.roll(name, events)
            rolled.append(result)
            return outcome

        def undo() -> HostOutcome:
            previous = rolled[0].previous if rolled and rolled[0].previous else host.previous_release
            if previous is None:
                return HostOutcome(name, "failed", exit_code=1, detail="no previous release to go back to")
            return self.rolls.revert(name, events, previous)

        outcome = self.router.around(host, events, act, undo)
        record_roll(host, rolled[0] if rolled else None, outcome)
        if self.cancel.is_set() and rolled and _on_previous(rolled[0]):
            # Interrupted before its candidate was installed, or rolled back by its own failure path: it serves
            # its previous release, so it goes back into the router (checked), and --resume rolls it again.
            host.state, host.exit_code, host.release = "pending", 0, host.previous_release
            host.detail = "interrupted: still on its previous release; --resume rolls it"
            self.router.rejoin([host])
        elif self.cancel.is_set() and rolled and _on_candidate(rolled[0]):
            # Not a failure of the host: its roll stopped at a step boundary with the candidate current. The record
            # names that candidate and leaves the host to --resume, whose roll (holding the host's lock) keeps it if
            # its verdict was written and undoes it if not; `rollback group` reverts it like any rolled host.
            host.state, host.exit_code, host.release = "in_progress", 0, rolled[0].installed
            host.flags_sha = rolled[0].flags_sha or host.flags_sha
            host.detail = "interrupted after its candidate was installed; --resume checks it and finishes the roll"
        self._recorded.add(name)
        self.save()
        return outcome

    def revert_job(self, name: str, events: HostEvents) -> HostOutcome:
        host = self.roll.host(name)
        target = host.previous_release
        assert target is not None
        outcome = self.router.around(host, events, lambda: self.rolls.revert(name, events, target))
        if outcome.exit_code == 0:
            host.state, host.exit_code = "reverted", 0
            host.release, host.flags_sha = target, host.previous_flags_sha
            host.detail = f"back on {target}"
        else:
            host.state, host.exit_code = "failed", outcome.exit_code
            host.detail = f"revert to {target} failed: {outcome.detail}"
        self.save()
        return outcome

    def run(self) -> bool:
        """The waves in order; stops at the first failed wave. True when every host rolled."""
        spec = self.roll.spec
        for index, wave in enumerate(self.roll.waves):
            todo = [n for n in wave if self.roll.host(n).state in ("pending", "in_progress")]
            done = [n for n in wave if n not in todo]
            kind = "canary" if index == 0 and spec.canary else "wave"
            if not todo:
                self.app.out.line(f"{kind} {index}: {', '.join(wave)} already done (skipped)")
                continue
            title = (f"{kind} {index}: {', '.join(todo)}" + (f" (already done: {', '.join(done)})" if done else "")
                     + f"; at most {spec.max_unavailable} out of service at once")
            if not self._wave(todo, self.roll_job, spec.max_unavailable, title):
                return False
        return True

    def stale(self, names: list[str]) -> dict[str, int]:
        """`rollback group` must not trust a stale record: a host whose current release is not the one this fleet
        roll installed (single-host releases came after it) is refused, naming the releases; → {host: exit code}.
        A host killed mid-roll (in progress) may be on the candidate the record never saw: not judged here."""
        judged = [n for n in names if self.roll.host(n).state != "in_progress" and self.roll.host(n).release]
        found: dict[str, tuple[str | None, list[str]] | DeployError] = {}

        def job(name: str, events: HostEvents) -> HostOutcome:
            try:
                found[name] = self.rolls.releases(name)
            except DeployError as err:
                found[name] = err
                return HostOutcome(name, "failed", exit_code=err.exit_code, detail=err.what)
            return HostOutcome(name, "ok")

        if judged:
            run_fleet(judged, job, parallel=DEFAULT_PARALLEL)
        refused: dict[str, int] = {}
        for name in judged:
            host, got = self.roll.host(name), found.get(name)
            if isinstance(got, DeployError) or got is None:
                what = got.what if isinstance(got, DeployError) else "no answer"
                host.detail = f"not reverted: its releases could not be read: {what}"
                refused[name] = got.exit_code if isinstance(got, DeployError) else 3
                continue
            current, ids = got
            if current == host.release:
                continue
            later = [i for i in ids if host.release is not None and i > host.release]
            host.detail = (f"not reverted: it runs {current or 'no release'}, not {host.release} that fleet roll "
                           f"{self.roll.id} installed; later release(s): {', '.join(later) or 'none'}. Keep them, "
                           f"or `deploy rollback host {name} --to {host.previous_release}`, or --force")
            host.exit_code = 2
            refused[name] = 2
        if refused:
            self.app.out.line("refused (the record is stale for these hosts): "
                              + "; ".join(f"{n}: {self.roll.host(n).detail}" for n in refused))
        return refused

    def rejoin_rolled(self) -> bool:
        """--resume: hosts already rolled (before the interruption, or found on the flags by the preflight) that
        the router does not list are checked and added back first; one that fails its check stops the roll."""
        rolled = [h for h in self.roll.hosts if h.state == "rolled"]
        missing = self.router.rejoin(rolled)
        for name, err in missing.items():
            host = self.roll.host(name)
            host.state, host.exit_code, host.detail = "failed", err.exit_code, f"router: {err.what}"
        self.save()
        if missing:
            self.app.out.line(f"not back in the router: {', '.join(missing)}; the roll stops here "
                              f"(fix: {next(iter(missing.values())).fix})")
        return not missing

    def revert(self, names: list[str], title: str) -> bool:
        if not names:
            return True
        return self._wave(names, self.revert_job, self.roll.spec.max_unavailable, title)

    def finish(self, state: str) -> None:
        for h in self.roll.hosts:
            if h.state == "pending":
                h.state = "untouched"
                h.detail = h.detail or "not rolled: the rollout stopped before this host"
        self.roll.state = state  # type: ignore[assignment]
        self.save()


# ---------------------------------------------------------------------------------------------- report
def report_payload(roll: FleetRoll, outcomes: dict[str, HostOutcome], command: str, exit_code: int) -> Payload:
    return {"ok": exit_code == 0 and roll.state in ("done", "reverted"), "command": command, "exit_code": exit_code,
            "targets": roll.targets, "changed": any(o.changed_steps for o in outcomes.values()),
            "roll": {"id": roll.id, "state": roll.state, "waves": roll.waves, "router": roll.router,
                     **roll.spec.model_dump(mode="json"), "record": None},
            "hosts": [{**h.model_dump(mode="json"), "result": STATE_WORDS[h.state],
                       "report": outcomes[h.host].report if h.host in outcomes else None} for h in roll.hosts]}


def print_report(app: Caller, roll: FleetRoll, outcomes: dict[str, HostOutcome], command: str,
                 record_path: str, exit_code: int) -> None:
    payload = report_payload(roll, outcomes, command, exit_code)
    payload["roll"]["record"] = record_path
    app.out.emit(payload)
    rows = []
    for h in roll.hosts:
        wave = "canary" if h.wave == 0 and roll.spec.canary else str(h.wave)
        rows.append((h.host, wave, STATE_WORDS[h.state], h.release or "-", h.flags_sha or "-",
                     h.router or "-", h.detail or "-"))
    headers: list[str | Column] = ["host", "wave", "result", "release now", "flags", "router", "detail"]
    app.out.table(table_spec(f"{command}: fleet roll {roll.id} {roll.state}", headers, rows))
    counts: dict[str, int] = {}
    for h in roll.hosts:
        counts[STATE_WORDS[h.state]] = counts.get(STATE_WORDS[h.state], 0) + 1
    app.out.line(f"fleet roll {roll.id}: " + ", ".join(f"{n} {w}" for w, n in counts.items())
                 + f"; {roll.state}; exit {exit_code}; record {record_path}")


# ---------------------------------------------------------------------------------------------- commands
def _command() -> str:
    return "deploy " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def fleet_roll(app: Caller, targets: TargetSpec, spec: RollSpec | None, *, tofu: bool, resume: bool,
               drain_timeout_s: float, store: RollStore | None = None) -> int:
    """`deploy roll <fleet> …` (spec given) or `… --resume` (spec None: the record's). Every host is claimed first
    and the router (locks/claims.py): an overlapping fleet roll, `up group`, `router add/remove` or single-host command
    is refused before any planning."""
    names = [h.name for h in resolve_targets(app.inventory, targets)]
    with claim_fleet(names, _command(), router=app.inventory.router is not None):
        return _fleet_roll(app, targets, names, spec, tofu=tofu, resume=resume, drain_timeout_s=drain_timeout_s,
                           store=store or RollStore())


def _fleet_roll(app: Caller, targets: TargetSpec, names: list[str], spec: RollSpec | None, *, tofu: bool,
                resume: bool, drain_timeout_s: float, store: RollStore) -> int:
    unfinished = store.unfinished(names)
    words = targets.describe()
    # In a team store the roll may be another machine's: its process then holds its claims, which ours excluded.
    if unfinished is not None and store.team is None and process_alive(unfinished.pid):
        raise ConfigError(f"fleet roll {unfinished.id} ({unfinished.command}) is still running (pid "
                          f"{unfinished.pid}) on hosts {', '.join(unfinished.host_names)}",
                          fix="wait for it to finish; `deploy status " + words + "` shows the hosts meanwhile")
    if resume:
        if unfinished is None:
            raise ConfigError(f"no unfinished fleet roll of {words} to resume",
                              fix=f"start one with `deploy roll {words} --set K=V`; `deploy rollback {words}` "
                                  "reverts the last finished one")
        roll = unfinished
        roll.pid = _own_pid()
        roll.notes.append(f"resumed {now_text()} by {_command()}")
    else:
        if unfinished is not None:
            rolled = [h.host for h in unfinished.hosts if h.state in ("rolled", "in_progress")]
            raise ConfigError(f"fleet roll {unfinished.id} ({unfinished.command}) did not finish: it was "
                              f"interrupted with {len(rolled)} host(s) rolled or in progress "
                              f"({', '.join(rolled) or 'none'})",
                              fix=f"continue it with `deploy roll {words} --resume`, or revert it with "
                                  f"`deploy rollback {words}`; then roll again")
        assert spec is not None
        if spec.max_unavailable < 1:
            raise ConfigError("--max-unavailable must be at least 1", fix="e.g. --max-unavailable 1")
        if spec.stack_profile is not None or spec.stage_only:
            code = _stage(app, names, spec, tofu)
            if code != 0 or spec.stage_only:
                return code
        waves = plan_waves(names, canary=spec.canary, batch=spec.batch)
        wave_of = {n: i for i, w in enumerate(waves) for n in w}
        roll = FleetRoll(id=new_roll_id(), command=_command(), targets=words, inventory=app.inventory_paths,
                         pid=_own_pid(), started=now_text(), updated=now_text(), spec=spec, waves=waves,
                         hosts=[HostRoll(host=n, wave=wave_of[n]) for n in names])
    cancel = threading.Event()
    roller = FleetRoller(app, roll, _host_rolls(app.inventory, roll.spec, tofu, cancel), store, drain_timeout_s,
                         cancel)
    roller.router.check()
    if roller.router.base is None:
        app.out.line("no router: section in the inventory: hosts are rolled without draining")
    else:
        app.out.line(f"router {roller.router.base}: each host is removed (DELETE /workers/{{id}}), drained, rolled, "
                     "and added back (POST /workers) once healthy")
    roller.preflight([h.host for h in roll.hosts if h.state in ("pending", "in_progress")])
    roller.save()
    if resume:
        _free_dead_leases(app, [h.host for h in roll.hosts if h.state == "rolled"], tofu)
    try:
        ok = roller.rejoin_rolled() if resume else True
        ok = ok and roller.run()
    except KeyboardInterrupt as stop:
        _report_interrupted(app, roller, store, int(getattr(stop, "exit_code", 130)))
        raise
    if not ok and roll.spec.rollback_all:
        back = roll.to_revert()
        roller.revert(back, f"--rollback-all: reverting {len(back)} rolled host(s): {', '.join(back) or 'none'}")
    roller.finish("done" if ok else "failed")
    print_report(app, roll, roller.outcomes, _command(), store.where(roll.id), roll.exit_code)
    return roll.exit_code


def fleet_rollback(app: Caller, targets: TargetSpec, *, tofu: bool, drain_timeout_s: float,
                   store: RollStore | None = None, force: bool = False) -> int:
    """`deploy rollback <fleet>`: every host the last fleet roll of these hosts changed goes back to its release."""
    names = [h.name for h in resolve_targets(app.inventory, targets)]
    with claim_fleet(names, _command(), router=app.inventory.router is not None):
        return _fleet_rollback(app, targets, names, tofu=tofu, drain_timeout_s=drain_timeout_s,
                               store=store or RollStore(), force=force)


def _fleet_rollback(app: Caller, targets: TargetSpec, names: list[str], *, tofu: bool, drain_timeout_s: float,
                    store: RollStore, force: bool) -> int:
    roll = store.last(names)
    words = targets.describe()
    if roll is None:
        raise ConfigError(f"no fleet roll of {words} is recorded {store.location}",
                          fix="roll back single hosts with `deploy rollback host X [--to ID]`")
    if roll.state == "running" and process_alive(roll.pid):
        raise ConfigError(f"fleet roll {roll.id} is still running (pid {roll.pid})", fix="wait for it to finish")
    back = roll.to_revert()
    roll.pid = _own_pid()
    roll.notes.append(f"rollback {now_text()} by {_command()}")
    cancel = threading.Event()
    roller = FleetRoller(app, roll, _host_rolls(app.inventory, roll.spec, tofu, cancel), store, drain_timeout_s,
                         cancel)
    roller.router.check()
    for h in roll.hosts:
        if h.state == "pending":
            h.state = "untouched"
    refused = {} if force else roller.stale(back)
    back = [n for n in back if n not in refused]
    # Hosts already on a checked release (rolled back by their own gate) go back first: the revert drains the
    # others, and never the last healthy worker.
    roller.router.rejoin([h for h in roll.hosts if h.host not in back and h.state in ("rolled_back", "rolled")])
    ok = roller.revert(back, f"reverting fleet roll {roll.id} ({roll.command}) on {len(back)} host(s): "
                             f"{', '.join(back) or 'none (no host is on its new flags)'}")
    # Every host the roll touched that is now on a release that passed its checks ends back in the router.
    missing = roller.router.rejoin([h for h in roll.hosts if h.state in ("reverted", "rolled_back", "rolled")])
    roller.finish("reverted" if ok and not missing else "failed")
    code = max([o.exit_code for o in roller.outcomes.values()] + [e.exit_code for e in missing.values()]
               + list(refused.values()), default=0)
    if refused:
        roll.state = "failed"
        roller.save()
    if missing:
        app.out.line(f"NOT back in the router: {', '.join(missing)}: "
                     + "; ".join(f"{n}: {e.what}" for n, e in missing.items())
                     + " (fix: check the host, then `deploy router add HOST`)")
    print_report(app, roll, roller.outcomes, _command(), store.where(roll.id), code)
    return code


def _free_dead_leases(app: Caller, names: list[str], tofu: bool) -> None:
    """The killed run may have ended with a host rolled but its lease not yet released; nothing of this resume
    locks that host again, so the lease is freed here instead of lingering until it expires."""
    for name in names:
        try:
            freed = free_dead_runs_leases(app.inventory.find_host(name), tofu=tofu)
        except DeployError as err:
            app.out.line(f"{name}: the dead run's lease was left to expire ({err.what})")
            continue
        if freed:
            app.out.line(f"{name}: freed the lease of dead run(s) {', '.join(freed)}")


def _report_interrupted(app: Caller, roller: FleetRoller, store: RollStore, code: int) -> None:
    """The record stays unfinished (for --resume); the report says where each host was left, then the signal's
    exit code follows (cli/common.py)."""
    roll = roller.roll
    roll.notes.append(f"interrupted {now_text()}")
    roller.save()
    words = roll.targets
    print_report(app, roll, roller.outcomes, _command(), store.where(roll.id), code)
    app.out.line(f"interrupted: continue with `deploy roll {words} --resume`, or revert with "
                 f"`deploy rollback {words}`")


def _host_rolls(inventory: Inventory, spec: RollSpec, tofu: bool, cancel: threading.Event | None = None) -> HostRolls:
    options = RunOptions(preset=spec.preset, skip_bench=spec.skip_bench, tofu=tofu, command=_command(),
                         cancel=cancel)
    return HostRolls(inventory, roll_request(spec), options)


def _stage(app: Caller, names: list[str], spec: RollSpec, tofu: bool) -> int:
    """Build the profile's stack on every host, in parallel, while they serve; print each host's outcome. Exit 0
    when every host has it, else the worst host's code (and no host is restarted)."""
    from orchestrator.fleet.stage import stage_stacks

    if spec.stack_profile is None:
        raise ConfigError("--stage-only stages a profile's stack", fix="add --profile P")
    app.out.line(f"staging the stack of profile {spec.stack_profile} on {len(names)} host(s), in parallel, while "
                 "they serve")
    staged = stage_stacks(app.inventory, names, roll_request(spec),
                          RunOptions(tofu=tofu, command=_command()), DEFAULT_PARALLEL)
    for s in staged:
        app.out.line(s.line())
    failed = [s for s in staged if not s.ok]
    if failed or spec.stage_only:  # else the roll's own document follows
        app.out.emit({"ok": not failed, "staged": [s.to_dict() for s in staged],
                      "exit_code": max((s.exit_code or 1 for s in failed), default=0)})
    if failed:
        app.out.line(f"stage failed on {', '.join(s.host for s in failed)}: no host was restarted")
        return max(s.exit_code or 1 for s in failed)
    app.out.line("stack staged on every host" + ("; --stage-only: nothing restarted" if spec.stage_only else
                                                  "; rolling canary first"))
    return 0


def _own_pid() -> int:
    return os.getpid()
