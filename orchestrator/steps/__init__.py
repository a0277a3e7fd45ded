"""Steps of the pipeline, one module per concern; importing them fills the registry playbooks refer to, and the
gates among them (`@step(…, gate=GateSpec(…))`) give every list of gates (gate_registry)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from orchestrator.steps.base import REGISTRY, GateSpec, Step, StepContext, step

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
    "orchestrator.steps.throughput",
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


__all__ = ["OTHER_ROLLBACK_REASONS", "REGISTRY", "GateRegistry", "GateSpec", "Step", "StepContext", "gate_registry",
           "load_all_steps", "step"]
