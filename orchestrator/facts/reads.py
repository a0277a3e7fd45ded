"""Typed reads outside the facts batch: what a change's script or a read of its own printed, as the value a step
decides on, each a pure parser of the command's output (as a fact's parser is, `base.py`'s adapters around it).

Why: a step never parses another layer's printed text (`res.stdout`); it asks the remote adapter for a value
(`ctx.ct.read_script(body, SWITCH, …)`, `node_read(ctx.ssh, command, parse, …)`), as it asks the batch for a fact.
`READS` names each for its fixtures, which sit with the facts' (`tests/facts/READ.<name>/`, run by
tests/unit/test_fact_fixtures.py; the router's reads are `orchestrator/router/facts.py`'s `ROUTER_READS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.facts.base import Outcome, if_ok, of_stdout, outcome, outcome_if_ok
from orchestrator.hardware.power_limit import SetOutcome, parse_power_limits, parse_set_output
from orchestrator.parsers.pve import parse_auto_vmid
from orchestrator.releases.documents import ReleaseLine
from orchestrator.releases.store import journal_cursor, not_candidate, release_lines
from orchestrator.remote.batch import CommandOutput
from orchestrator.stacks.kernel_caches import CacheCheck, parse_check
from orchestrator.stacks.lock import Lock, LockTarget, lock_from_report, report_target
from orchestrator.stacks.stack import StackSizes, parse_stack_sizes
from orchestrator.verdicts.server_log import gpu_xids
from orchestrator.watchdog.parse import WatchdogStatus, parse_watchdog_state

#: The line between the release listing and the watchdog's state file in the `history` step's one read.
WATCHDOG_MARK = "__DEPLOY_WATCHDOG_STATE__"


@dataclass(frozen=True)
class Switched:
    """What a release switch (activate_release.sh) reported: the unit's journal cursor before this start and the
    release's kernel cache check."""

    journal_cursor: str | None
    cache: CacheCheck | None


def switch_report(output: str) -> Switched:
    return Switched(journal_cursor(output), parse_check(output))


#: A release switch's outcome: its exit code, `Switched`, the evidence of a failure.
SWITCH = outcome(switch_report)

#: A verdict write's outcome: the guard's refusal (current release, sglang's state) when it refused, else None.
VERDICT_WRITE = outcome(not_candidate)


def current_and_health(output: str) -> tuple[str, str]:
    """`readlink current; curl /health code`: the current release's id ("" when unknown) and the HTTP code ("000"
    when it did not answer)."""
    lines = output.strip().splitlines()
    current = lines[0].rsplit("/", 1)[-1] if lines else ""
    code = lines[-1].strip() if len(lines) > 1 else "000"
    return current, code


#: After a rollback: the current release and /health's code, read together.
CURRENT_AND_HEALTH = of_stdout(current_and_health)


def secret_values(output: str) -> dict[str, Any]:
    """A release's secrets.yaml: its mapping, {} when it is not one (or not YAML)."""
    import yaml  # here: a release's secrets file is read only where a flag refers to it (never cached)

    try:
        loaded = yaml.safe_load(output)
    except yaml.YAMLError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


#: A release's secret flags read on their own: the mapping, None when the file could not be read.
SECRETS = if_ok(secret_values)


def resolved_report(output: str) -> tuple[Lock, LockTarget | None]:
    """pip's dry-run report: the lock it makes and the interpreter it resolved for (ValueError: no usable
    report)."""
    return lock_from_report(output), report_target(output)


#: The stack resolution's outcome: (lock, target) when pip succeeded, else None and pip's evidence.
RESOLVED = outcome_if_ok(resolved_report)


#: Between the release lines and the stacks' sizes in the round trip that records a new stack.
SIZES_MARK = "__DEPLOY_STACK_SIZES__"


@dataclass(frozen=True)
class StackRecorded:
    """What the script that records a stack printed after the record: the release lines and the stacks' and the pip
    cache's sizes in bytes (both empty when it was asked for neither)."""

    releases: list[ReleaseLine]
    sizes: StackSizes


def stack_recorded(output: str) -> StackRecorded:
    releases, _, sized = output.partition(f"{SIZES_MARK}\n")
    return StackRecorded(release_lines(releases), parse_stack_sizes(sized))


#: A stack record's write: its exit code, what the script run after it printed, the evidence of a failure.
STACK_RECORDED = outcome(stack_recorded)
#: A prune of stacks and the pip cache (and, with a disk budget, the sizes read after it).
STACKS_PRUNED = outcome(parse_stack_sizes)


@dataclass(frozen=True)
class PowerSet:
    """What `nvidia-smi -pl` (or the power unit's apply script) reported: exit 0, what it set and refused, and
    its words in one line (the end of both streams, for the refusal's message)."""

    ok: bool
    said: SetOutcome
    words: str


def power_set(out: CommandOutput) -> PowerSet:
    both = out.stdout + out.stderr
    return PowerSet(out.ok, parse_set_output(both), " ".join(both.split())[-300:])


@dataclass(frozen=True)
class History:
    """The `history` step's one read: the release listing and the watchdog's state."""

    releases: list[ReleaseLine]
    watchdog: WatchdogStatus


def history_report(out: CommandOutput) -> History | None:
    """None when the container is not running (the failed read says so in either stream)."""
    if out.rc != 0 and ("not running" in out.stdout or "not running" in out.stderr):
        return None
    releases, _, state = out.stdout.partition(f"{WATCHDOG_MARK}\n")
    return History(release_lines(releases), parse_watchdog_state(state))


#: `vmid: auto`'s one read on the node: the recorded VMID, the cluster's next id and its guests.
AUTO_VMID = of_stdout(parse_auto_vmid)
#: The GPUs' power limits read back after a change (the `HOST.power_limits` command, run with check=True).
POWER_LIMITS = of_stdout(parse_power_limits)
#: The host kernel log's GPU Xid lines, read after a failed health wait.
GPU_XIDS = of_stdout(gpu_xids)

#: Every read by its fixture folder's name (`tests/facts/READ.<name>/`).
READS: dict[str, Callable[[CommandOutput], Any]] = {
    "switch": SWITCH, "verdict_write": VERDICT_WRITE, "current_and_health": CURRENT_AND_HEALTH, "secrets": SECRETS,
    "resolved": RESOLVED, "power_set": power_set, "history": history_report, "auto_vmid": AUTO_VMID,
    "power_limits": POWER_LIMITS, "gpu_xids": GPU_XIDS, "stack_recorded": STACK_RECORDED,
    "stacks_pruned": STACKS_PRUNED}


__all__ = [
    "AUTO_VMID",
    "CURRENT_AND_HEALTH",
    "GPU_XIDS",
    "POWER_LIMITS",
    "READS",
    "RESOLVED",
    "SECRETS",
    "SIZES_MARK",
    "STACKS_PRUNED",
    "STACK_RECORDED",
    "SWITCH",
    "VERDICT_WRITE",
    "WATCHDOG_MARK",
    "History",
    "Outcome",
    "PowerSet",
    "StackRecorded",
    "Switched",
    "current_and_health",
    "history_report",
    "power_set",
    "resolved_report",
    "secret_values",
    "stack_recorded",
    "switch_report",
]
