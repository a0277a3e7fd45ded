"""A single-host command that restarts a router worker (`deploy tune`, `roll host`, `rollback host`) takes it out
of rotation first.

Why: a tune rolls a trial release per flag point and restores the original at the end, each a server restart; with
the host still in the router, clients' requests reach a server that is stopping or starting and fail (seen in the
chaos soak: 4 failed client requests during one tune). So the host is drained through the router like a fleet
roll's host (router/drain.py: never the last serving worker, in-flight requests finish), the command runs, and the
host is added back with the same checks as a roll's add-back, only when it runs a release that passed them (the
tune's end, or its restore read back). A host the router has no worker for, or an inventory without a router, runs
as before.

`roll host` and `rollback host` of a worker do the same for their one restart (issue 37's drain for a single
host): the soaks' only failed client requests outside router and container faults came from them. So does `up host`
of a worker, when its plan says the run restarts the server (a converged host's `up` restarts nothing and is not
drained).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from orchestrator.commands.roll import RollOutcome, RollResult, Say, refused, roll_host, rollback_host
from orchestrator.commands.up import UpRequest, UpResult, up_host
from orchestrator.engine.runner import ProgressFn, RunReport
from orchestrator.engine.state import RollRequest
from orchestrator.engine.step import RunOptions
from orchestrator.errors import CheckFailed, ConfigError, DeployError, unknown_name
from orchestrator.inventory.models import Host, Inventory
from orchestrator.locks.claims import claim_fleet
from orchestrator.remote.http import Transport
from orchestrator.router.drain import Drainer
from orchestrator.router.places import router_workers
from orchestrator.router.session import RouterSession
from orchestrator.runlog import StepRecord


def routes_to(inv: Inventory, host: str) -> bool:
    """True when the inventory's router has `host` among its workers (what the command must also claim)."""
    return inv.router is not None and any(h.name == host for h in router_workers(inv))


@dataclass
class Rotation:
    """What the block tells the add-back: `serving` set by a block that ended without raising but knows whether
    the host runs a release that may serve (a roll's outcome); None leaves the decision to the block's end.
    `drain` takes the host out now (once; later calls do nothing): a block opened with `lazy=True` calls it right
    before its first step that restarts the server, so a stack build or a download before it runs with the host
    still serving; a block interrupted before that leaves the host in the router, untouched."""

    serving: bool | None = None
    drain: Callable[[], None] = lambda: None
    drained: bool = False


@contextmanager
def out_of_rotation(inv: Inventory, host: str, *, say: Callable[[str], None], drain_timeout_s: float,
                    back_ok: Callable[[], bool], lazy: bool = False,
                    http: Transport | None = None) -> Iterator[Rotation]:
    """Drain `host` from the router for the block (at its start, or with `lazy` when the block calls
    `Rotation.drain`), then add it back when the block ended well (or set `Rotation.serving`) or `back_ok()` says
    it runs a release that may serve (an interrupted tune whose restore was read back). A drain the router's safety
    refuses (the last serving worker) raises: before the block runs (nothing changed), or from `Rotation.drain`
    (before the restart it was called for)."""
    rotation = Rotation()
    if not routes_to(inv, host):
        yield rotation
        return
    side = RouterSession(inv, drain_timeout_s, http=http)
    url = side.urls.get(host)
    if host in side.unknown:
        raise side.unknown[host].at(host=host, step="drain")
    if url is None:  # pragma: no cover - routes_to() said it is a worker, and its address was learnt
        yield rotation
        return
    side.check()
    drainer = side.drain_with(say)

    def drain() -> None:
        if rotation.drained:
            return
        drained = drainer.drain(url)
        rotation.drained = True
        say(f"{host} ({url}) is out of the router while it restarts: {drained.note}")

    rotation.drain = drain
    try:
        if not lazy:
            drain()
        ended_well = False
        try:
            yield rotation
            ended_well = True
        finally:
            if rotation.drained:
                may_serve = (rotation.serving if ended_well and rotation.serving is not None
                             else ended_well or back_ok())
                _add_back(drainer, host, url, side.worker_keys.get(host), say,
                          may_serve=may_serve, raise_errors=ended_well)
    finally:
        drainer.client.close()


def drain_before(rotation: Rotation, steps: frozenset[str], progress: ProgressFn | None) -> ProgressFn:
    """A run's progress hook that drains the host (Rotation.drain) as the first of `steps` is about to start,
    then passes every event on."""
    def hook(name: str, record: StepRecord | None) -> None:
        if record is None and name in steps:
            rotation.drain()
        if progress is not None:
            progress(name, record)
    return hook


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


#: A roll that ended so: the host runs a release that passed its checks, or the one it ran before (nothing installed).
_SERVING = (RollResult.KEPT, RollResult.ROLLED_BACK, RollResult.UNCHANGED, RollResult.REFUSED)


def roll_out_of_rotation(host: Host, inv: Inventory, request: RollRequest, options: RunOptions, *,
                         drain_timeout_s: float, progress: ProgressFn | None, say: Say) -> RollOutcome:
    """`roll host H` of a router worker: under the host's and the router's claim, the roll is first checked as a
    dry run (bad flags and a roll to the flags it already runs are refused with the router untouched), then H is
    drained, rolled (every gate, rollback on failure) and added back when it serves a release that passed them."""
    outcome: RollOutcome | None = None
    try:
        with claim_fleet([host.name], options.command, router=True):
            checked = roll_host(host, inv, request, replace(options, dry_run=True))
            if checked.error is not None:
                return checked
            cand = checked.candidate
            if cand is not None and not cand.new_flags.get(METRICS_FLAG):
                return refused(host.name, metrics_off(host.name, f"`{options.command}`"))
            with out_of_rotation(inv, host.name, say=say, drain_timeout_s=drain_timeout_s,
                                 back_ok=lambda: False, lazy=True) as rotation:
                outcome = roll_host(host, inv, request, options, say=say,
                                    progress=drain_before(rotation, ROLL_RESTARTS, progress))
                rotation.serving = outcome.result in _SERVING
    except DeployError as err:  # a claim held, a drain refused (the last serving worker), an add-back that failed
        if outcome is None:
            return refused(host.name, err)
        return outcome if outcome.error is not None else replace(outcome, error=err)
    return outcome


def rollback_out_of_rotation(host: Host, inv: Inventory, to_release: str | None, options: RunOptions, *,
                             drain_timeout_s: float, progress: ProgressFn | None, say: Say) -> RunReport:
    """`rollback host H` of a router worker: a `--to` id H does not store is refused first, with the router
    untouched; then H is drained, rolled back, and added back when the rollback ended well or was refused before
    any change (no previous release: H still runs what it ran). Raises what the claim, the id check or the drain
    raised (nothing changed then) and an add-back that failed after a good rollback."""
    with claim_fleet([host.name], options.command, router=True):
        if to_release is not None:
            _require_release(host, inv, to_release, options)
        with out_of_rotation(inv, host.name, say=say, drain_timeout_s=drain_timeout_s,
                             back_ok=lambda: False) as rotation:
            report = rollback_host(host, inv, to_release, options, progress=progress, say=say)
            rotation.serving = report.failure is None or isinstance(report.failure, ConfigError)
    return report


#: The `up` steps whose change restarts the server or its container (a new release, stack, driver, GPU set or CT).
RESTARTING_STEPS = frozenset({"container", "driver_userspace", "container_gpus", "sglang_install", "server_unit"})
#: Where a drained `roll host` takes the host out: its new release's install (roll_stack builds beside it first).
ROLL_RESTARTS = frozenset({"install_release"})


def drain_points(restarting: list[str]) -> frozenset[str]:
    """Pure: the steps a drained `up` takes the host out before (the first of them to start): those of the plan
    that restart the server or its container, except sglang_install, whose new stack is built beside the running
    server (which keeps serving); its restart is server_unit's (issue 50, 6: a Ctrl-C during the build left a host
    serving its verified release out of the router)."""
    return frozenset(s for s in restarting if s != "sglang_install") | (
        {"server_unit"} if "sglang_install" in restarting else set())


def restarting_changes(result: UpResult) -> list[str]:
    """The steps of an `up` plan that would restart the server, by name (empty: the run restarts nothing)."""
    return [s.name for s in result.steps if s.status == "would-change" and s.name in RESTARTING_STEPS]


def up_out_of_rotation(inv: Inventory, request: UpRequest, *, drain_timeout_s: float, progress: ProgressFn | None,
                       say: Say) -> UpResult:
    """`up host H` of a router worker: under the host's and the router's claim, the run is planned first (one
    quiet dry run); when the plan restarts the server, H is drained, converged and added back when it serves a
    release that passed its checks (the run ended well, or put the previous release back and verified it).
    A plan that restarts nothing, or that fails (the run then reports the same failure itself), runs in place.
    Raises what the claim or the drain raised (nothing changed then) and an add-back that failed after a good run."""
    host = request.host
    with claim_fleet([host.name], request.options.command, router=True):
        plan = up_host(inv, replace(request, options=replace(request.options, dry_run=True)))
        restarting = restarting_changes(plan) if plan.error is None else []
        if not restarting:
            return up_host(inv, request, progress=progress, say=say)
        if not profile_exports_metrics(inv, host):
            raise metrics_off(host.name, f"its profile {host.profile!r}")
        say(f"{host.name} is a router worker and this run restarts its server ({', '.join(restarting)} would "
            f"change): it is drained from the router as its restart begins and added back after its checks "
            "(--no-drain: in place)")
        with out_of_rotation(inv, host.name, say=say, drain_timeout_s=drain_timeout_s,
                             back_ok=lambda: False, lazy=True) as rotation:
            result = up_host(inv, request, say=say,
                             progress=drain_before(rotation, drain_points(restarting), progress))
            failure = result.error
            rotation.serving = (failure is None or isinstance(failure, ConfigError)
                                or result.report.state.rollback is not None)
    return result


#: The server flag whose /metrics a router worker's add-back reads (router/checks.py add_check_error).
METRICS_FLAG = "enable-metrics"


def metrics_off(host: str, what: str) -> ConfigError:
    """A router worker restarted onto flags without /metrics could not be put back in the router (its add-back,
    and `up`'s live reconcile, check the router's reach by the server's request counter): refused before any
    drain or change (issue 50, 8: the roll kept the release, then left the host out)."""
    return ConfigError(f"{host} is a router worker and {what} turns its server's {METRICS_FLAG} off: the router "
                       "checks that requests reach a worker by its /metrics before it is put back, so it would stay "
                       "out of the router; nothing was drained or changed", host=host,
                       fix=f"keep {METRICS_FLAG}: true on the router's workers (or take the host out of "
                           "router.workers first)")


def profile_exports_metrics(inv: Inventory, host: Host) -> bool:
    """Whether the host's profile turns the server's /metrics on (a profile whose flags do not parse is left to
    the run, which refuses it itself)."""
    from orchestrator.flags import FlagSchema, canonicalize

    profile = inv.profile_for(host)
    try:
        return bool(canonicalize(profile.flags, FlagSchema.load(profile.sglang_version)).get(METRICS_FLAG))
    except ConfigError:
        return True


def _require_release(host: Host, inv: Inventory, release: str, options: RunOptions) -> None:
    """`--to ID` names a release the host stores, asked before the drain (one read of its releases): an unknown
    id is refused with the router untouched, as `roll host`'s dry run refuses bad flags."""
    from orchestrator.commands.history import HistoryRequest, release_history

    known = release_history(inv, HistoryRequest(host, limit=1000, tofu=options.tofu))
    ids = [r.id for r in known.releases if r.id]
    if release not in ids:
        raise unknown_name("release", release, ids, where=f" on {host.name}",
                           fix=f"`deploy history host {host.name}` lists them; nothing was drained or changed")
