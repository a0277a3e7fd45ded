"""Where the tool keeps what outlives one command: this machine (the default) or a team's PostgreSQL (issue 51).

Why one narrow interface: the claims (locks/claims.py), the ledger (state/ledger.py), the fleet-roll records
(fleet/rollout.py), the tune records (tune/record.py) and the watch's cordons (fleet/watch.py) were each kept on
the operator's machine, so two operators (or the watch on a utility machine) never saw each other. A team names one
PostgreSQL store once (`DEPLOY_STATE_URL`, or `state_url:` in an inventory file such as `deploy.yaml`) and every
one of those goes there; with neither set nothing changes: files and SQLite under the state dir, as before.

The PostgreSQL backend lives in state/pg.py and is imported only when a store URL is set, so the driver costs
nothing to a command run on this machine's state (the CLI's start time, tests/perf/client_cost.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.ledger.sqlite import Ledger

from orchestrator.store.base import (
    PASSWORD_FILE_ENV,
    RECORD_KINDS,
    URL_ENV,
    ClaimRow,
    Claims,
    Holder,
    RecordKind,
    Records,
    StateStore,
    StoreSettings,
    StoreStatus,
    machine,
    now_text,
    run_id,
    user,
)
from orchestrator.store.local import LocalClaims, LocalRecords, LocalStore

__all__ = ["PASSWORD_FILE_ENV", "RECORD_KINDS", "URL_ENV", "ClaimRow", "Claims", "Holder", "LocalClaims",
           "LocalRecords", "LocalStore", "RecordKind", "Records", "StateStore", "StoreSettings", "StoreStatus",
           "configure_from_inventory", "current", "is_remote", "ledger", "machine", "now_text", "reset", "run_id",
           "settings", "team_records", "user"]


_inventory_settings: StoreSettings | None = None
_current: StateStore | None = None


def configure_from_inventory(url: str | None, password_file: str | None, origin: str) -> None:
    """The inventory's `state_url` / `state_password_file` (DEPLOY_STATE_URL wins when both are set)."""
    global _inventory_settings
    _inventory_settings = (StoreSettings(url, Path(password_file).expanduser() if password_file else None, origin)
                           if url else None)


def settings() -> StoreSettings | None:
    """The team store named for this command, or None: this machine's state."""
    url = os.environ.get(URL_ENV, "").strip()
    if url:
        pw = os.environ.get(PASSWORD_FILE_ENV, "").strip()
        return StoreSettings(url, Path(pw).expanduser() if pw else None, URL_ENV)
    return _inventory_settings


def current() -> StateStore:
    """The store of this command (connected on first use; a remote one that cannot be reached raises
    StoreUnavailable, before anything is planned)."""
    global _current
    wanted = settings()
    if _current is not None and (wanted is None) == (_current.kind == "local") and (
            wanted is None or getattr(_current, "settings", None) == wanted) and not _current.stale():
        return _current
    chosen: StateStore
    if wanted is None:
        chosen = LocalStore()
    else:
        from orchestrator.store.pg import PgStore

        chosen = PgStore.open(wanted)
    _current = chosen
    return chosen


def is_remote() -> bool:
    return settings() is not None


def team_records() -> Records | None:
    """The team store's records, or None on this machine (whose callers keep their own files, as before)."""
    return current().records if is_remote() else None


def ledger() -> Ledger:
    """The ledger of this command's store (`Ledger()` on this machine)."""
    return current().ledger()


def reset() -> None:
    """Forget the store of this process (tests; a store whose connection was lost)."""
    global _current, _inventory_settings
    if _current is not None and hasattr(_current, "close"):
        _current.close()
    _current = None
    _inventory_settings = None
