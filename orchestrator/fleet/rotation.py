"""A single-host command that restarts a router worker many times (`deploy tune`) takes it out of rotation first.

Why: a tune rolls a trial release per flag point and restores the original at the end, each a server restart; with
the host still in the router, clients' requests reach a server that is stopping or starting and fail (seen in the
chaos soak: 4 failed client requests during one tune). So the host is drained through the router like a fleet
roll's host (router/drain.py: never the last serving worker, in-flight requests finish), the command runs, and the
host is added back with the same checks as a roll's add-back, only when it runs a release that passed them (the
tune's end, or its restore read back). A host the router has no worker for, or an inventory without a router, runs
as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from orchestrator.errors import CheckFailed, DeployError
from orchestrator.fleet.fleet_roll import FleetRouter
from orchestrator.inventory.models import Inventory
from orchestrator.router.drain import Drainer
from orchestrator.router.places import router_workers


def routes_to(inv: Inventory, host: str) -> bool:
    """True when the inventory's router has `host` among its workers (what the command must also claim)."""
    return inv.router is not None and any(h.name == host for h in router_workers(inv))


@contextmanager
def out_of_rotation(inv: Inventory, host: str, *, say: Callable[[str], None], drain_timeout_s: float,
                    back_ok: Callable[[], bool]) -> Iterator[None]:
    """Drain `host` from the router for the block, then add it back when the block ended well or `back_ok()` says
    it runs a release that may serve (an interrupted tune whose restore was read back). A drain the router's
    safety refuses (the last serving worker) raises before the block runs: nothing changed."""
    if not routes_to(inv, host):
        yield
        return
    side = FleetRouter(inv, drain_timeout_s)
    url = side.urls.get(host)
    if host in side.unknown:
        raise side.unknown[host].at(host=host, step="drain")
    if url is None:  # pragma: no cover - routes_to() said it is a worker, and its address was learnt
        yield
        return
    side.check()
    drainer = Drainer(side.client(), drain_timeout_s=drain_timeout_s, say=say,
                      guard=side.guard, policy=side.spec.policy if side.spec is not None else None,
                      keys=side.url_keys)
    try:
        drained = drainer.drain(url)
        say(f"{host} ({url}) is out of the router while it restarts: {drained.note}")
        ended_well = False
        try:
            yield
            ended_well = True
        finally:
            _add_back(drainer, host, url, side.worker_keys.get(host), say,
                      may_serve=ended_well or back_ok(), raise_errors=ended_well)
    finally:
        drainer.client.close()


def _add_back(drainer: Drainer, host: str, url: str, key: str | None, say: Callable[[str], None], *,
              may_serve: bool, raise_errors: bool) -> None:
    if not may_serve:
        say(f"{host} stays out of the router: it does not run a release that passed its checks; once it does, "
            f"`deploy router add {host}` puts it back")
        return
    try:
        took = drainer.restore(url, key)
    except DeployError as err:
        if raise_errors:
            raise CheckFailed(f"{host} is NOT back in the router: {err.what}",
                              fix=f"check the server (deploy status host {host}), then `deploy router add {host}`",
                              step="router") from err
        say(f"{host} is NOT back in the router: {err.what}; `deploy router add {host}` puts it back")
        return
    reach = f"; {drainer.last_reach.note}" if drainer.last_reach is not None else ""
    say(f"{host} is back in the router, healthy after {took:.1f} s{reach}")
