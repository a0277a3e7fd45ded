"""Facts: what the steps read from the host and the container, each a typed value, gathered in ONE round trip.

- `base.py`: `Fact[T]` (name, command, parser), `HostFact`/`CtFact`/`RouterFact`, `Read[T]`, the parser adapters;
- `host.py`: the node's facts (`HOST.x`); `container.py`: the container's (`CT.x`) and their command builders;
- `reads.py`: the typed reads outside the batch (what a change's script or a read of its own printed, as the
  value a step decides on; `READS` by name for their fixtures);
- `gather.py`: `Facts` (the one batch read, boot settle, `get` → the parsed value) and the settled container batch
  that the router's facts share (`ROUTER.x` live in orchestrator/router/facts.py: the router package imports
  this one, never the other way round).
"""

from __future__ import annotations

from orchestrator.facts.base import CmdFn, CtFact, Fact, HostFact, Read, RouterFact
from orchestrator.facts.container import (
    CT,
    CT_PACKAGES,
    WATCHDOG_FILES,
    current_stack_dists_command,
    health_code_command,
    sglang_version_command,
    sglang_version_of,
    stacks_listing_command,
)
from orchestrator.facts.gather import (
    BOOT_STATES,
    BOOT_UNSETTLED,
    BOOT_WAIT_S,
    CT_FACTS,
    HOST_FACTS,
    SETTLE_BOOT,
    Facts,
    settle_boot_script,
    settled_batch,
    split_settled,
)
from orchestrator.facts.host import CLUSTER_COMMAND, HOST, SmiAnswer

__all__ = ["BOOT_STATES", "BOOT_UNSETTLED", "BOOT_WAIT_S", "CLUSTER_COMMAND", "CT", "CT_FACTS", "CT_PACKAGES",
           "HOST", "HOST_FACTS", "SETTLE_BOOT", "WATCHDOG_FILES", "CmdFn", "CtFact", "Fact", "Facts", "HostFact",
           "Read", "RouterFact", "SmiAnswer", "current_stack_dists_command", "health_code_command",
           "settle_boot_script", "settled_batch", "sglang_version_command", "sglang_version_of", "split_settled",
           "stacks_listing_command"]
