"""`deploy router status [GROUP]`, `deploy router add HOST…`, `deploy router remove HOST…`: the router's live
worker list, and a checked host put into or taken out of rotation (issue 25 item 1).

Adding runs the same checks a fleet roll runs before and after it adds a host back (router/drain.py): the server
answers a generation with its key, the router lists it healthy, and a request through the router reaches it.
Removing drains (waits for the host's in-flight requests) and never takes out the last healthy worker. Both take
the claim a fleet roll takes (its hosts and the router, locks/claims.py), so neither undoes a roll's drain.
"""

from __future__ import annotations

import time
from typing import Any

import click

from orchestrator.cli.common import AppContext, SuggestingGroup, common_options
from orchestrator.cli.run import command_line
from orchestrator.errors import ConfigError, DeployError
from orchestrator.inventory.models import Host, Inventory
from orchestrator.locks.claims import claim_fleet
from orchestrator.router.places import SiteAddresses, router_workers
from orchestrator.router.reconcile import Worker, workers_of
from orchestrator.router.session import RouterSession
from orchestrator.router.truth import problems
from orchestrator.ui.tables import spec as table_spec


@click.group("router", cls=SuggestingGroup)
def router() -> None:
    """The router's live worker list: status, and a checked host put into (add) or taken out of (remove) rotation."""


def _session(app: AppContext, drain_timeout_s: float) -> tuple[RouterSession, str, SiteAddresses]:
    """The command's router session (router/session.py), the router's URL, and the container addresses on the site
    network it read (one round trip per host whose net0 has no static ip=): workers and the managed router are
    reached at their containers' addresses."""
    if app.inventory.router is None:
        raise ConfigError("the inventory has no router: section", fix="see docs/fleet.md, 'The router'")
    side = RouterSession(app.inventory, drain_timeout_s, http=app.http)
    assert side.base is not None and side.addresses is not None  # a router: section: both were read
    return side, side.base, side.addresses


def _workers(inventory: Inventory, names: tuple[str, ...], addresses: SiteAddresses) -> list[Worker]:
    """The named hosts as router workers; a host that is not one of the router's workers is refused (exit 2). A
    URL (`router remove http://ADDR:PORT`) names a listed worker that no host has any more (router status says
    which): it is taken as it is."""
    urls = [Worker(n.rstrip("/"), n.rstrip("/"), None) for n in names if _is_url(n)]
    hosts: list[Host] = [inventory.find_host(n) for n in names if not _is_url(n)]
    known = {h.name for h in router_workers(inventory)}
    strangers = [h.name for h in hosts if h.name not in known]
    if strangers:
        raise ConfigError(f"{', '.join(strangers)}: not among the router's workers (router.workers)",
                          fix=f"router workers: {', '.join(sorted(known)) or 'none'}")
    found = workers_of(inventory, addresses, hosts)
    missing = [h.name for h in hosts if h.name not in {w.name for w in found}]
    if missing:
        raise addresses.errors.get((missing[0], inventory.hosts[missing[0]].container.vmid)) or ConfigError(
            f"{', '.join(missing)}: the container's address on the site network is not known",
            fix="start the container (deploy up host NAME)")
    return [*found, *urls]


def _is_url(name: str) -> bool:
    return name.startswith(("http://", "https://"))


@router.command("status")
@click.argument("group", required=False)
@common_options
def status(app: AppContext, group: str | None) -> int:
    """What the router lists: each inventory worker (listed, healthy, serving by its own /health, load) and any URL
    it lists that no host has. Exits 1 when a listed URL is no host's or no listed worker serves (router/truth.py),
    3 when the router does not answer."""
    inv = app.inventory
    side, base, addresses = _session(app, 0.0)
    wanted = workers_of(inv, addresses, inv.group_hosts(group) if group else None)
    with side.client(timeout_s=5.0, metrics=False) as client:
        live = {w.url: w for w in client.list_workers()}
        ready = client.ready()
    every = workers_of(inv, addresses)
    answers = side.ask(live)
    rows: list[dict[str, Any]] = []
    for w in wanted:
        seen = live.get(w.url)
        rows.append({"host": w.name, "url": w.url, "listed": seen is not None,
                     "healthy": seen.healthy if seen else None, "load": seen.load if seen else None,
                     "serving": answers[w.url].serving if seen else None,
                     "answered": answers[w.url].said if seen else None})
    known = {w.name: w.url for w in every}
    strangers = [u for u in live if u not in known.values()]
    found = problems([(u, w.healthy) for u, w in live.items()], known, answers, group=group)
    code = 1 if found else 0
    app.out.emit({"ok": code == 0, "exit_code": code, "router": base, "ready": ready, "workers": rows,
                  "unknown_urls": strangers, "problems": [p.to_dict() for p in found]})
    table = [(r["host"], r["url"], "yes" if r["listed"] else "NO",
              "-" if r["healthy"] is None else ("yes" if r["healthy"] else "NO"),
              "-" if r["serving"] is None else ("yes" if r["serving"] else f"NO: {r['answered']}"),
              "-" if r["load"] is None else str(r["load"])) for r in rows]
    app.out.table(table_spec(f"router {base}", ["host", "url", "listed", "healthy", "serves", "load"], table))
    out = [r["host"] for r in rows if not r["listed"]]
    app.out.line(f"router {base}: {sum(1 for r in rows if r['healthy'])} of {len(rows)} worker(s) healthy, "
                 f"{sum(1 for r in rows if r['serving'])} serving, {'ready' if ready else 'NOT ready'}"
                 + (f"; not listed: {', '.join(out)} (put back with `deploy router add HOST`)" if out else "")
                 + (f"; listed but no inventory host: {', '.join(strangers)}" if strangers else ""))
    for problem in found:
        app.out.line(f"problem: {problem.text()}")
    return code


@router.command("add")
@click.argument("hosts", nargs=-1, required=True)
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=180.0, show_default=True,
              help="Seconds to wait for the router to list the host healthy.")
@common_options
def add(app: AppContext, hosts: tuple[str, ...], timeout_s: float) -> int:
    """Put checked hosts back into rotation: each answers a generation with its key, is added, listed healthy,
    and reached by a request through the router. A host that fails a check stays out (exit 1)."""
    return _each(app, hosts, "add", timeout_s)


@router.command("remove")
@click.argument("hosts", nargs=-1, required=True)
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=120.0, show_default=True,
              help="Seconds to wait for the host's in-flight requests (and for another healthy worker).")
@common_options
def remove(app: AppContext, hosts: tuple[str, ...], timeout_s: float) -> int:
    """Take hosts (or a listed URL no host has, `router status` names it) out of rotation and wait for their
    in-flight requests; the last serving worker is never removed (each other worker's own /health is asked)."""
    return _each(app, hosts, "remove", timeout_s)


def _each(app: AppContext, names: tuple[str, ...], action: str, timeout_s: float) -> int:
    inv = app.inventory
    side, _base, addresses = _session(app, timeout_s)
    workers = _workers(inv, names, addresses)
    if action == "add" and any(_is_url(w.name) for w in workers):
        raise ConfigError("`deploy router add` takes inventory hosts, not URLs",
                          fix="add the host: `deploy router add HOST` (its URL comes from the inventory)")
    hosts = [w.name for w in workers if not _is_url(w.name)]
    with claim_fleet(hosts, command_line(), router=True):  # locks/claims.py: the claim a fleet roll takes
        return _change(app, workers, action, timeout_s, side)


def _change(app: AppContext, workers: list[Worker], action: str, timeout_s: float, side: RouterSession) -> int:
    results: list[dict[str, Any]] = []
    code = 0
    with side.client() as client:
        drainer = side.drain_with(app.out.line, client=client, join_timeout_s=timeout_s)
        for w in workers:
            began = time.monotonic()
            try:
                if action == "add":
                    drainer.restore(w.url, w.key)
                    reach = drainer.last_reach.note if drainer.last_reach is not None else ""
                    note = f"added, listed healthy; {reach}"
                else:
                    note = drainer.drain(w.url).note
            except DeployError as err:
                err.at(host=w.name, step=f"router {action}")
                code = max(code, err.exit_code)
                results.append({"host": w.name, "url": w.url, "ok": False, "exit_code": err.exit_code,
                                "what": err.what, "fix": err.fix, **({"evidence": err.details} if err.details
                                                                     else {})})
                app.out.line(f"{w.name}: NOT {'added' if action == 'add' else 'removed'}: {err.what} "
                             f"(fix: {err.fix})")
                continue
            took = time.monotonic() - began
            results.append({"host": w.name, "url": w.url, "ok": True, "exit_code": 0, "what": note,
                            "duration_s": round(took, 3)})
            app.out.line(f"{w.name}: {note} ({took:.1f} s)")
    app.out.emit({"ok": code == 0, "exit_code": code, "router": side.base, "action": action, "hosts": results,
                  "changed": any(r["ok"] for r in results)})
    return code
