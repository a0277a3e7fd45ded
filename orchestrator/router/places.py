"""Where the router and its workers are, from the inventory: which hosts are workers, their URLs, the router's
address, its API key (read from its file), and the container it runs in when deploy manages it. No remote I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.inventory.models import Host, Inventory


def router_workers(inventory: Inventory) -> list[Host]:
    spec = inventory.router
    if spec is None:
        return []
    return inventory.group_hosts(spec.workers) if spec.workers else list(inventory.hosts.values())


def worker_url(inventory: Inventory, host: Host) -> str:
    """Where the router reaches a host's server: router.worker_urls, else http://ADDRESS:PROFILE_PORT."""
    spec = inventory.router
    if spec is not None and host.name in spec.worker_urls:
        return spec.worker_urls[host.name].rstrip("/")
    return f"http://{host.address}:{inventory.profile_for(host).port}"


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


def router_base_url(inventory: Inventory) -> str:
    """Where the operator reaches the router's API: router.url, else its bind address on this machine, else its
    host's address (a router in a container: the simulator relays HOST:PORT into the container; on a real node
    the container has its own address, which router.url names)."""
    spec = inventory.router
    assert spec is not None
    if spec.url is not None:
        return spec.url
    if spec.runs_on == "operator":
        host = "127.0.0.1" if spec.host in ("0.0.0.0", "::") else spec.host
    else:
        host = inventory.hosts[spec.runs_on].address
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


def router_address_in(inventory: Inventory, vmid: int) -> tuple[str, int]:
    """Host and port at which a process in container `vmid` of the router's host reaches the router: its bind
    address when the router runs in that same container (a wildcard seen on loopback), else its base URL's."""
    spec = inventory.router
    assert spec is not None
    if spec.vmid in (None, vmid):
        return ("127.0.0.1" if spec.host in ("0.0.0.0", "::", "127.0.0.1") else spec.host), spec.port
    hostport = router_base_url(inventory).split("://", 1)[1]
    addr, _, port = hostport.rpartition(":")
    return addr, int(port)
