"""The router's live worker list made what it should be: the healthy hosts in, the others out (issue 25 item 1,
issue 21 item 5).

Why the live list and not the unit file: the worker API changes the running router without touching its unit, so a
host that a failed or interrupted fleet roll took out (`DELETE /workers/{id}`) is missing from `GET /workers` while
the unit still names it. A host is put back only after it answers a real generation with its key (checks.py), so a
broken server is never sent traffic, nor one whose /metrics the add-back could not check the router's reach with
(checks.add_check_error: the one rule of both).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from orchestrator.errors import RemoteError
from orchestrator.inventory.models import Host, Inventory
from orchestrator.remote.http import HttpTransport, Transport
from orchestrator.router.checks import add_check_error
from orchestrator.router.client import LEAVING_WAIT_S, RouterClient
from orchestrator.router.places import SiteAddresses, known_worker_urls, router_workers


@dataclass(frozen=True)
class Worker:
    """A host as the router should know it: its name, its URL and the key its server wants."""

    name: str
    url: str
    key: str | None


def workers_of(inventory: Inventory, addresses: SiteAddresses, hosts: list[Host] | None = None) -> list[Worker]:
    """The router's workers from the inventory (all of them, or those among `hosts`), with each one's key; a host
    whose container address is not known (stopped, no lease) is left out: it cannot serve."""
    names = {h.name for h in hosts} if hosts is not None else None
    urls = known_worker_urls(inventory, addresses)
    out = []
    for h in router_workers(inventory):
        if (names is not None and h.name not in names) or h.name not in urls:
            continue
        key = inventory.profile_for(h).api_key
        out.append(Worker(h.name, urls[h.name], key.read() if key is not None else None))
    return out


@dataclass
class Reconciled:
    """What a reconcile found and did, by host name."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # missing, and failed its check: left out, with why
    already: list[str] = field(default_factory=list)  # listed already

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)

    def text(self, *, dry_run: bool = False) -> str:
        add, rm = ("would add", "would remove") if dry_run else ("added", "removed")
        parts = []
        if self.added:
            parts.append(f"{add} {', '.join(self.added)}")
        if self.removed:
            parts.append(f"{rm} {', '.join(self.removed)}")
        if self.refused:
            parts.append("left out (check failed): " + "; ".join(f"{n}: {why}" for n, why in self.refused.items()))
        return "; ".join(parts) or "the router's live workers were already right"


def reconcile(client: RouterClient, keep: list[Worker], drop: list[Worker], *, dry_run: bool = False,
              check: bool = True, http: Transport | None = None) -> Reconciled:
    """Add each `keep` worker the router does not list (after its check), remove each listed `drop` worker. A
    `keep` worker smg is draining out (a removal a moment ago) counts as missing: it is added once smg dropped it,
    else it would leave with the drain. `http`: how the workers' checks reach them (default: real HTTP)."""
    workers_http = http or HttpTransport()
    listed = client.list_workers()
    live = {w.url for w in listed if not w.leaving}
    leaving = {w.url for w in listed if w.leaving}
    done = Reconciled()
    for w in keep:
        if w.url in live:
            done.already.append(w.name)
            continue
        if w.url in leaving and not dry_run:
            try:
                client.settled(w.url, LEAVING_WAIT_S)
            except RemoteError as err:
                done.refused[w.name] = err.what
                continue
        error = add_check_error(workers_http, w.url, w.key) if check else None
        if error is not None:
            done.refused[w.name] = error
            continue
        if not dry_run:
            client.add_worker(w.url, w.key)
        done.added.append(w.name)
    for w in drop:
        if w.url in live:  # one smg drains already is on its way out
            if not dry_run:
                client.remove_worker(w.url)
            done.removed.append(w.name)
    return done


def wait_listed_healthy(client: RouterClient, urls: list[str], timeout_s: float, poll_s: float = 0.5) -> list[str]:
    """Wait until the router lists every URL healthy; returns those it still does not (empty: all are)."""
    deadline = time.monotonic() + timeout_s
    while True:
        healthy = {w.url for w in client.list_workers() if w.healthy}
        missing = [u for u in urls if u not in healthy]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(poll_s)
