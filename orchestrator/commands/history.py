"""`deploy history host X` on one host as typed functions: the releases on the target (one round trip), or the
bench runs of the local ledger (`--bench`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.engine.runner import ProgressFn, run_playbook
from orchestrator.engine.state import RunInputs
from orchestrator.engine.step import RunOptions
from orchestrator.inventory.models import Host, Inventory
from orchestrator.releases.documents import ReleaseLine, ReleaseMeta
from orchestrator.runlog import StepRecord
from orchestrator.watchdog.parse import WatchdogStatus

if TYPE_CHECKING:  # the ledger (sqlite3, the bench models) loads in `history`, not in every `status`
    from orchestrator.ledger.sqlite import HostEvent, Ledger, RunRecord


@dataclass(frozen=True)
class Listing:
    """What the fleet judges of a listing: it changes nothing, lists no steps and gives no totals (the fleet sums
    the host's step records)."""

    exit_code: int = 0
    steps: list[StepRecord] = field(default_factory=list)
    ssh_round_trips: int | None = None
    changed: bool = False
    dry_run: bool = False
    error: None = None


@dataclass(frozen=True)
class HistoryRequest:
    host: Host
    limit: int = 20
    tofu: bool = False


@dataclass(frozen=True)
class ReleaseHistory(Listing):
    """The releases stored on the host (each with its meta and verdict documents), the current one, the watchdog."""

    host: str = ""
    current: str | None = None
    releases: list[ReleaseLine] = field(default_factory=list)  # each with an id, oldest first
    watchdog: WatchdogStatus | None = None
    #: deploy watch's cordon/remedy/return events of the host (this machine's ledger), oldest first.
    events: list[HostEvent] = field(default_factory=list)

    def payload(self) -> dict[str, Any]:
        return {"ok": True, "host": self.host, "current": self.current,
                "releases": [r.document() for r in self.releases],
                "watchdog": None if self.watchdog is None else self.watchdog.to_dict(),
                "events": [e.model_dump() for e in self.events]}

    def detail(self) -> str:
        current = self.current
        row = next((line for line in self.releases if line.id == current), None)
        if row is None:
            return f"current {current or 'none'}, {len(self.releases)} release(s)"
        meta, verdict = row.meta or ReleaseMeta(), row.verdict
        diff = meta.flag_diff or []
        changes = ", ".join(f"{k}: {a}→{b}" for k, a, b in diff) if diff else "profile flags"
        tput = verdict.candidate.output_throughput if verdict is not None and verdict.candidate else None
        preset = verdict.preset if verdict is not None else None
        measured = f", {tput:.1f} tok/s ({preset or '?'})" if tput is not None else ""
        word = verdict.verdict if verdict is not None and "verdict" in verdict.model_fields_set else "unverified"
        return (f"current {current} ({word}, {meta.source or '-'}: {changes}"
                f"{measured}), {len(self.releases)} release(s)")


def release_history(inventory: Inventory, request: HistoryRequest, *, progress: ProgressFn | None = None,
                    say: Callable[[str], None] | None = None) -> ReleaseHistory:
    """Read one host's releases; a failed read raises its DeployError."""
    report = run_playbook("history", request.host, inventory,
                          RunOptions(tofu=request.tofu, command="deploy history"),
                          progress=progress, say=say, inputs=RunInputs(history_limit=request.limit))
    rows = report.state.history
    current = next((r.current for r in rows if r.current is not None), None)
    return ReleaseHistory(host=report.host, current=current, releases=[r for r in rows if r.id is not None],
                          watchdog=report.state.watchdog, events=_events(report.host, request.limit, say))


def _events(host: str, limit: int, say: Callable[[str], None] | None) -> list[HostEvent]:
    """The host's events from the ledger; a team store that cannot be reached leaves them out and says so (the
    releases come from the host: a read-only command still works, docs/team.md)."""
    from orchestrator.errors import RemoteError
    from orchestrator.store.store import ledger

    try:
        return ledger().events(host, limit)
    except RemoteError as exc:
        if exc.step != "state store":
            raise
        if say is not None:
            say(f"host events not shown: {exc.what}")
        return []


@dataclass(frozen=True)
class LedgerScope:
    """Whose runs a ledger view shows: the ledger is one file per machine, shared by every inventory on it."""

    hosts: tuple[str, ...] | None  # None: every host in the ledger
    whose: str


@dataclass(frozen=True)
class BenchRuns(Listing):
    """`history --bench`: the scope's runs in the local ledger, newest first, and how many runs of other hosts
    it holds (not shown)."""

    ledger: str = ""
    scope: LedgerScope = LedgerScope(None, "every host")
    runs: list[RunRecord] = field(default_factory=list)
    hidden: dict[str, int] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        hosts = self.scope.hosts
        return {"ok": True, "ledger": self.ledger, "hosts": list(hosts) if hosts else None,
                "hidden_runs": sum(self.hidden.values()), "runs": [r.model_dump(mode="json") for r in self.runs]}

    def detail(self) -> str:
        return f"{len(self.runs)} bench run(s)"


def host_bench_runs(ledger: Ledger, host: str, limit: int) -> BenchRuns:
    """One host's runs (an inventory host's name, or with --all-inventories any host of the ledger)."""
    return bench_runs(ledger, LedgerScope((host,), f"host {host}"), limit, host=host)


def bench_runs(ledger: Ledger, scope: LedgerScope, limit: int, *, host: str | None = None) -> BenchRuns:
    """The ledger's runs of one host (`host`) or of the scope's hosts."""
    runs = (ledger.list_runs(host=host, limit=limit) if host is not None
            else ledger.list_runs(limit=limit, hosts=scope.hosts))
    hidden = {h: n for h, n in ledger.runs_per_host().items() if scope.hosts is not None and h not in scope.hosts}
    return BenchRuns(ledger=str(ledger.path), scope=scope, runs=runs, hidden=hidden)
