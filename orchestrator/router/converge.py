"""The router as a managed part of `deploy up` on a fleet: venv, files, live flag check, restart on change, health.

It runs once per fleet `up`, after the hosts converged, with the hosts that came out healthy as its workers (a
host that failed is left out of the router rather than sent traffic). Where: container `router.vmid` (default the
server container) of inventory host `router.runs_on`, through the same container adapter and systemd unit
machinery as the server. Round trips: one for the facts (installed router version and its parser, from the venv's
own python; the installed files' hashes; the unit's state), one more only when something must change (plus one
for a missing venv). The rendered argv is validated by the installed router's own parser before any file is
written; a second `up` with the same healthy workers changes nothing and restarts nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import CheckFailed, ConfigError, DeployError, RemoteError
from orchestrator.flags import FlagSchema
from orchestrator.inventory.models import Inventory, RouterSpec
from orchestrator.remote.container import Container
from orchestrator.remote.http import HttpTransport
from orchestrator.router.addresses import learn_fleet
from orchestrator.router.checks import generate_error
from orchestrator.router.client import RouterClient
from orchestrator.router.facts import (
    UNIT,
    UNIT_STATE,
    RouterFacts,
    apply_script,
    changed_files,
    installed_workers,
    read_router_facts,
    workers_only_change,
)
from orchestrator.router.migrate import BundleApply, Migration, old_metrics_port, resume, run_migration
from orchestrator.router.places import known_worker_urls, router_api_key, router_base_url, router_place, router_workers
from orchestrator.router.reconcile import Reconciled, Worker, reconcile, workers_of
from orchestrator.router.release import release_of
from orchestrator.router.render import RouterBundle, render_router, router_schema, schema_from_probe
from orchestrator.router.staging import (
    OLD_MODULE,
    render_staging,
    staging_metrics_port,
    staging_port,
    state_command,
)
from orchestrator.runlog import Metrics, StepRecord
from orchestrator.scripts import render_script
from orchestrator.stacks.pip_index import pip_index_options

#: How long `up` waits for the router's /health and for its workers to be listed healthy after a (re)start.
HEALTH_TIMEOUT_S = 120.0
STEP = "router"


def preflight_router(inventory: Inventory) -> None:
    """Refuse a bad router section before any host is touched: flags against the pinned release's parser dump,
    and the API key readable. The installed router's own parser checks the argv again before any file changes."""
    spec = inventory.router
    if spec is None:
        return
    try:
        render_router(spec, router_schema(release_of(spec)), [], None)
    except ConfigError as err:
        err.fix = (f"fix router.flags in the inventory (names and choices are {release_of(spec).name}'s own); "
                   "nothing was changed")
        raise err.at(step="router preflight", host=spec.runs_on) from None
    try:
        router_api_key(inventory)
    except DeployError as err:
        raise err.at(step="router preflight", host=spec.runs_on) from None


# ------------------------------------------------------------------------------------------------ converge
@dataclass
class RouterReport:
    """What the router step did; `--json` carries it as the fleet report's top-level "router"."""

    place: str
    url: str
    record: StepRecord
    exit_code: int = 0
    workers: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None
    all_workers: list[Worker] = field(default_factory=list)  # the inventory's workers, with their keys
    live: Reconciled | None = None  # what the live worker list needed (an unchanged, running router)

    @property
    def result(self) -> str:
        if self.exit_code and self.error is None and self.live is not None and self.live.refused:
            return "incomplete"
        if self.exit_code:
            return "failed"
        return {"changed": "changed", "would-change": "would change"}.get(self.record.status, "ok")

    def to_dict(self) -> dict[str, Any]:
        return {"place": self.place, "url": self.url, "result": self.result, "exit_code": self.exit_code,
                "workers": self.workers, "left_out": self.left_out, "kept": self.kept,
                **({"live": {"added": self.live.added, "removed": self.live.removed,
                             "refused": self.live.refused}} if self.live is not None else {}),
                "step": self.record.to_dict(),
                **({"error": self.error} if self.error else {})}

    def text(self) -> str:
        out = f"router {self.place} {self.url}: {self.result}"
        if self.error:
            return f"{out} — {self.error.get('what', '')}"
        out += f" — {self.record.summary}"
        if self.left_out:
            out += f"; left out (not healthy): {', '.join(self.left_out)}"
        if self.kept:
            out += f"; kept as they were (not in this run): {', '.join(self.kept)}"
        return out


@dataclass(frozen=True)
class WorkerChoice:
    """The router's workers after a fleet run, by host name, and their URLs."""

    workers: list[str]
    left_out: list[str]  # targeted by this run, and not healthy
    kept: list[str]  # not targeted: kept as the installed router has them
    urls: list[str]


def choose_workers(candidates: list[tuple[str, str | None]], targeted: list[str], healthy: list[str],
                   installed: list[str] | None) -> WorkerChoice:
    """Pure: (name, url) candidates → workers. A host this run converged counts by its result; a host it did not
    touch keeps its place in the installed router (so `up host a` never drops host b), and joins a router being
    installed for the first time (installed None) only if it was converged. A host whose container address is not
    known (url None: stopped, no lease) cannot be reached, so it is left out when targeted and never kept."""
    workers: list[str] = []
    left_out: list[str] = []
    kept: list[str] = []
    urls: list[str] = []
    for name, url in candidates:
        if name in targeted:
            ok = name in healthy and url is not None
            (workers if ok else left_out).append(name)
        else:
            ok = installed is not None and url is not None and url in installed
            if ok:
                workers.append(name)
                kept.append(name)
        if ok and url is not None:
            urls.append(url)
    return WorkerChoice(workers, left_out, kept, urls)


def converge_router(inventory: Inventory, targeted: list[str], healthy: list[str], *, dry_run: bool = False,
                    tofu: bool = False, say: Callable[[str], None] = lambda _m: None,
                    health_timeout_s: float = HEALTH_TIMEOUT_S) -> RouterReport | None:
    """Converge the managed router with the healthy hosts among its workers; None when it is not managed."""
    place = router_place(inventory)
    spec = inventory.router
    if place is None or spec is None:
        return None
    record = StepRecord(STEP)
    addresses = learn_fleet(inventory, tofu=tofu)
    try:
        url = router_base_url(inventory, addresses)
    except DeployError as err:
        report = RouterReport(place=place.describe(), url="", record=record)
        if dry_run:  # a plan on fresh hosts: the router's container, so its address, does not exist yet
            report.workers = [h.name for h in router_workers(inventory) if h.name in healthy]
            _plan_before_up(spec, place.vmid, report, len(report.workers))
            return report
        err = err.at(host=place.host.name, step=STEP)
        record.status = "failed"
        report.exit_code, report.error = err.exit_code, err.to_dict()
        return report
    report = RouterReport(place=place.describe(), url=url, record=record,
                          all_workers=workers_of(inventory, addresses))
    # A worker whose container address is unknown (stopped, no lease) cannot be healthy: it is left out.
    urls = known_worker_urls(inventory, addresses)
    candidates = [(h.name, urls.get(h.name)) for h in router_workers(inventory)]
    started = time.monotonic()
    metrics = Metrics(current=record)
    from orchestrator.remote.ssh import SshHost  # paramiko loads only when a router is managed

    say(f"{'checking' if dry_run else 'converging'} the router on {report.place} ({len(healthy)} healthy worker(s))")
    try:
        with SshHost(place.host, metrics=metrics, tofu=tofu) as ssh:
            _converge(spec, inventory, Container(ssh, place.vmid), report,
                      lambda installed: choose_workers(candidates, targeted, healthy, installed),
                      dry_run=dry_run, say=say, health_timeout_s=health_timeout_s)
    except DeployError as err:
        err = err.at(host=place.host.name, step=STEP)
        record.status = "failed"
        report.exit_code, report.error = err.exit_code, err.to_dict()
    record.duration_s = time.monotonic() - started
    say(f"{report.result} in {record.duration_s:.1f} s")
    return report


def _converge(spec: RouterSpec, inventory: Inventory, ct: Container, report: RouterReport,
              choose: Callable[[list[str] | None], WorkerChoice], *, dry_run: bool, say: Callable[[str], None],
              health_timeout_s: float) -> None:
    record, base_url = report.record, report.url
    api_key = router_api_key(inventory)
    # The probe checks the argv as it would be with every candidate (the worker list does not change its
    # validity); the workers are chosen once the installed router's own list is known.
    release = release_of(spec)
    probe_bundle = render_router(spec, router_schema(release), choose([]).urls, api_key)
    if dry_run and not _container_runs(ct):
        # A plan on fresh hosts: the router's container is made by its host's `up`, so there is nothing to read
        # yet; say what `up` would do instead of failing on the missing container.
        first = choose(None)
        report.workers, report.left_out = first.workers, first.left_out
        _plan_before_up(spec, ct.vmid, report, len(first.urls))
        return
    facts = _read_facts(ct, spec, list(probe_bundle.argv))
    choice = choose(installed_workers(facts.execstart))
    urls = choice.urls
    report.workers, report.left_out, report.kept = choice.workers, choice.left_out, choice.kept
    bundle = render_router(spec, router_schema(release), urls, api_key)
    record.details.update({"venv": spec.venv, "installed_version": facts.version, "active": facts.active,
                           "workers": urls})
    if facts.version != spec.version:
        what = f"install {release.requirement} in {spec.venv} (found {facts.version or 'none'})"
        if spec.package == "smg" and facts.migration.module == OLD_MODULE and facts.active == "active":
            what += f", then {_migration_text(spec)}"
        record.changes.append(what)
        if dry_run:
            record.status, record.summary = "would-change", what
            return
        say(what)
        began = time.monotonic()
        _install(ct, spec, install_script(inventory))
        say(f"installed {release.requirement} in {time.monotonic() - began:.1f} s")
        facts = _read_facts(ct, spec, list(probe_bundle.argv))
        record.status = "changed"
    # The installed router's own parser: the canonical argv must be what it builds, and it must accept it.
    schema = schema_from_probe(facts.probe, where=f"CT {ct.vmid}", release=release)
    live = render_router(spec, schema, choose([]).urls, api_key)
    doc = facts.probe_doc()
    if not doc.get("ok"):
        raise ConfigError(f"{release.package} {facts.version} in CT {ct.vmid} rejects the router flags: "
                          f"{doc.get('error')}", fix="fix router.flags in the inventory; nothing was changed")
    record.details["validated_with"] = f"{release.package} {facts.version} in CT {ct.vmid}"
    if live.argv != probe_bundle.argv:
        raise ConfigError(f"the installed {release.package}'s parser reads the router flags differently from the "
                          f"packaged {spec.version} dump: {' '.join(live.argv)}",
                          fix="re-make the packaged dump with orchestrator/probes/flags_probe.py")
    if _migration(spec, inventory, ct, report, facts, schema, bundle, urls, api_key, dry_run=dry_run, say=say,
                  health_timeout_s=health_timeout_s):
        return
    changed = changed_files(bundle, facts)
    running = facts.active == "active"
    live_change = workers_only_change(spec, schema, facts, bundle, urls, api_key)
    if live_change is not None:
        add, remove = live_change
        what = (f"change the workers live ({', '.join([*('+' + u for u in add), *('-' + u for u in remove)])}; "
                f"{len(urls)} worker(s)), no restart; the unit is rewritten for the next start")
        record.changes.append(what)
        if dry_run:
            record.status, record.summary = "would-change", what
            return
        say(what)
        _apply(ct, bundle, action=None)
        with RouterClient(base_url, api_key, timeout_s=10.0) as client:
            for url in remove:
                client.remove_worker(url)
            for url in add:
                client.add_worker(url, api_key)
        record.status, record.summary = "changed", what
    elif not changed and running:
        # The unit is right, but the worker API may have changed the running router since (a fleet roll that
        # stopped with a host drained): its live worker list is what counts.
        listed = _reconcile_live(base_url, api_key, report, urls, dry_run=dry_run, say=say)
        if listed.changed:
            record.changes.append(listed.text(dry_run=dry_run))
            record.status = "would-change" if dry_run else "changed"
        record.summary = record.summary or "; ".join([
            *(c for c in record.changes if c.startswith(("undid ", "finished "))),
            f"unit unchanged, router active with {len(urls)} worker(s)"
            + (f"; live workers: {listed.text(dry_run=dry_run)}" if listed.changed or listed.refused else "")])
        if dry_run:
            return
    else:
        # A running router whose unit changes (flags, version, the key) and whose package stays (smg, or 0.3.2) hands
        # the public port over through a staging router of the new unit, as the migration does: a restart would
        # refuse new connections for its whole graceful shutdown (issue 50, 11).
        handover = running and bool(changed) and facts.migration.module == release_of(spec).module
        verb = "restart" if running else "start"
        what = (f"install {', '.join(changed)} and hand the public port over to the new router through a staging "
                f"{spec.package}, no request dropped ({len(urls)} worker(s))" if handover
                else f"install {', '.join(changed)} and {verb} the router ({len(urls)} worker(s))" if changed
                else f"start the router (files unchanged, unit {facts.active})")
        record.changes.append(what)
        if dry_run:
            record.status, record.summary = "would-change", what
            return
        say(what)
        record.status, record.summary = "changed", what
        if handover:
            m, final = _staged(spec, ct, base_url, facts, bundle, urls, api_key, say=say,
                               health_timeout_s=health_timeout_s)
            try:
                run_migration(m, render_staging(spec, schema, urls, api_key), final)
            finally:
                record.details["handover"] = m.record()
            record.details["health"] = m.details.get("staging_gate", {})
            return
        _apply(ct, bundle, action="restart" if running else "start")
    if dry_run:
        return
    record.details["health"] = _wait_healthy(base_url, api_key, urls, health_timeout_s, say)


def _migration(spec: RouterSpec, inventory: Inventory, ct: Container, report: RouterReport, facts: RouterFacts,
               schema: FlagSchema, bundle: RouterBundle, urls: list[str], api_key: str | None, *, dry_run: bool,
               say: Callable[[str], None], health_timeout_s: float) -> bool:
    """A running sglang-router that the inventory now wants as smg is migrated (router/migrate.py), and what an
    interrupted migration left is completed or undone; True when that converged the router (nothing more to do)."""
    state = facts.migration
    to_smg = spec.package == "smg"
    migrate = to_smg and state.module == OLD_MODULE and facts.active == "active"
    if not state.leftover and not migrate:
        return False
    record = report.record
    if dry_run:
        what = (f"finish or undo the interrupted migration to smg ({state.text()})" if state.leftover else
                _migration_text(spec))
        record.changes.append(what)
        record.status, record.summary = "would-change", what
        return True
    m, final = _staged(spec, ct, report.url, facts, bundle, urls, api_key, say=say, health_timeout_s=health_timeout_s)
    try:
        resumed = resume(m, state, facts, final) if state.leftover else None
        if resumed == "completed":
            what = "completed the interrupted migration to smg"
        elif migrate:
            run_migration(m, render_staging(spec, schema, urls, api_key), final)
            undid = "undid an interrupted migration, then " if resumed == "undone" else ""
            what = f"{undid}migrated sglang-router to {release_of(spec).name} ({len(urls)} worker(s)), no restart"
        else:
            # finished or undone, and nothing to migrate: the usual converge follows; the record says what was done
            record.changes.append(f"{'finished' if resumed == 'finished' else 'undid'} what an interrupted "
                                  f"migration left ({state.text()})")
            record.status = "changed"
            return False
    finally:
        record.details["migration"] = m.record()
    record.changes.append(what)
    record.status, record.summary = "changed", what
    record.details["health"] = m.details.get("staging_gate", {})
    return True


def _migration_text(spec: RouterSpec) -> str:
    """What a plan says of a migration from a running sglang-router to smg."""
    default = " (the inventory names no router.package: smg is the default)" if "package" not in \
        spec.model_fields_set else ""
    return (f"migrate the running sglang-router to {release_of(spec).name}{default} with no request dropped "
            f"(staging smg on :{staging_port(spec)}, then new connections redirected to it while sglang-router "
            "finishes its own)")


def _staged(spec: RouterSpec, ct: Container, base_url: str, facts: RouterFacts, bundle: RouterBundle,
            urls: list[str], api_key: str | None, *, say: Callable[[str], None],
            health_timeout_s: float) -> tuple[Migration, BundleApply]:
    """The staging path's context (router/migrate.py): a migration to smg, or a handover of a running router (smg
    or 0.3.2) to its changed unit, and how the final router's files are written."""
    m = Migration(ct=ct, base_url=base_url, staging_port=staging_port(spec),
                  staging_metrics_port=staging_metrics_port(spec),
                  old_metrics_port=old_metrics_port(facts.execstart), api_key=api_key, urls=urls,
                  python=f"{spec.venv.rstrip('/')}/bin/python",
                  gate=lambda url: _wait_healthy(url, api_key, urls, health_timeout_s, say), say=say,
                  router=spec.package)
    return m, BundleApply(bundle, lambda b, action: _apply(ct, b, action=action))


def _reconcile_live(base_url: str, api_key: str | None, report: RouterReport, urls: list[str], *, dry_run: bool,
                    say: Callable[[str], None]) -> Reconciled:
    """Add the chosen workers the running router does not list (each after it answers a generation with its key),
    remove the inventory's other workers it lists; a worker whose check fails is left out and named."""
    workers = {w.url: w for w in report.all_workers}
    keep = [w for u, w in workers.items() if u in urls]
    drop = [w for u, w in workers.items() if u not in urls]
    with RouterClient(base_url, api_key, timeout_s=10.0) as client:
        done = reconcile(client, keep, drop, dry_run=dry_run)
    report.live = done
    if done.changed or done.refused:
        say(f"live workers: {done.text(dry_run=dry_run)}")
    for name in done.refused:
        url = next(w.url for w in keep if w.name == name)
        urls.remove(url)
        if name in report.workers:
            report.workers.remove(name)
        report.left_out.append(name)
    if done.refused and not dry_run:
        report.exit_code = 1
    return done


def _apply(ct: Container, bundle: RouterBundle, *, action: str | None) -> None:
    res = ct.script(apply_script(bundle, action=action), check=False, timeout=120, what="router files")
    if res.rc != 0:
        raise RemoteError(f"installing the router's files in CT {ct.vmid} failed: "
                          f"{res.said(400)}",
                          fix=f"see `journalctl -u {UNIT}` in CT {ct.vmid}; re-run deploy up")


def _plan_before_up(spec: RouterSpec, vmid: int, report: RouterReport, workers: int) -> None:
    """What a plan says while the router's container does not exist or run yet: what `up` would do."""
    what = (f"install {release_of(spec).requirement} in {spec.venv} once `up` has created and started CT {vmid}, "
            f"and start the router ({workers} worker(s))")
    record = report.record
    record.changes.append(what)
    record.status, record.summary = "would-change", what
    record.details.update({"venv": spec.venv, "installed_version": None, "active": None})


def _container_runs(ct: Container) -> bool:
    """One round trip, plans only: whether the router's container exists and runs (a fresh host's does not)."""
    return ct.running(timeout=60)


def _read_facts(ct: Container, spec: RouterSpec, argv: list[str]) -> RouterFacts:
    """The router's facts (ROUTER in router/facts.py), one round trip once the container's boot has settled."""
    return read_router_facts(ct, spec, argv)


def install_script(inventory: Inventory) -> str:
    """Pure: the venv and the pinned router, from router.pip_index_url, else its host container's site index."""
    spec = inventory.router
    assert spec is not None and spec.runs_on != "operator"
    index_url = spec.pip_index_url or inventory.hosts[spec.runs_on].container.pip_index_url
    return render_script("router_install.sh.j2", python=f"{spec.venv.rstrip('/')}/bin/python", venv=spec.venv,
                         index_options=pip_index_options(index_url), requirement=release_of(spec).requirement)


def _install(ct: Container, spec: RouterSpec, script: str) -> None:
    res = ct.script(script, check=False, timeout=1800, what=f"pip install {spec.package}")
    if res.rc != 0:
        raise RemoteError(f"pip install {release_of(spec).requirement} in CT {ct.vmid} failed: "
                          f"{res.said(500)}",
                          fix="check the container's network, or set router.pip_index_url (or the host's "
                              "container.pip_index_url) to a reachable index")


def _wait_healthy(base_url: str, api_key: str | None, urls: list[str], timeout_s: float,
                  say: Callable[[str], None]) -> dict[str, Any]:
    """/health 200, then every worker listed healthy (and /readiness 200 when there is a worker)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    with RouterClient(base_url, api_key, timeout_s=5.0) as client:
        while time.monotonic() < deadline:
            if client.healthy():
                try:
                    workers = {w.url: w for w in client.list_workers()}
                    missing = [u for u in urls if u not in workers or not workers[u].healthy]
                    ready = client.ready() if urls else False
                except RemoteError as err:
                    last = err.what
                else:
                    if not missing and (ready or not urls):
                        return {"health": 200, "readiness": 200 if ready else 503,
                                "healthy_workers": len(urls), **_through_router(base_url, api_key, urls)}
                    last = f"workers not yet healthy: {', '.join(missing) or '(readiness 503)'}"
            time.sleep(1.0)
    raise CheckFailed(f"router at {base_url} not healthy within {timeout_s:.0f} s: {last}",
                      fix=f"see `journalctl -u {UNIT}` in the router's container; check the worker URLs")


def _through_router(base_url: str, api_key: str | None, urls: list[str]) -> dict[str, Any]:
    """After workers were (re-)added or the router restarted: one synthetic generation through the router must be
    answered (a router that lists its workers healthy can still fail every request, issue 37). CheckFailed if not."""
    if not urls:
        return {}
    error = generate_error(HttpTransport(), base_url, api_key)
    if error is not None:
        raise CheckFailed(f"router at {base_url} lists its {len(urls)} worker(s) healthy, but a request through it "
                          f"failed: {error}",
                          fix=f"see `journalctl -u {UNIT}` in the router's container and `deploy router status`")
    return {"through_router": "a generation through the router was answered"}


def managed_unit_state(inventory: Inventory, *, tofu: bool = False) -> dict[str, Any]:
    """`systemctl is-active sglang-router` in the router's container (one round trip), when deploy manages it, the
    package its launcher runs, and what an interrupted migration left there."""
    place = router_place(inventory)
    if place is None:
        return {}
    from orchestrator.remote.ssh import SshHost

    where = {"runs_on": place.host.name, "vmid": place.vmid}
    try:
        with SshHost(place.host, tofu=tofu) as ssh:
            read = Container(ssh, place.vmid).read_script(f"systemctl is-active {UNIT} || true\n{state_command()}",
                                                          UNIT_STATE, timeout=60,
                                                          what="router unit state")
        state = read.migration
        package = {"smg": "smg", OLD_MODULE: "sglang-router"}.get(state.module)
        return {**where, "unit": read.unit,
                **({"package": package} if package else {}),
                **({"migration_left": state.text()} if state.leftover else {})}
    except RemoteError as err:
        return {**where, "unit": "unknown", "unit_error": err.what}
