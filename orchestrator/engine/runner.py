"""Run a playbook's steps against one host and report what each did, how long it took and what it cost."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.engine.state import RunInputs, RunState
from orchestrator.engine.step import REGISTRY, RunOptions, StepContext, load_all_steps
from orchestrator.errors import DeployError, Interrupted, RemoteError
from orchestrator.facts import Facts
from orchestrator.inventory.models import Host, Inventory, ServerProfile
from orchestrator.locks.claims import claim_hosts
from orchestrator.monitoring.notify import deliver
from orchestrator.parsers import ParseError
from orchestrator.playbooks import Playbook, load_playbook
from orchestrator.remote.container import Container
from orchestrator.remote.ssh import SshHost
from orchestrator.runlog import Metrics, StepRecord

ProgressFn = Callable[[str, StepRecord | None], None]


@dataclass
class RunReport:
    host: str
    playbook: str
    dry_run: bool
    ok: bool = True
    error: dict[str, Any] | None = None
    steps: list[StepRecord] = field(default_factory=list)
    duration_s: float = 0.0
    ssh_connects: int = 0
    ssh_round_trips: int = 0
    api_calls: int = 0
    # What the steps produced (release, bench runs, gate, status …), typed: see orchestrator.steps.state.
    state: RunState = field(default_factory=RunState)
    # The error that stopped the run (`error` is its to_dict(), flat in to_dict()); None when every step passed.
    failure: DeployError | None = field(default=None, repr=False)

    @property
    def changed(self) -> bool:
        return any(s.status in ("changed", "would-change") for s in self.steps)

    def round_trips_before(self, step_name: str) -> int:
        total = 0
        for s in self.steps:
            if s.name == step_name:
                break
            total += s.ssh_round_trips
        return total

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "host": self.host,
            "playbook": self.playbook,
            "dry_run": self.dry_run,
            "changed": self.changed,
            "summary": ("would change" if self.dry_run else "changed") if self.changed else "no changes",
            "steps": [s.to_dict() for s in self.steps],
            "totals": {
                "duration_s": round(self.duration_s, 3),
                "ssh_connects": self.ssh_connects,
                "ssh_round_trips": self.ssh_round_trips,
                "ssh_round_trips_before_smoke": self.round_trips_before("smoke"),
                "api_calls": self.api_calls,
            },
            **(self.error or {}),  # a failed run: the error's code, what, fix, host, step, exit_code
        }


def unreadable_output(exc: ParseError) -> RemoteError:
    """A step's parser met text it does not know (an error message instead of output, a cut-off read): a remote
    failure that says what was expected and shows the start of what came, where the step ran, not a traceback."""
    return RemoteError(f"the host's answer could not be read: {exc}",
                       fix="run again; if it repeats, run that command on the host by hand: its output is not what "
                           "deploy expects (an error of the tool itself, or another version of it)",
                       details={"expected": exc.what, "excerpt": exc.excerpt})


def run_playbook(name: str, host: Host, inventory: Inventory, options: RunOptions,
                 progress: ProgressFn | None = None, say: Callable[[str], None] | None = None,
                 inputs: RunInputs | None = None) -> RunReport:
    """Run every step in order; the first failure stops the run and is re-raised after cleanup."""
    report = run_playbook_to_end(name, host, inventory, options, progress, say, inputs)
    if report.failure is not None:
        raise report.failure
    return report


def run_playbook_to_end(name: str, host: Host, inventory: Inventory, options: RunOptions,
                        progress: ProgressFn | None = None, say: Callable[[str], None] | None = None,
                        inputs: RunInputs | None = None) -> RunReport:
    """Like run_playbook, but a failed step ends the run with the report (its `failure` set) instead of raising:
    a caller that decides on what the run left behind (a roll's rollback) reads the state of a failed run too.
    Errors before the first step (the playbook, the profile) still raise.

    A playbook that takes the host's lease (a `lock` step) first claims the host on this machine, shared
    (locks/claims.py), unless it is a dry run: so a command that owns the host for longer than one run (a fleet
    roll, a tune) refuses it before anything is planned, instead of meeting it between two of its runs."""
    load_all_steps()
    playbook = load_playbook(name, REGISTRY)
    profile = inventory.profile_for(host)
    with contextlib.ExitStack() as stack:
        if not options.dry_run and any(ref.name == "lock" for ref in playbook.steps):
            stack.enter_context(claim_hosts([host.name], options.command, exclusive=False))
        return _run_steps(playbook, host, inventory, profile, options, progress, say, inputs)


def _run_steps(playbook: Playbook, host: Host, inventory: Inventory, profile: ServerProfile, options: RunOptions,
               progress: ProgressFn | None, say: Callable[[str], None] | None, inputs: RunInputs | None
               ) -> RunReport:
    metrics = Metrics()
    ssh = SshHost(host, metrics=metrics, tofu=options.tofu)
    # `vmid: auto` is resolved by the connect step (steps/vmid.py), before any command names the container; a
    # playbook without it reads `vmid`, which then says how to resolve it.
    auto = host.container.vmid_auto and any(ref.name == "connect" for ref in playbook.steps)
    container = Container(ssh, 0 if auto else host.container.vmid)
    ctx = StepContext(host=host, profile=profile, inventory=inventory, ssh=ssh, metrics=metrics,
                      facts=Facts(ssh, host, profile, container), options=options, ct=container,
                      say=say or (lambda _msg: None), inputs=inputs or RunInputs(),
                      playbook_steps=[ref.name for ref in playbook.steps])
    report = RunReport(host=host.name, playbook=playbook.name, dry_run=options.dry_run)
    start = time.monotonic()
    notify = progress or (lambda _m, _r: None)
    try:
        for ref in playbook.steps:
            record = StepRecord(ref.name)
            report.steps.append(record)
            ctx.records.append(record)
            notify(ref.name, None)
            ctx.step_options = dict(ref.options)
            with metrics.step(record):
                try:
                    if options.cancel is not None and options.cancel.is_set():
                        raise Interrupted(f"stopped before {ref.name}: the fleet run was interrupted",
                                          fix="the host is left on its previous release; resume or roll back "
                                              "the fleet roll")
                    try:
                        REGISTRY[ref.name].fn(ctx, record)
                    except ParseError as exc:
                        raise unreadable_output(exc) from exc
                except DeployError as err:
                    record.status = "failed"
                    record.summary = err.what
                    err.at(host=host.name, step=ref.name)
                    # A rollout registers how to undo itself (roll back to the previous release).
                    handler, ctx.on_failure = ctx.on_failure, None
                    if handler is not None:
                        handler(err, record)
                    raise err from None
            notify(ref.name, record)
    except DeployError as err:
        report.ok = False
        report.error = err.to_dict()
        report.failure = err
    except KeyboardInterrupt as stop:  # a signal: the command files what the run measured (commands/filing.py)
        stop.report = report  # type: ignore[attr-defined]  # completed by `finally` below, before it propagates
        raise
    finally:
        cleanups, ctx.cleanups = ctx.cleanups, []
        for cleanup in cleanups:
            try:
                cleanup()
            except Exception:  # cleanup must not hide the real error
                pass
        ssh.close()
        try:  # after the lock's release, whose round trip published the metrics the events come from
            deliver(inventory.notify, ctx.state.events, ctx.say)
        except Exception:  # a receiver's fault must not hide the run's own result
            pass
        report.duration_s = time.monotonic() - start
        report.ssh_connects = metrics.ssh_connects
        report.ssh_round_trips = metrics.ssh_round_trips
        report.api_calls = metrics.api_calls
        report.state = ctx.state
    return report
