"""What a run did that an operator must hear of without running a command: pure, from the metrics it publishes.

A rollback (automatic after a failed gate, or asked for) and a watchdog that spent its restart budget are the
events the alert rules also fire on (rules.yaml); a webhook hears of them at the end of the run that saw them,
minutes before a scrape-and-rule cycle would. Each event carries the command that diagnoses it.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.monitoring.state import MetricsState, Observation


@dataclass(frozen=True)
class Event:
    kind: str  # "rollback" | "watchdog_exhausted": the alert it matches is ALERTS[kind]
    host: str
    release: str | None  # the release current after the run
    at: float  # unix seconds
    summary: str
    description: str
    diagnose: str
    severity: str  # "warning" | "critical", as the matching alert rule
    resolved: bool = False  # the condition ended (a cordoned host returned)


#: The shipped alert each event kind matches (rules.yaml), so a receiver can group both.
ALERTS = {"rollback": "DeployReleaseRolledBack", "watchdog_exhausted": "DeployWatchdogExhausted",
          "gpu_fault": "DeployGpuFault"}


def events_of(host: str, prev: MetricsState, obs: Observation) -> list[Event]:
    """The events of one run on `host`: each rollback it made, and the watchdog found exhausted when the carried
    state (the last publish) did not say so already (once per exhaustion, not once per run)."""
    found = [Event("rollback", host, obs.release, rb.at,
                   summary=f"{host}: release {rb.candidate} rolled back to {rb.to} ({rb.reason})",
                   description=f"deploy {obs.command} on {host} left release {rb.candidate} for {rb.to}; reason: "
                               f"{rb.reason}",
                   diagnose=f"deploy history host {host}", severity="warning")
             for rb in obs.rollbacks]
    wd = obs.watchdog
    was = prev.watchdog.state if prev.watchdog is not None else None
    if wd is not None and wd.state == "exhausted" and was != "exhausted":
        found.append(Event("watchdog_exhausted", host, obs.release, obs.at,
                           summary=f"{host}: the watchdog gave up ({wd.restarts_in_window} restarts in its window, "
                                   f"budget {wd.budget})",
                           description=f"the server watchdog on {host} spent its restart budget and no longer "
                                       "restarts the server",
                           diagnose=f"deploy status host {host}; deploy history host {host}", severity="critical"))
    return found
