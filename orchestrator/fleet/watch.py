"""`deploy watch group G`: GPU hardware faults acted on without an operator command (issue 39: cordon and return).

Why a loop on the operator machine (meant to run under systemd, or once from a timer with `--once`): it is where
the router and every host are reachable, and a fault must take a host out of the router before clients see its
errors. Each cycle reads every host's sensors with the status playbook (one round trip a host: the same facts
`deploy status` reads) and acts on the catalog's action (hardware/catalog.py):
- **cordon**: a host with a fatal fault (a reboot, reset or isolation is needed) that the router lists is drained
  out of it, like `deploy router remove` (never the last serving worker: that is said, and retried next cycle);
- **return**: a host that this watch cordoned, whose sensors read clean again and whose server answers /health,
  is added back with every add-back check (`deploy router add`).
The remedy itself (a reboot, a GPU taken out) stays the operator's: a reboot is never automatic here. Each action
holds the host's and the router's claim only while it runs (a fleet roll in progress makes it wait a cycle), is
said on one line, recorded in the watch's state file (which hosts it cordoned, since when, why), and posted to the
inventory's `notify:` webhook.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator.errors import DeployError, LockHeld
from orchestrator.fleet.fleet_roll import FleetRouter
from orchestrator.hardware.state import HardwareState
from orchestrator.inventory.models import Inventory
from orchestrator.localfile import write_file
from orchestrator.monitoring.events import Event
from orchestrator.monitoring.notify import deliver
from orchestrator.paths import state_dir
from orchestrator.router.client import RouterClient
from orchestrator.router.drain import Drainer
from orchestrator.state.claims import claim_fleet

Decision = Literal["cordon", "return", "hold", "none"]


@dataclass(frozen=True)
class Reading:
    """One host's health at one cycle: its GPUs' state (None: unreadable) and whether its server answers."""

    host: str
    hardware: HardwareState | None
    serving: bool
    error: str | None = None

    @property
    def fatal(self) -> bool:
        return self.hardware is not None and self.hardware.fatal

    def why(self) -> str:
        if self.hardware is None:
            return self.error or "sensors unreadable"
        worst = [f"{g.name}: {f.kind}{f' {f.code}' if f.code is not None else ''} ({f.action.value})"
                 for g in self.hardware.faulty for f in g.faults if f.severity == "fail"]
        return "; ".join(worst) or "no fatal fault"


def decide(r: Reading, listed: bool, cordoned: bool) -> Decision:
    """Pure: what the watch does with a host this cycle."""
    if r.fatal and listed:
        return "cordon"
    if cordoned and not listed and not r.fatal and r.hardware is not None and r.serving:
        return "return"
    return "hold" if cordoned else "none"


class WatchState:
    """The hosts this watch took out of the router (a 0600 JSON file per group): only those it puts back."""

    def __init__(self, group: str, root: Path | None = None) -> None:
        self.path = (root or state_dir() / "watch") / f"{group}.json"

    def load(self) -> dict[str, dict[str, str | float]]:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def save(self, cordoned: dict[str, dict[str, str | float]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_file(self.path, json.dumps(cordoned, indent=1, sort_keys=True), mode=0o600)


@dataclass
class Watch:
    inventory: Inventory
    hosts: list[str]
    read: Callable[[str], Reading]
    say: Callable[[str], None]
    state: WatchState
    drain_timeout_s: float = 120.0

    def cycle(self) -> dict[str, Decision]:
        """Read every host, act where the readings say; returns each host's decision."""
        readings = {h: self.read(h) for h in self.hosts}
        side = FleetRouter(self.inventory, self.drain_timeout_s)
        cordoned = self.state.load()
        listed: set[str] = set()
        if side.base is not None:
            with RouterClient(side.base, side.key, timeout_s=10.0) as client:
                listed = {w.url for w in client.list_workers()}
        done: dict[str, Decision] = {}
        for host, r in readings.items():
            url = side.urls.get(host)
            decision = decide(r, url is not None and url in listed, host in cordoned)
            done[host] = decision
            if decision == "cordon" and url is not None:
                self._act(host, url, side, cordoned, r, out=True)
            elif decision == "return" and url is not None:
                self._act(host, url, side, cordoned, r, out=False)
            elif decision == "hold":
                self.say(f"{host}: still out of the router (cordoned {cordoned[host].get('since', '?')}: "
                         f"{cordoned[host].get('why', '?')}); now: {r.why() if r.fatal else 'clean, not serving'}")
            elif r.fatal:
                self.say(f"{host}: fatal GPU fault ({r.why()}), not a listed router worker: nothing to drain")
        self.state.save(cordoned)
        return done

    def _act(self, host: str, url: str, side: FleetRouter, cordoned: dict[str, dict[str, str | float]],
             r: Reading, *, out: bool) -> None:
        verb = "cordon" if out else "return"
        try:
            with claim_fleet([host], f"deploy watch ({verb} {host})", router=True), \
                    RouterClient(side.base or "", side.key) as client:
                drainer = Drainer(client, drain_timeout_s=self.drain_timeout_s, say=self.say,
                                  policy=side.spec.policy if side.spec is not None else None, keys=side.url_keys)
                if out:
                    note = drainer.drain(url).note
                else:
                    took = drainer.restore(url, side.worker_keys.get(host))
                    note = f"added back, healthy after {took:.1f} s"
        except LockHeld as err:
            self.say(f"{host}: {verb} waits for the next cycle: {err.what}")
            return
        except DeployError as err:
            self.say(f"{host}: NOT {'cordoned' if out else 'returned'}: {err.what}")
            return
        now = time.time()
        if out:
            cordoned[host] = {"since": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)), "why": r.why(),
                              "url": url}
            summary = f"{host} cordoned: out of the router ({r.why()})"
            self.say(f"{host}: cordoned ({r.why()}): {note}; remedy it (docs/hardware.md), the watch returns it "
                     "once its sensors read clean and it serves")
        else:
            cordoned.pop(host, None)
            summary = f"{host} returned to the router: its GPUs read clean and it serves"
            self.say(f"{host}: returned: {note}")
        deliver(self.inventory.notify, [Event("gpu_fault", host, None, now, summary=summary,
                                              description=summary, diagnose=f"deploy doctor host {host}",
                                              severity="critical", resolved=not out)], self.say)


def run_watch(watch: Watch, *, once: bool, interval_s: float, for_s: float | None,
              stop: threading.Event | None = None) -> int:
    """Cycle until `for_s` passed (or forever), `interval_s` apart; 1 when the last cycle left a fatal fault."""
    stop = stop or threading.Event()
    began = time.monotonic()
    while True:
        decisions = watch.cycle()
        if once or stop.is_set() or (for_s is not None and time.monotonic() - began + interval_s > for_s):
            return 1 if any(d in ("cordon", "hold") for d in decisions.values()) else 0
        stop.wait(interval_s)
