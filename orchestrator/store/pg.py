"""The team's state store in PostgreSQL (issue 51): claims, ledger, records, through pg8000 (state/pg_conn.py).

Imported only when a store URL is set (state/store.py): the driver costs nothing to a command run on this
machine's state.

- One connection per process, autocommit, opened at the first use (before any planning: a store that cannot be
  reached refuses a command that would change a host before it changes anything). TCP keepalives and a TCP user
  timeout are set unless the URL sets them, so a server that vanished is noticed within about 16 s: before the
  server's keepalives (about 20 s, docs/team.md) free this process's claims for another machine.
- Claims are session advisory locks (`pg_try_advisory_lock`, `_shared` for a single-host run's claim): the server
  frees them when the holder's connection ends, SIGKILL included, as the kernel frees a flock. The holder's user,
  machine, pid, command and run id are a `claims` row written in the same statement; a refused command reads the
  rows whose backend is still alive. A heartbeat (HEARTBEAT_S) notes a lost connection; `claims.ensure_held`
  stops the run at its next remote command.
- The schema is versioned in `deploy.schema_version`: migrations()[i] takes it from i to i+1 in one transaction
  under a transaction advisory lock (two tools upgrading at once wait for each other); a schema newer than this
  tool is refused. A migration library (alembic) would bring SQLAlchemy's import into every team command (about
  the whole client CPU budget of a converged `up`), for a handful of DDL statements.
- Everything lives in the schema `deploy`, so the store can share a database with other tools.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.errors import ConfigError
from orchestrator.store import base as st
from orchestrator.store.base import ClaimRow, Holder, RecordKind, StoreSettings, StoreStatus
from orchestrator.store.local import LocalRecords
from orchestrator.store.pg_conn import (
    ConnParams,
    DbError,
    Lost,
    PgConn,
    UndefinedTable,
    conn_params,
    parse_url,
    safe_url,
    unavailable,
)

if TYPE_CHECKING:
    from orchestrator.ledger.sqlite import Ledger

SCHEMA = "deploy"
#: How often a process holding claims checks that its connection (so its claims) is still there.
HEARTBEAT_S = 1.0
_MIGRATION_LOCK = 0x6465706C6F79  # "deploy"

#: The schema's version: len(migrations()) (tests/unit/test_team_store.py checks it). A constant, so that a command
#: whose store is there already (every command but the first) never imports the ledger's module (its models and
#: parsers: CPU a converged `up` on this machine's state does not spend, tests/perf/state_store_cost.py).
SCHEMA_VERSION = 2


def migrations() -> tuple[str, ...]:
    """MIGRATIONS[i] takes the schema from version i to i + 1."""
    from orchestrator.ledger.sqlite import MIGRATIONS as LOCAL_MIGRATIONS

    return (
        # 0 -> 1: the ledger's tables as on this machine (state/ledger.py), with each row's author, and the team's own
        _V1.format(runs=LOCAL_MIGRATIONS[0].replace("jsonl_path TEXT",
                                                    "jsonl_path TEXT, by_user TEXT, by_machine TEXT, by_run TEXT"),
                   tune_runs=LOCAL_MIGRATIONS[1]),
        # 1 -> 2: the gates' verdict on a run they judged, as on this machine (the ledger's 3 -> 4)
        LOCAL_MIGRATIONS[3],
    )


_V1 = """
    {runs}
    {tune_runs}
    CREATE TABLE host_events (
        host TEXT NOT NULL,
        at TEXT NOT NULL,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL,
        rowid BIGSERIAL
    );
    CREATE INDEX host_events_host_at ON host_events (host, at);
    CREATE TABLE records (
        kind TEXT NOT NULL,
        key TEXT NOT NULL,
        doc TEXT NOT NULL,
        by_user TEXT NOT NULL,
        by_machine TEXT NOT NULL,
        by_run TEXT NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        PRIMARY KEY (kind, key)
    );
    CREATE TABLE claims (
        name TEXT NOT NULL,
        backend_pid INTEGER NOT NULL,
        exclusive BOOLEAN NOT NULL,
        user_name TEXT NOT NULL,
        machine TEXT NOT NULL,
        pid INTEGER NOT NULL,
        command TEXT NOT NULL,
        run_id TEXT NOT NULL,
        since TEXT NOT NULL,
        PRIMARY KEY (name, backend_pid)
    );
    """


def read_password_file(path: Path) -> str:
    """The password from a file only its owner can read (as libpq insists for PGPASSFILE)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ConfigError(f"state store password file {path}: {exc.strerror}",
                          fix="write the password alone into a file of mode 0600 and name it") from None
    with os.fdopen(fd) as f:
        info = os.fstat(f.fileno())
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO) or info.st_uid != os.geteuid():
            raise ConfigError(f"state store password file {path} is readable by others (mode "
                              f"{stat.S_IMODE(info.st_mode):04o}) or not yours",
                              fix=f"chmod 600 {path} (and own it); nothing was sent")
        return f.read().strip("\r\n")


def connect_params(settings: StoreSettings) -> ConnParams:
    """What to connect with: the URL as given (TLS settings honoured or refused, state/pg_conn.py), this tool's
    client defaults where the URL sets none, the password from its file (never in the URL or argv)."""
    try:
        given = parse_url(settings.url)
    except ValueError as exc:
        raise ConfigError(f"state store URL ({settings.origin}) is not a PostgreSQL URL: {exc}",
                          fix="e.g. postgresql://deploy@db.example:5432/deploy?sslmode=verify-full") from None
    if given.password:
        raise ConfigError(f"the state store URL ({settings.origin}) carries a password",
                          fix="remove it from the URL; put it alone in a 0600 file named by state_password_file "
                              "or DEPLOY_STATE_PASSWORD_FILE (or use PGPASSFILE)")
    # The schema's tables by their plain names, set at login (no round trip of its own).
    query = {**given.query, "options": f"{given.query.get('options', '')} -c search_path={SCHEMA}".strip()}
    password = read_password_file(settings.password_file) if settings.password_file is not None else None
    return conn_params(replace(given, query=query), password)


def claim_key(name: str) -> int:
    """A claim's advisory lock key: 64 bits of a hash of its name (names are short; no two of a fleet collide)."""
    return int.from_bytes(hashlib.blake2b(f"deploy-claim:{name}".encode(), digest_size=8).digest(), "big",
                          signed=True)


@dataclass
class PgClaims:
    pg: PgStore
    scope: str = "in the team store"
    _held: dict[str, bool] = field(default_factory=dict)
    _lost: str | None = None
    _beat: threading.Thread | None = None

    def take(self, name: str, holder: Holder, exclusive: bool) -> Holder | str | None:
        """The lock and its `claims` row in one statement (one round trip): a refused command never reads a
        claim whose holder is not written yet, and the claim costs the run one round trip, not two."""
        fn = "pg_try_advisory_lock" if exclusive else "pg_try_advisory_lock_shared"
        try:
            got = self.pg.conn.execute(
                f"WITH got AS MATERIALIZED (SELECT {fn}(%s) AS ok), "
                "gone AS (DELETE FROM claims WHERE (SELECT ok FROM got) AND name = %s AND backend_pid NOT IN "
                "(SELECT pid FROM pg_stat_activity)), "
                "mine AS (INSERT INTO claims SELECT v.* FROM (VALUES (%s::text, pg_backend_pid(), %s::boolean, "
                "%s::text, %s::text, %s::integer, %s::text, %s::text, %s::text)) AS v, got WHERE got.ok "
                "ON CONFLICT (name, backend_pid) DO UPDATE SET exclusive = excluded.exclusive, "
                "user_name = excluded.user_name, machine = excluded.machine, pid = excluded.pid, "
                "command = excluded.command, run_id = excluded.run_id, since = excluded.since) "
                "SELECT ok FROM got",
                (claim_key(name), name, name, exclusive, holder.user, holder.machine, holder.pid, holder.command,
                 holder.run_id, holder.since)).fetchone()
            if not (got and got[0]):
                return self._holder(name)
        except Lost as exc:
            raise unavailable(self.pg.settings, exc) from None
        self._held[name] = exclusive
        self._start_heartbeat()
        return None

    def _holder(self, name: str) -> Holder | str:
        row = self.pg.conn.execute(
            "SELECT user_name, machine, pid, command, run_id, since FROM claims WHERE name = %s AND backend_pid IN "
            "(SELECT pid FROM pg_stat_activity) ORDER BY exclusive DESC, since LIMIT 1", (name,)).fetchone()
        if row is None:
            return "another deploy command (its name not written yet)"
        return Holder(row[0], row[1], int(row[2]), row[3], row[4], row[5])

    def release(self, name: str) -> None:
        exclusive = self._held.pop(name)
        fn = "pg_advisory_unlock" if exclusive else "pg_advisory_unlock_shared"
        with suppress(DbError):  # a lost connection freed it already
            self.pg.conn.execute(f"WITH gone AS (DELETE FROM claims WHERE name = %s AND backend_pid = "
                                 f"pg_backend_pid()) SELECT {fn}(%s)", (name, claim_key(name)))

    def holds_any(self) -> bool:
        return bool(self._held)

    def lost(self) -> str | None:
        if self._lost is None and self._held and self.pg.conn.closed:
            self._lost = "its connection to the store is closed"
        return self._lost

    def _start_heartbeat(self) -> None:
        if self._beat is not None:
            return
        self._beat = threading.Thread(target=self._heartbeat, name="state-store-heartbeat", daemon=True)
        self._beat.start()

    def _heartbeat(self) -> None:
        while self._lost is None:
            time.sleep(HEARTBEAT_S)
            if not self._held:
                continue
            try:
                self.pg.conn.execute("SELECT 1")
            except DbError as exc:
                why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                self._lost = f"the connection to {safe_url(self.pg.settings.url)} was lost: {why}"


@dataclass
class PgRecords:
    pg: PgStore

    def put(self, kind: RecordKind, key: str, text: str) -> None:
        self.pg.run("INSERT INTO records (kind, key, doc, by_user, by_machine, by_run) VALUES (%s, %s, %s, %s, %s, "
                    "%s) ON CONFLICT (kind, key) DO UPDATE SET doc = excluded.doc, by_user = excluded.by_user, "
                    "by_machine = excluded.by_machine, by_run = excluded.by_run, updated_at = now()",
                    (kind, key, text, st.user(), st.machine(), st.run_id()))

    def get(self, kind: RecordKind, key: str) -> str | None:
        row = self.pg.run("SELECT doc FROM records WHERE kind = %s AND key = %s", (kind, key)).fetchone()
        return None if row is None else str(row[0])

    def items(self, kind: RecordKind) -> list[tuple[str, str]]:
        rows = self.pg.run("SELECT key, doc FROM records WHERE kind = %s ORDER BY key", (kind,)).fetchall()
        return [(str(k), str(d)) for k, d in rows]

    def where(self, kind: RecordKind, key: str) -> str:
        return f"{self.pg.where} record {kind}/{key}"


@dataclass
class MigrateReport:
    runs: int = 0
    tune_runs: int = 0
    host_events: int = 0
    records: dict[str, int] = field(default_factory=dict)
    already: int = 0


class PgStore:
    """The team store: one connection, opened and schema-checked by `open`."""

    kind: Literal["local", "postgresql"] = "postgresql"

    def __init__(self, settings: StoreSettings, conn: PgConn) -> None:
        self.settings = settings
        self.conn = conn
        self.where = safe_url(settings.url)
        self.records = PgRecords(self)
        self.claims = PgClaims(self)

    @classmethod
    def open(cls, settings: StoreSettings) -> PgStore:
        params = connect_params(settings)
        try:
            conn = PgConn.connect(params)
        except DbError as exc:
            raise unavailable(settings, exc) from None
        pg = cls(settings, conn)
        try:
            pg.migrate()
        except Lost as exc:
            conn.close()
            raise unavailable(settings, exc) from None
        except DbError as exc:
            conn.close()
            raise ConfigError(f"the team state store {pg.where} refused its schema: {exc}",
                              fix="the store's role must own its database (or hold CREATE on it): see "
                                  "docs/team.md") from None
        return pg

    def close(self) -> None:
        with suppress(DbError):
            self.conn.close()

    def stale(self) -> bool:
        return self.conn.closed and not self.claims.holds_any()

    def run(self, sql: str, args: Sequence[Any] = ()) -> Any:
        try:
            return self.conn.execute(sql, tuple(args))
        except Lost as exc:
            raise unavailable(self.settings, exc) from None

    def schema_version(self) -> int:
        row = self.conn.execute(f"SELECT max(version) FROM {SCHEMA}.schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def migrate(self) -> None:
        """Bring the schema to this tool's version (one round trip when it is there already)."""
        with suppress(UndefinedTable):
            if self._check_version(self.schema_version()):
                return
        with self.conn.transaction():
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            self.conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
            self.conn.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_version (version INTEGER NOT NULL)")
            version = self.schema_version()
            if self._check_version(version):
                return
            steps = migrations()
            for v in range(version, SCHEMA_VERSION):
                for stmt in steps[v].split(";"):
                    if stmt.strip():
                        self.conn.execute(stmt)
                self.conn.execute(f"INSERT INTO {SCHEMA}.schema_version VALUES (%s)", (v + 1,))

    def _check_version(self, version: int) -> bool:
        """True when the schema is this tool's; refuses a newer one."""
        if version > SCHEMA_VERSION:
            raise ConfigError(f"the team state store {self.where} has schema version {version}, newer than this "
                              f"tool's {SCHEMA_VERSION}", fix="upgrade deploy on this machine (`deploy --version`); "
                              "nothing was planned or changed")
        return version == SCHEMA_VERSION

    def ledger(self) -> Ledger:
        from orchestrator.store.pg_ledger import PgLedger

        return PgLedger(self)

    def status(self) -> StoreStatus:
        rows = self.run("SELECT name, exclusive, user_name, machine, pid, command, run_id, since FROM claims WHERE "
                        "backend_pid IN (SELECT pid FROM pg_stat_activity) ORDER BY name, since").fetchall()
        claims = tuple(ClaimRow(r[0], bool(r[1]), Holder(r[2], r[3], int(r[4]), r[5], r[6], r[7])) for r in rows)
        return StoreStatus("postgresql", self.where, self.schema_version(), SCHEMA_VERSION, claims)

    # -- deploy state migrate ------------------------------------------------------------------------------
    def import_local(self, ledger_path: Path, records: LocalRecords) -> MigrateReport:
        """Copy this machine's ledger and records in, once: what is there already (same id) is kept."""
        report = MigrateReport()
        with self.conn.transaction():
            if ledger_path.exists():
                self._import_ledger(ledger_path, report)
            for kind in st.RECORD_KINDS:
                n = 0
                for key, doc in records.items(kind):
                    cur = self.conn.execute(
                        "INSERT INTO records (kind, key, doc, by_user, by_machine, by_run) VALUES (%s, %s, %s, %s, "
                        "%s, %s) ON CONFLICT (kind, key) DO NOTHING",
                        (kind, key, doc, st.user(), st.machine(), st.run_id()))
                    n += cur.rowcount
                    report.already += 1 - cur.rowcount
                report.records[kind] = n
        return report

    def _import_ledger(self, path: Path, report: MigrateReport) -> None:
        import sqlite3

        src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            src.row_factory = sqlite3.Row
            cols = ("id, host, release_id, preset, started_at, flags_json, bench_json, telemetry_json, "
                    "diagnosis_json, source, label, jsonl_path")
            if any(c[1] == "verdict" for c in src.execute("PRAGMA table_info(runs)")):  # a ledger before 4: none
                cols += ", verdict"
            for row in src.execute(f"SELECT {cols} FROM runs ORDER BY started_at"):
                cur = self.conn.execute(f"INSERT INTO runs ({cols}, by_user, by_machine, by_run) VALUES "
                                        f"({', '.join(['%s'] * (len(tuple(row)) + 3))}) ON CONFLICT (id) DO NOTHING",
                                        (*tuple(row), st.user(), st.machine(), "migrated"))
                report.runs += cur.rowcount
                report.already += 1 - cur.rowcount
            for row in src.execute("SELECT tune_id, run_id, point, concurrency, purpose FROM tune_runs"):
                cur = self.conn.execute("INSERT INTO tune_runs VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                                        tuple(row))
                report.tune_runs += cur.rowcount
                report.already += 1 - cur.rowcount
            for row in src.execute("SELECT host, at, kind, detail FROM host_events ORDER BY rowid"):
                cur = self.conn.execute(
                    "INSERT INTO host_events (host, at, kind, detail) SELECT %s, %s, %s, %s WHERE NOT EXISTS "
                    "(SELECT 1 FROM host_events WHERE host = %s AND at = %s AND kind = %s AND detail = %s)",
                    (*tuple(row), *tuple(row)))
                report.host_events += cur.rowcount
                report.already += 1 - cur.rowcount
        except sqlite3.Error as exc:
            raise ConfigError(f"the ledger {path} cannot be read: {exc}", fix="check the file; nothing was copied "
                              "(the copy is one transaction)") from None
        finally:
            src.close()
