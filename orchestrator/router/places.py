"""Where the router and its workers are, from the inventory: which hosts are workers, their URLs, the router's
address, its API key (read from its file), and the container it runs in when deploy manages it. No remote I/O:
container addresses come in a SiteAddresses (router/addresses.py learns them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from orchestrator.errors import RemoteError
from orchestrator.inventory.models import Host, Inventory
from orchestrator.router.release import release_of


@dataclass(frozen=True)
class SiteAddresses:
    """Container addresses on the site network by (host name, vmid), and why a container had none."""

    by_ct: Mapping[tuple[str, int], str] = field(default_factory=dict)
    errors: Mapping[tuple[str, int], RemoteError] = field(default_factory=dict)

    def get(self, host: Host, vmid: int) -> str | None:
        return self.by_ct.get((host.name, vmid))

    def of(self, host: Host, vmid: int) -> str:
        address = self.get(host, vmid)
        if address is None:
            raise self.errors.get((host.name, vmid)) or RemoteError(
                f"{host.name} CT {vmid}: its address on the site network is not known", host=host.name)
        return address


def router_workers(inventory: Inventory) -> list[Host]:
    spec = inventory.router
    if spec is None:
        return []
    return inventory.group_hosts(spec.workers) if spec.workers else list(inventory.hosts.values())


def worker_url(inventory: Inventory, host: Host, addresses: SiteAddresses) -> str:
    """Where the router reaches a host's server: router.worker_urls, else http://CT_ADDRESS:PROFILE_PORT, the
    server container's own address on the site network (never the node's: nothing forwards node ports into a
    container on a PVE node). Raises RemoteError when that address is not known."""
    spec = inventory.router
    if spec is not None and host.name in spec.worker_urls:
        return spec.worker_urls[host.name].rstrip("/")
    return f"http://{addresses.of(host, host.container.vmid)}:{inventory.profile_for(host).port}"


def known_worker_urls(inventory: Inventory, addresses: SiteAddresses) -> dict[str, str]:
    """Each router worker's URL, leaving out a host whose container address is not known (stopped, no lease)."""
    out = {}
    for host in router_workers(inventory):
        try:
            out[host.name] = worker_url(inventory, host, addresses)
        except RemoteError:
            continue
    return out


@dataclass(frozen=True)
class RouterPlace:
    """Where the managed router runs: an inventory host's container."""

    host: Host
    vmid: int

    def describe(self) -> str:
        return f"{self.host.name} CT {self.vmid}"


def router_place(inventory: Inventory) -> RouterPlace | None:
    """None when the inventory has no router or the operator runs it (`runs_on: operator`): nothing to converge."""
    spec = inventory.router
    if spec is None or spec.runs_on == "operator":
        return None
    host = inventory.hosts[spec.runs_on]
    return RouterPlace(host, spec.vmid if spec.vmid is not None else host.container.vmid)


def router_base_url(inventory: Inventory, addresses: SiteAddresses) -> str:
    """Where the operator reaches the router's API: router.url, else its bind address on this machine, else the
    address of the container it runs in (on the site network, as a client on the LAN reaches it)."""
    spec = inventory.router
    assert spec is not None
    if spec.url is not None:
        return spec.url
    if spec.runs_on == "operator":
        host = "127.0.0.1" if spec.host in ("0.0.0.0", "::") else spec.host
    else:
        place = router_place(inventory)
        assert place is not None
        host = addresses.of(place.host, place.vmid)
    return f"http://{host}:{spec.port}"


def router_api_key(inventory: Inventory) -> str | None:
    """router.api_key, else the workers' profile api_key (one key for the fleet); None without either."""
    spec = inventory.router
    if spec is None:
        return None
    if spec.api_key is not None:
        return spec.api_key.read()
    workers = router_workers(inventory)
    profile_key = inventory.profile_for(workers[0]).api_key if workers else None
    return profile_key.read() if profile_key is not None else None


def router_address_in(inventory: Inventory, vmid: int, addresses: SiteAddresses) -> tuple[str, int]:
    """Host and port at which a process in container `vmid` of the router's host reaches the router: its bind
    address when the router runs in that same container (a wildcard seen on loopback), else its base URL's."""
    spec = inventory.router
    assert spec is not None
    if spec.vmid in (None, vmid):
        return ("127.0.0.1" if spec.host in ("0.0.0.0", "::", "127.0.0.1") else spec.host), spec.port
    hostport = router_base_url(inventory, addresses).split("://", 1)[1]
    addr, _, port = hostport.rpartition(":")
    return addr, int(port)


def router_metrics_url(inventory: Inventory, base_url: str) -> str | None:
    """smg's Prometheus endpoint: the router's own address, its metrics port (router.flags `prometheus-port`,
    else 29000); None for sglang-router, whose metrics deploy does not read."""
    spec = inventory.router
    if spec is None:
        return None
    port = release_of(spec).metrics_port(spec.flags)
    if port is None:
        return None
    host = urlsplit(base_url).hostname or "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"
