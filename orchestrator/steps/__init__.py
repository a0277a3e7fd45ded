"""Steps of the pipeline, one module per concern; importing them fills the registry playbooks refer to."""

from __future__ import annotations

import importlib

from orchestrator.steps.base import REGISTRY, Step, StepContext, step

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


__all__ = ["REGISTRY", "Step", "StepContext", "load_all_steps", "step"]
