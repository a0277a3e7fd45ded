"""Staging a stack on a fleet: `roll group G --profile P` builds P's stack on every host first, in parallel and
while they serve (the `stage-stack` playbook: roll_stack under the host's lease), so that the canary and the waves
that follow restart onto a stack already there, with no pip run between a drain and a restart."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from orchestrator.engine.runner import run_playbook_to_end
from orchestrator.engine.state import RollRequest, RunInputs
from orchestrator.engine.step import RunOptions
from orchestrator.errors import DeployError
from orchestrator.inventory.models import Inventory


@dataclass(frozen=True)
class Staged:
    """One host's staging: what roll_stack said, or the error that stopped it."""

    host: str
    ok: bool
    summary: str
    seconds: float
    exit_code: int = 0

    def line(self) -> str:
        return f"  {self.host}: {'staged' if self.ok else 'failed'}  {self.summary}  ({self.seconds:.1f} s)"

    def to_dict(self) -> dict[str, object]:
        return {"host": self.host, "ok": self.ok, "summary": self.summary, "seconds": round(self.seconds, 2),
                "exit_code": self.exit_code}


def stage_host(inventory: Inventory, name: str, request: RollRequest, options: RunOptions) -> Staged:
    start = time.monotonic()
    try:
        host = inventory.find_host(name)
        if request.stack_profile is not None:
            host = host.model_copy(update={"profile": request.stack_profile})
        report = run_playbook_to_end("stage-stack", host, inventory, options, inputs=RunInputs(roll=request))
    except DeployError as err:
        return Staged(name, False, err.what, time.monotonic() - start, err.exit_code)
    if report.failure is not None:
        return Staged(name, False, report.failure.what, time.monotonic() - start, report.failure.exit_code)
    rec = next((r for r in report.steps if r.name == "roll_stack"), None)
    return Staged(name, True, rec.summary if rec is not None else "", time.monotonic() - start)


def stage_stacks(inventory: Inventory, names: list[str], request: RollRequest, options: RunOptions,
                 parallel: int) -> list[Staged]:
    """Every host's stage, at most `parallel` at once, in the order of `names`."""
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(names)))) as pool:
        return list(pool.map(lambda n: stage_host(inventory, n, request, options), names))
