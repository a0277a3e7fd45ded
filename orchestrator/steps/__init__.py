"""Steps of the pipeline, one module per concern; importing them fills the registry playbooks refer to, and the
gates among them (`@step(…, gate=GateSpec(…))`) give every list of gates (gate_registry).

The module list, its loader and the gate lists live in engine/step.py (the engine's side), so the runner loads the
steps without importing this package."""

from __future__ import annotations

from orchestrator.engine.step import (
    OTHER_ROLLBACK_REASONS,
    REGISTRY,
    STEP_MODULES,
    GateRegistry,
    GateSpec,
    Step,
    StepContext,
    gate_registry,
    load_all_steps,
    step,
)

__all__ = ["OTHER_ROLLBACK_REASONS", "REGISTRY", "STEP_MODULES", "GateRegistry", "GateSpec", "Step", "StepContext",
           "gate_registry", "load_all_steps", "step"]
