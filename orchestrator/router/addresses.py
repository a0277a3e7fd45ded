"""Learn the container addresses the router and its workers are reached at, on the site network.

On a PVE site each container has its own address on the node's bridge (vmbr0): a static `ip=` in `net0` names
it, a DHCP one is known only inside the container. So: the inventory's static `net0` when it is the host's
server container, else one round trip per host (`pct exec VMID -- ip -4 -o addr show dev IFACE`). Fresh each
command: a DHCP lease may move between runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from orchestrator.errors import DeployError, RemoteError
from orchestrator.inventory.models import Host, Inventory
from orchestrator.parsers.netaddr import address_command, net0_ifname, net0_static_ip
from orchestrator.router.facts import ADDRESS
from orchestrator.router.places import SiteAddresses, router_place, router_workers


def static_address(host: Host, vmid: int) -> str | None:
    return net0_static_ip(host.container.net0) if vmid == host.container.vmid else None


def ct_address_command(host: Host, vmid: int) -> str:
    """The command run inside the container (its interface from the inventory's net0 when it is the host's)."""
    return address_command(net0_ifname(host.container.net0) if vmid == host.container.vmid else "eth0")


def _ask(host: Host, vmid: int, tofu: bool) -> str | RemoteError:
    from orchestrator.remote.container import Container
    from orchestrator.remote.ssh import SshHost

    try:
        with SshHost(host, tofu=tofu) as ssh:
            res = Container(ssh, vmid).read_output(ct_address_command(host, vmid), ADDRESS,
                                                   what="the container's address")
    except DeployError as err:
        return RemoteError(f"{host.name} CT {vmid}: its address could not be read: {err.what}", host=host.name)
    address = res.value
    if address is None:
        return RemoteError(f"{host.name} CT {vmid} has no IPv4 address on the site network "
                          f"({res.said(300) or 'no global inet address'})",
                          fix=f"start the container and check its network: pct exec {vmid} -- ip -4 addr "
                              "(net0 ip=dhcp needs a DHCP server on the bridge)", host=host.name)
    return address


def learn(places: Iterable[tuple[Host, int]], *, tofu: bool = False) -> SiteAddresses:
    """Each (host, vmid)'s container address; static ones without I/O, the others asked in parallel. A container
    that cannot tell (stopped, no lease) is recorded with its error, for the caller to raise or skip."""
    pairs = list(places)
    wanted = list(dict.fromkeys((h.name, v) for h, v in pairs))
    hosts = {h.name: h for h, _ in pairs}
    found = {(n, v): a for n, v in wanted if (a := static_address(hosts[n], v)) is not None}
    errors: dict[tuple[str, int], RemoteError] = {}
    ask = [(n, v) for n, v in wanted if (n, v) not in found]
    if ask:
        with ThreadPoolExecutor(max_workers=min(8, len(ask))) as pool:
            for key, answer in zip(ask, pool.map(lambda k: _ask(hosts[k[0]], k[1], tofu), ask), strict=True):
                if isinstance(answer, RemoteError):
                    errors[key] = answer
                else:
                    found[key] = answer
    return SiteAddresses(found, errors)


def learn_router(inventory: Inventory, *, tofu: bool = False) -> SiteAddresses:
    """The managed router's container address only (`bench group`: the router's URL, and where the bench client
    reaches it when that is another container)."""
    place, spec = router_place(inventory), inventory.router
    if place is None or spec is None or spec.url is not None:
        return SiteAddresses()
    return learn([(place.host, place.vmid)], tofu=tofu)


def learn_fleet(inventory: Inventory, *, tofu: bool = False, router: bool = True) -> SiteAddresses:
    """The router's workers' server containers and (`router`) the managed router's container."""
    spec = inventory.router
    overridden = spec.worker_urls if spec is not None else {}
    places = [(h, h.container.vmid) for h in router_workers(inventory) if h.name not in overridden]
    place = router_place(inventory)
    if router and place is not None and inventory.router is not None and inventory.router.url is None:
        places.append((place.host, place.vmid))
    return learn(places, tofu=tofu)
