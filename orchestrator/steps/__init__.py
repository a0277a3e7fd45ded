"""Steps of the pipeline, one module per concern; importing them fills the registry playbooks refer to.

The module list and its loader live in steps/base.py (the engine's side), so the runner loads the steps without
importing this package."""

from __future__ import annotations

from orchestrator.engine.step import REGISTRY, STEP_MODULES, Step, StepContext, load_all_steps, step

__all__ = ["REGISTRY", "STEP_MODULES", "Step", "StepContext", "load_all_steps", "step"]
