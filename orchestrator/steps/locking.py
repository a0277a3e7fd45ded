"""`deploy lock`: the profile's stack resolved once in a host's container, every distribution pinned with its hash.

The resolution is pip's own (`pip install --dry-run --ignore-installed --report -`) in a throwaway venv, against the
host's index, so the lock names exactly the files that index serves; nothing on the host changes.
"""

from __future__ import annotations

import shlex
from datetime import UTC, datetime

from orchestrator.engine.step import StepContext, step
from orchestrator.errors import CheckFailed, RemoteError
from orchestrator.facts import CT
from orchestrator.facts.reads import RESOLVED
from orchestrator.runlog import StepRecord
from orchestrator.stacks.lock import SourceOnly, constraints_text, render_lock
from orchestrator.stacks.stack import Stack, pip_cache_env
from orchestrator.steps.session import ensure_facts
from orchestrator.steps.software import profile_stack

#: The throwaway venv the resolution runs in (removed in the same command).
LOCK_VENV = "/tmp/deploy-lock-venv"


def resolve_command(stack: Stack) -> str:
    """pip's resolution in a throwaway venv of the container's own python3, with the stack's constraints (`-c`), its
    downloads in the managed pip cache the build then reuses (PATHS.pip_cache_dir)."""
    venv = shlex.quote(LOCK_VENV)
    constraints = ""
    if stack.constraints:
        file = shlex.quote(f"{LOCK_VENV}/constraints.txt")
        constraints = f"printf '%s' {shlex.quote(constraints_text(stack.constraints))} > {file} && "
    return (f"rm -rf {venv} && python3 -m venv {venv} && {constraints}{pip_cache_env()} {venv}/bin/pip install "
            f"--disable-pip-version-check --quiet --dry-run --ignore-installed --report -{stack.index_options}"
            + (f" -c {shlex.quote(f'{LOCK_VENV}/constraints.txt')}" if stack.constraints else "")
            + f" {shlex.quote(stack.requirement)}; rc=$?; rm -rf {venv}; exit $rc")


@step("stack_lock", ct_facts=(CT.sglang_version,))  # a container fact: whether it runs
def stack_lock(ctx: StepContext, record: StepRecord) -> None:
    """Resolve the stack in the container; the command writes the lock file (ctx.state.lock_text)."""
    ensure_facts(ctx)
    if not ctx.facts.ct_running:
        raise CheckFailed(f"CT {ctx.vmid} is not running: the stack is resolved in the container",
                          fix=f"deploy up host {ctx.host.name}", host=ctx.host.name)
    stack = profile_stack(ctx)
    try:
        res = ctx.ct.read_output(resolve_command(stack), RESOLVED, timeout=1800, what=f"resolve {stack.requirement}")
        if res.value is None:
            raise ValueError(res.said(500))
        lock, target = res.value
    except SourceOnly as exc:
        raise CheckFailed(f"resolving {stack.requirement} in CT {ctx.vmid}: {exc}", fix=exc.fix,
                          host=ctx.host.name) from exc
    except ValueError as exc:
        raise RemoteError(f"resolving {stack.requirement} in CT {ctx.vmid} failed: {exc}",
                          fix="check the container's index (container.pip_index_url) and that the pin exists there",
                          host=ctx.host.name) from exc
    ctx.state.lock_text = render_lock(lock, profile=ctx.host.profile, requirement=stack.requirement,
                                      index=stack.index_options, host=ctx.host.name,
                                      at=datetime.now(UTC).isoformat(timespec="seconds"),
                                      target=target, constraints=stack.constraints)
    record.summary = f"{len(lock.entries)} distributions of {stack.requirement} resolved in CT {ctx.vmid}"
