"""The router's view of a fleet, beside `deploy status group G`: each host listed or not, healthy, serving by its
own /health, its load; and what is wrong with the router (router/truth.py), which makes the status exit non-zero."""

from __future__ import annotations

from typing import Any

from orchestrator.cli.common import AppContext
from orchestrator.errors import ConfigError, RemoteError
from orchestrator.fleet.engine import HostOutcome
from orchestrator.remote.http import HttpTransport
from orchestrator.router import metrics
from orchestrator.router.addresses import learn_fleet
from orchestrator.router.client import RouterClient
from orchestrator.router.converge import managed_unit_state
from orchestrator.router.places import known_worker_urls, router_api_key, router_base_url, router_metrics_url
from orchestrator.router.reconcile import workers_of
from orchestrator.router.serving import ask
from orchestrator.router.truth import problems, router_down


def router_view(app: AppContext, outcomes: list[HostOutcome],
                options: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What the router thinks of each host's server (listed, healthy, load), whether each listed worker serves by
    its own /health, and its unit's state when deploy manages it. Exit code (folded into the status's): 3 when the
    router does not answer, 1 when it lists a URL no host has or no listed worker serves, else 0."""
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
    key = router_api_key(inventory)
    try:
        with RouterClient(base, key, timeout_s=5.0, metrics_url=router_metrics_url(inventory, base),
                          transport=app.http) as client:
            workers = {w.url: w for w in client.list_workers()}
            ready = client.ready()
            exported = client.router_metrics()  # smg's own series; None for sglang-router or when they do not answer
    except (RemoteError, ConfigError) as err:
        for o in outcomes:
            o.extras["router"] = {"error": err.what}
        down = router_down(base, err.what)
        return {"router": {"url": base, "error": err.what, **unit, "problems": [down.to_dict()]},
                "text": f"router {base}{_unit_text(unit)}: {err.what}\nproblem: {down.text()}",
                "exit_code": RemoteError.exit_code}
    answers = ask(app.http or HttpTransport(), workers, {w.url: w.key for w in workers_of(inventory, addresses)}, key)
    circuits = metrics.per_worker(exported, metrics.CB_STATE) if exported is not None else {}
    for o in outcomes:
        url = urls.get(o.host)
        w = workers.get(url) if url is not None else None
        serving = answers[w.url].serving if w is not None else None
        circuit = metrics.CB_STATES.get(int(circuits[w.url])) if w is not None and w.url in circuits else None
        o.extras["router"] = {"url": url, "listed": w is not None, "healthy": w.healthy if w else None,
                              "load": w.load if w else None, "serving": serving,
                              **({"circuit": circuit} if exported is not None else {})}
        said = "not listed" if w is None else ("healthy" if w.healthy else "unhealthy") + f", load {w.load}"
        if circuit not in (None, "closed"):  # smg stopped sending it requests after failures (its breaker)
            said += f", circuit {circuit}"
        if w is not None and not serving:
            said += f", NOT serving ({answers[w.url].said})"
        o.detail = f"{o.detail}; router: {said}" if o.detail else f"router: {said}"
    found = problems([(u, w.healthy) for u, w in workers.items()], urls, answers,
                     group=str((options or {}).get("group") or "") or None)
    text = (f"router {base}{_unit_text(unit)}: {len(workers)} worker(s), "
            f"{sum(1 for w in workers.values() if w.healthy)} healthy, "
            f"{sum(1 for u in workers if answers[u].serving)} serving, {'ready' if ready else 'NOT ready'}")
    errors = metrics.errors_by_type(exported) if exported is not None else None
    if errors:
        text += "; request errors since it started: " + ", ".join(f"{k or 'other'} {v:.0f}"
                                                                   for k, v in sorted(errors.items()))
    text += "".join(f"\nproblem: {p.text()}" for p in found)
    orphans = watch_orphans(options)
    text += "".join(f"\nproblem: {o}" for o in orphans)
    return {"router": {"url": base, "workers": len(workers), "ready": ready, **unit,
                       "problems": [p.to_dict() for p in found],
                       **({"request_errors": errors} if errors is not None else {}),
                       **({"cordoned_by_stopped_watch": orphans} if orphans else {})},
            "text": text, "exit_code": 1 if found or orphans else 0}


def watch_orphans(options: dict[str, Any] | None) -> list[str]:
    """The hosts a `deploy watch` of this group cordoned and that no running watch owns (fleet/watch.py)."""
    from orchestrator.fleet.watch import orphaned

    groups = tuple((options or {}).get("target_groups") or ())
    return [o.text(group) for group in groups for o in orphaned(group)]


def _unit_text(unit: dict[str, Any]) -> str:
    if not unit:
        return ""
    package = f", {unit['package']}" if unit.get("package") else ""
    left = (f", an interrupted migration left {unit['migration_left']}: run deploy up"
            if unit.get("migration_left") else "")
    return f" ({unit['runs_on']} CT {unit['vmid']}{package}, unit {unit['unit']}{left})"
