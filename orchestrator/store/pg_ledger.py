"""The ledger (state/ledger.py) against the team store (state/pg.py): its queries over the store's connection.

Its own module so that a command that only claims (a converged `up`, a roll) never imports the ledger's module,
which the store's claims and records do not need (tests/perf/state_store_cost.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.ledger.sqlite import Ledger, RunRecord
from orchestrator.store import base as st

if TYPE_CHECKING:
    from orchestrator.store.pg import PgStore

from orchestrator.store.pg_conn import DbError, Lost, PgConn, UniqueViolation, unavailable


class _Row(tuple[Any, ...]):
    """A row read by column name or position (as sqlite3.Row, which the ledger's code reads)."""

    names: dict[str, int]

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(self.names[key] if isinstance(key, str) else key)

    def keys(self) -> list[str]:
        return list(self.names)


class _Conn:
    """The ledger's connection API (`?` parameters, rows by name) over the store's connection."""

    def __init__(self, conn: PgConn) -> None:
        self._conn = conn

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        res = self._conn.execute(sql.replace("?", "%s"), tuple(args))
        names = {n: i for i, n in enumerate(res.names)}
        rows = []
        for values in res.rows:
            row = _Row(values)
            row.names = names
            rows.append(row)
        res.rows = list(rows)
        return res


class PgLedger(Ledger):
    """The ledger's queries (state/ledger.py) against the store; each run names who recorded it."""

    integrity_errors = (UniqueViolation,)
    db_errors = (DbError,)

    def __init__(self, pg: PgStore) -> None:  # no file, no local migration: the store's schema is migrated
        self.pg = pg
        self.path = Path(pg.where)

    @contextmanager
    def _connect(self) -> Iterator[Any]:
        try:
            yield _Conn(self.pg.conn)
        except Lost as exc:
            raise unavailable(self.pg.settings, exc) from None

    def schema_version(self) -> int:
        return self.pg.schema_version()

    def _insert(self, rec: RunRecord) -> None:
        super()._insert(rec)
        with self._connect() as conn:
            conn.execute("UPDATE runs SET by_user = ?, by_machine = ?, by_run = ? WHERE id = ?",
                         (st.user(), st.machine(), st.run_id(), rec.id))
