"""Steps are plain functions `check → change → verify` sharing one context; playbooks list them by name.

A step reads facts (gathered for all steps in one SSH round trip), decides, changes only what differs, and
records what it did in its StepRecord. In dry-run a step records `would-change` and changes nothing.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.engine.state import FailureHandler, RunInputs, RunState
from orchestrator.facts import CtFact, Facts, HostFact
from orchestrator.inventory.models import Host, Inventory, ServerProfile
from orchestrator.locks.lease import HostLease
from orchestrator.remote.container import Container, Node
from orchestrator.runlog import Metrics, StepRecord


@dataclass
class RunOptions:
    dry_run: bool = False
    allow_no_p2p: bool = False
    skip_weights: bool = False
    skip_bench: bool = False
    #: Bench even when the run changed nothing (`up --bench`): a converged host serves users, so by default its
    #: throughput check runs only after a change (docs/up.md).
    bench: bool = False
    tofu: bool = False
    preset: str | None = None
    command: str = "deploy"
    #: Set by a fleet run's main thread on Ctrl-C/SIGTERM/SIGHUP: the run stops before its next step, through the
    #: same failure path as a failed step (the roll's rollback, then the lease's release).
    cancel: threading.Event | None = None


@dataclass
class StepContext:
    host: Host
    profile: ServerProfile
    inventory: Inventory
    ssh: Node
    metrics: Metrics
    facts: Facts
    options: RunOptions
    # The container on this host (commands, scripts, files, paths): steps never build container commands.
    ct: Container
    say: Callable[[str], None] = print
    # What the command asked for, and what steps hand to later steps (and back to the command).
    inputs: RunInputs = field(default_factory=RunInputs)
    state: RunState = field(default_factory=RunState)
    records: list[StepRecord] = field(default_factory=list)
    # Options the playbook gave the running step, e.g. `{step: health, timeout_s: 600}`.
    step_options: dict[str, Any] = field(default_factory=dict)
    # The playbook's step names (their facts are gathered together), run-level undo and cleanup.
    playbook_steps: list[str] = field(default_factory=list)
    on_failure: FailureHandler | None = None
    cleanups: list[Callable[[], object]] = field(default_factory=list)
    # This run's lease on the host (the `lock` step takes it, `unlock` frees it); None in dry runs and reads.
    host_lock: HostLease | None = None

    @property
    def vmid(self) -> int:
        return self.host.container.vmid


StepFn = Callable[[StepContext, StepRecord], None]


@dataclass(frozen=True)
class GateSpec:
    """What a step that judges a release declares on its `@step(…, gate=GateSpec(…))`: every list of gates (the
    published gates and rollback reasons, a tune's crash steps) derives from these, so a new gate is one
    declaration (steps/__init__.py gate_registry; docs/development.md "… a gate")."""

    #: The gate its pass or failure is published as (`deploy_gate_passed{gate=…}`): "" its step's own name, None
    #: not published (`gate` publishes as "throughput": it judges what the `throughput` step measured).
    publishes: str | None = ""
    #: What a roll rolled back by its failure counts under (`deploy_rollbacks_total{reason=…}`): "" its step's name.
    rollback_reason: str = ""
    #: It asks whether the server serves at all (health, smoke): a tune's point that fails it crashed, which is no
    #: verdict on its flags' performance.
    serving: bool = False


@dataclass(frozen=True)
class Step:
    name: str
    fn: StepFn
    doc: str
    # The facts (orchestrator.facts.HOST / CT) this step reads; gathered up front in one round trip.
    host_facts: tuple[HostFact[Any], ...] = ()
    ct_facts: tuple[CtFact[Any], ...] = ()
    #: Set when the step is a gate (its declaration); None for every other step.
    gate: GateSpec | None = None

    @property
    def published_gate(self) -> str | None:
        """The gate name its result is published as; None: not a gate, or a gate that does not publish."""
        if self.gate is None or self.gate.publishes is None:
            return None
        return self.gate.publishes or self.name

    @property
    def rollback_reason(self) -> str:
        """The reason a rollback after its failure counts under: a gate's declared one, else the step's name."""
        return (self.gate.rollback_reason if self.gate is not None else "") or self.name


REGISTRY: dict[str, Step] = {}


def step(name: str, *, host_facts: tuple[HostFact[Any], ...] = (), ct_facts: tuple[CtFact[Any], ...] = (),
         gate: GateSpec | None = None) -> Callable[[StepFn], StepFn]:
    def register(fn: StepFn) -> StepFn:
        REGISTRY[name] = Step(name, fn, (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "",
                              host_facts, ct_facts, gate)
        return fn

    return register


def mark_change(record: StepRecord, ctx: StepContext, what: str) -> bool:
    """Record a change; returns False in dry-run so the caller skips doing it."""
    record.changes.append(what)
    if ctx.options.dry_run:
        record.status = "would-change"
        return False
    record.status = "changed"
    return True


#: The modules that define steps: importing them fills REGISTRY (by name, so the engine imports no step).
STEP_MODULES = (
    "orchestrator.steps.session",
    "orchestrator.steps.host",
    "orchestrator.steps.cluster",
    "orchestrator.steps.container",
    "orchestrator.steps.packages",
    "orchestrator.steps.gpu",
    "orchestrator.steps.software",
    "orchestrator.steps.locking",
    "orchestrator.steps.p2p",
    "orchestrator.steps.checks",
    "orchestrator.steps.correctness",
    "orchestrator.steps.gate",
    "orchestrator.steps.release",
    "orchestrator.steps.server",
    "orchestrator.steps.roll",
    "orchestrator.steps.status",
    "orchestrator.steps.watchdog",
    "orchestrator.steps.remedy",
    "orchestrator.steps.power",
)


def load_all_steps() -> dict[str, Step]:
    for module in STEP_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
    return REGISTRY


#: The reasons a rollback counts under besides a gate's: an interrupted roll's candidate restored by the next run
#: (steps/release.py restore_interrupted), `deploy rollback`, and a failed step that is no gate.
OTHER_ROLLBACK_REASONS = ("interrupted", "manual", "other")


@dataclass(frozen=True)
class GateRegistry:
    """Every list of gates, derived from the steps' `gate=GateSpec(…)` declarations (registry order)."""

    #: Step name → the gate it publishes as (`deploy_gate_passed{gate}`), for each gate that publishes.
    published: dict[str, str]
    #: The gate names published, each once.
    gates: tuple[str, ...]
    #: Every `deploy_rollbacks_total{reason}`: each gate's rollback reason, then OTHER_ROLLBACK_REASONS.
    rollback_reasons: tuple[str, ...]
    #: The gates that ask whether the server serves at all (a tune reads their failure as a crash).
    serving: frozenset[str]


def gate_registry() -> GateRegistry:
    """The gate lists of the steps as declared (loads every step module first)."""
    gates = [s for s in load_all_steps().values() if s.gate is not None]
    published = {s.name: s.published_gate for s in gates if s.published_gate is not None}
    reasons = dict.fromkeys([*(s.rollback_reason for s in gates), *OTHER_ROLLBACK_REASONS])
    return GateRegistry(published=published, gates=tuple(dict.fromkeys(published.values())),
                        rollback_reasons=tuple(reasons),
                        serving=frozenset(s.name for s in gates if s.gate is not None and s.gate.serving))
