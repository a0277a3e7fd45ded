"""What `deploy watch` may do about a host's worst hardware fault, under the operator's `health:` policy (pure).

Why a policy and not the catalog alone: the catalog says what a fault needs (restart, reboot, isolate); whether
the tool does it unattended is the operator's call. A reboot stops every request on the node, so it is never
automatic unless `health.reboot` is true, and never while another host of the fleet is out of the router (two
hosts out at once is the outage a fleet exists to avoid). A failed row remap has no remedy in place: the host is
kept out until the GPU is swapped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from orchestrator.hardware.catalog import Action
from orchestrator.inventory.models import HealthPolicy

#: restart / reboot: the watch drains the host and runs it; keep_out: drained and held (no remedy in place);
#: manual: drained and held, the remedy left to the operator (policy); wait: allowed, but not now; report: not
#: acted on (doctor and status show it); none: nothing to do.
Remedy = Literal["restart", "reboot", "keep_out", "manual", "wait", "report", "none"]


@dataclass(frozen=True)
class RemedyPlan:
    """The watch's answer for one host this cycle: what it does, and the one line that says why when it does not
    remedy (empty when it does)."""

    remedy: Remedy
    why: str = ""

    @property
    def drains(self) -> bool:
        """The host must be out of the router: a remedy runs (or is held) while no client reaches it."""
        return self.remedy not in ("report", "none")

    @property
    def runs(self) -> bool:
        return self.remedy in ("restart", "reboot")


def plan_remedy(action: Action, policy: HealthPolicy, *, host: str, others_out: Sequence[str] = (),
                gpu: str = "the faulty GPU") -> RemedyPlan:
    """The remedy for `host`'s worst action (`HardwareState.action`), given which other hosts of the fleet are out
    of the router now."""
    if action == Action.none:
        return RemedyPlan("none")
    if action == Action.restart_unit:
        if not policy.restart:
            return RemedyPlan("report", "health.restart is false: the Xid is reported (deploy doctor), the server "
                                        f"keeps serving; restart it yourself (`deploy up host {host}`)")
        return RemedyPlan("restart")
    if action == Action.isolate_gpu:
        if not policy.isolate:
            return RemedyPlan("report", f"health.isolate is false: {gpu} is reported (deploy doctor) and the host "
                                        "keeps serving until you take it out")
        return RemedyPlan("keep_out", f"{gpu} cannot be repaired in place (isolate_gpu): the host stays out of the "
                                      "router until the GPU is swapped; then `deploy up host "
                                      f"{host}` and the watch returns it once its sensors read clean")
    if not policy.reboot:
        return RemedyPlan("manual", "a reboot is not automatic (health.reboot: false): reboot the node yourself "
                                    "(`systemctl reboot` on it), or allow it with `health: {reboot: "
                                    "true}`; the watch returns the host once its sensors read clean and it serves")
    if others_out:
        return RemedyPlan("wait", f"the reboot waits: {', '.join(others_out)} "
                                  f"{'is' if len(others_out) == 1 else 'are'} out of the router too (a host is never "
                                  "rebooted while another host of the fleet is out); tried again next cycle")
    return RemedyPlan("reboot")
