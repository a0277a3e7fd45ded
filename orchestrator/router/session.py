"""A run's view of the router: its URLs, keys, client, drainer and health check, built in one place (issue 47).

A fleet roll (fleet/fleet_roll.py `FleetRouter`, which adds each host's router column and the drain around its
roll), the watch (fleet/watch.py), `deploy router status|add|remove` (cli/router_cmd.py) and a single-host
command's drain (commands/rotation.py) read the same addresses and keys, and build their clients and drainers
here. Container addresses on the site network are read once per run, before any change: workers keep their
containers, so their addresses, through a roll. Every request goes through the session's `http` (remote/http.py):
None is real HTTP (the router's client pools its connections, a worker's check opens its own); a unit test passes
a handler.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from orchestrator.errors import RemoteError
from orchestrator.inventory.models import Inventory
from orchestrator.remote.http import HttpTransport, Transport
from orchestrator.router.addresses import learn_fleet
from orchestrator.router.client import RouterClient
from orchestrator.router.drain import JOIN_TIMEOUT_S, Drainer
from orchestrator.router.places import (
    SiteAddresses,
    known_worker_urls,
    router_api_key,
    router_base_url,
    router_metrics_url,
    router_workers,
)
from orchestrator.router.serving import Answer, ask


class RouterSession:
    """The inventory's router as one run sees it: which hosts are its workers at which URLs, with which keys."""

    def __init__(self, inv: Inventory, drain_timeout_s: float, cancel: threading.Event | None = None, *,
                 http: Transport | None = None) -> None:
        self.spec = inv.router
        #: How this run reaches the router and its workers (None: real HTTP).
        self.http = http
        #: The roll's cancel event (Ctrl-C/SIGTERM/SIGHUP): a host stopped by it is out, not at fault.
        self.cancel = cancel or threading.Event()
        # Container addresses on the site network, read once before the first wave (workers keep their
        # containers, so their addresses, through a roll).
        addresses = learn_fleet(inv) if self.spec is not None else None
        #: The container addresses read (None: no router), for the commands that name hosts (reconcile.workers_of).
        self.addresses: SiteAddresses | None = addresses
        self.base = router_base_url(inv, addresses) if addresses is not None else None
        self.key = router_api_key(inv) if self.spec is not None else None
        self.metrics_url = router_metrics_url(inv, self.base) if self.base is not None else None
        self.urls = known_worker_urls(inv, addresses) if addresses is not None else {}
        #: Workers whose container address could not be read: rolled without a drain they would not be.
        self.unknown = {h.name: addresses.errors[(h.name, h.container.vmid)] for h in router_workers(inv)
                        if addresses is not None and (h.name, h.container.vmid) in addresses.errors}
        self.worker_keys: dict[str, str | None] = {}
        for h in router_workers(inv):
            key = inv.profile_for(h).api_key
            self.worker_keys[h.name] = key.read() if key is not None else None
        #: Each worker's key by its URL: a drain asks the other workers' own /health with it (router/serving.py).
        self.url_keys = {url: self.worker_keys.get(name) for name, url in self.urls.items()}
        self.drain_timeout_s = drain_timeout_s
        self.guard = threading.Lock()

    def client(self, *, timeout_s: float = 10.0, metrics: bool = True) -> RouterClient:
        """The router's adapter, with smg's metrics endpoint where it has one (the drain reads its active count)."""
        assert self.base is not None
        return RouterClient(self.base, self.key, timeout_s=timeout_s,
                            metrics_url=self.metrics_url if metrics else None, transport=self.http)

    def workers_http(self) -> Transport:
        """How the workers' own endpoints are asked (/health, /generate, /metrics): a connection per request."""
        return self.http or HttpTransport()

    def ask(self, urls: Iterable[str]) -> dict[str, Answer]:
        """Each worker's own /health with its key (the router's key for a URL no inventory worker has)."""
        return ask(self.workers_http(), urls, self.url_keys, self.key)

    def check(self) -> None:
        if self.base is None:
            return
        with self.client(timeout_s=5.0, metrics=False) as client:
            if not client.healthy():
                raise RemoteError(f"router {self.base} does not answer /health: hosts cannot be drained",
                                  fix="start the router (systemctl start sglang-router), or remove the router: "
                                      "section to roll without draining; nothing was changed", step="drain")

    def drain_with(self, say: Callable[[str], None] | None = None, *, client: RouterClient | None = None,
                   join_timeout_s: float = JOIN_TIMEOUT_S) -> Drainer:
        """A Drainer on this run's client (or `client`), guard, policy and worker keys, saying what it does
        through `say`."""
        assert self.base is not None
        return Drainer(client or self.client(), drain_timeout_s=self.drain_timeout_s, say=say,
                       guard=self.guard, policy=self.spec.policy if self.spec is not None else None,
                       keys=self.url_keys, http=self.workers_http(), join_timeout_s=join_timeout_s)
