"""The router's view of a fleet, beside `deploy status group G`: each host listed or not, healthy, its load."""

from __future__ import annotations

from typing import Any

from orchestrator.cli.common import AppContext
from orchestrator.errors import ConfigError, RemoteError
from orchestrator.fleet.engine import HostOutcome
from orchestrator.router.addresses import learn_fleet
from orchestrator.router.client import RouterClient
from orchestrator.router.converge import managed_unit_state
from orchestrator.router.places import known_worker_urls, router_api_key, router_base_url


def router_view(app: AppContext, outcomes: list[HostOutcome],
                options: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What the router thinks of each host's server (listed, healthy, load), and its unit's state when deploy
    manages it; never changes the exit code."""
    inventory = app.inventory
    if inventory.router is None:
        return None
    tofu = bool((options or {}).get("tofu"))
    unit = managed_unit_state(inventory, tofu=tofu)
    try:
        addresses = learn_fleet(inventory, tofu=tofu)
        base = router_base_url(inventory, addresses)
        urls = known_worker_urls(inventory, addresses)
    except (RemoteError, ConfigError) as err:
        for o in outcomes:
            o.extras["router"] = {"error": err.what}
        return {"router": {"error": err.what, **unit}, "text": f"router{_unit_text(unit)}: {err.what}"}
    try:
        with RouterClient(base, router_api_key(inventory), timeout_s=5.0) as client:
            workers = {w.url: w for w in client.list_workers()}
            ready = client.ready()
    except (RemoteError, ConfigError) as err:
        for o in outcomes:
            o.extras["router"] = {"error": err.what}
        return {"router": {"url": base, "error": err.what, **unit},
                "text": f"router {base}{_unit_text(unit)}: {err.what}"}
    for o in outcomes:
        url = urls.get(o.host)
        w = workers.get(url) if url is not None else None
        o.extras["router"] = {"url": url, "listed": w is not None, "healthy": w.healthy if w else None,
                              "load": w.load if w else None}
        said = "not listed" if w is None else ("healthy" if w.healthy else "unhealthy") + f", load {w.load}"
        o.detail = f"{o.detail}; router: {said}" if o.detail else f"router: {said}"
    text = (f"router {base}{_unit_text(unit)}: {len(workers)} worker(s), "
            f"{sum(1 for w in workers.values() if w.healthy)} healthy, {'ready' if ready else 'NOT ready'}")
    return {"router": {"url": base, "workers": len(workers), "ready": ready, **unit}, "text": text}


def _unit_text(unit: dict[str, Any]) -> str:
    return f" ({unit['runs_on']} CT {unit['vmid']}, unit {unit['unit']})" if unit else ""
