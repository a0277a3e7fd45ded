"""Local SQLite ledger of bench runs: history, comparisons, imports of runs made elsewhere.

- Schema version lives in `PRAGMA user_version`; `MIGRATIONS[i]` takes a database from version i to i+1, each in
  one transaction, so an old ledger upgrades in place and a ledger written by a newer tool is refused rather than
  misread.
- WAL journal and a busy timeout: a `deploy bench` writing while `deploy history` reads does not fail with
  "database is locked". Each call opens its own short-lived connection, so a Ledger may be shared by threads.
- Bench, telemetry and diagnosis are stored as JSON of their pydantic models (read back into the models), so new
  optional fields do not need a migration.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from orchestrator.errors import ConfigError
from orchestrator.gates.throughput import DEFAULT_NOISE_PCT, delta_pct
from orchestrator.local.files import open_no_follow, private_state_dir, refuse_link
from orchestrator.local.paths import state_dir
from orchestrator.parsers.bench import BenchParseError, BenchResult, BenchValueError, parse_bench_import
from orchestrator.redact import redact
from orchestrator.telemetry.summary import TelemetrySummary
from orchestrator.verdicts.power import Diagnosis

RunSource = Literal["bench", "import", "roll", "sweep"]
#: What the gates of the run that measured it said of a run a gate judges (the throughput gate's runs of `up` and
#: `roll`): passed; rejected (a gate failed it); interrupted (its run ended, a step failing, before its gates had
#: judged it). None: no gate judges the run (a plain bench, a sweep point, a roll's baseline, an import).
RunVerdict = Literal["passed", "rejected", "interrupted"]

MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        release_id TEXT,
        preset TEXT,
        started_at TEXT NOT NULL,
        flags_json TEXT NOT NULL DEFAULT '{}',
        bench_json TEXT,
        telemetry_json TEXT,
        diagnosis_json TEXT NOT NULL DEFAULT '[]',
        source TEXT NOT NULL CHECK (source IN ('bench', 'import', 'roll', 'sweep')),
        label TEXT,
        jsonl_path TEXT
    );
    CREATE INDEX runs_host_started ON runs (host, started_at);
    CREATE INDEX runs_started ON runs (started_at);
    """,
    # 1 -> 2: every bench run of a `deploy tune`, linked to the tune, its flag point and why it ran
    """
    CREATE TABLE tune_runs (
        tune_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        point TEXT NOT NULL,
        concurrency INTEGER NOT NULL,
        purpose TEXT NOT NULL CHECK (purpose IN ('search', 'confirm')),
        PRIMARY KEY (tune_id, run_id)
    );
    """,
    # 2 -> 3: a host's GPU-fault events (deploy watch: cordoned, remedy, remedied or failed, returned), for history
    """
    CREATE TABLE host_events (
        host TEXT NOT NULL,
        at TEXT NOT NULL,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL
    );
    CREATE INDEX host_events_host_at ON host_events (host, at);
    """,
    # 3 -> 4: the gates' verdict on a run they judged (written by the command after the run: commands/filing.py)
    """
    ALTER TABLE runs ADD COLUMN verdict TEXT;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

# Metrics `compare` reports: (BenchResult/Telemetry attribute, label, higher is better). None: a neutral fact,
# neither better nor worse when it moves: the load a run ran under (concurrency) and the power it drew (what the
# power buys is tokens/s per W and J per token).
COMPARE_METRICS: tuple[tuple[str, str, bool | None], ...] = (
    ("output_throughput", "output throughput (tok/s)", True),
    ("total_throughput", "total throughput (tok/s)", True),
    ("peak_output_throughput", "peak output throughput (tok/s)", True),
    ("concurrency", "concurrency (mean)", None),
    ("max_concurrent_requests", "peak concurrent requests", None),
    ("mean_ttft_ms", "mean TTFT (ms)", False),
    ("p99_ttft_ms", "P99 TTFT (ms)", False),
    ("mean_tpot_ms", "mean TPOT (ms)", False),
    ("p99_tpot_ms", "P99 TPOT (ms)", False),
    ("mean_itl_ms", "mean ITL (ms)", False),
    ("mean_e2e_latency_ms", "mean E2E latency (ms)", False),
    ("telemetry.total_mean_power_w", "total mean power (W)", None),
    ("telemetry.tokens_per_s_per_w", "tokens/s per W", True),
    ("telemetry.j_per_output_token", "J per output token", False),
    ("telemetry.j_per_total_token", "J per total token", False),
    ("telemetry.output_tok_s_per_gpu", "output tok/s per GPU", True),
    ("telemetry.output_tok_s_per_user", "output tok/s per user", True),
)


def default_ledger_path() -> Path:
    return private_state_dir() / "ledger.sqlite"


#: Tries to draw a free run id before an insert gives up (a 16-bit tail per second; see record_run).
ID_ATTEMPTS = 8


def new_run_id(now: datetime | None = None) -> str:
    """`r-YYYYMMDD-HHMMSS-xxxx`: sorts by time, and the random tail keeps two runs in one second apart."""
    now = now or datetime.now()
    return f"r-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def run_started(run_id: str) -> datetime | None:
    """When a run began, from its id (`new_run_id`'s local time); None for an id of another shape."""
    try:
        return datetime.strptime(run_id[2:17], "%Y%m%d-%H%M%S") if run_id.startswith("r-") else None
    except ValueError:
        return None


class RunRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    host: str
    release_id: str | None = None
    preset: str | None = None
    started_at: datetime
    flags: dict[str, Any] = {}
    bench: BenchResult | None = None
    telemetry: TelemetrySummary | None = None
    diagnosis: tuple[Diagnosis, ...] = ()
    source: RunSource = "bench"
    label: str | None = None
    jsonl_path: str | None = None
    #: What the gates said of it (RunVerdict); None for a run no gate judges, and for every run of an older ledger.
    verdict: RunVerdict | None = None
    #: Who recorded it, `user@machine`: a team store's runs (state/pg.py); None on this machine's ledger.
    by: str | None = None


class HostEvent(BaseModel):
    """A host's health event as `deploy history` shows it."""

    model_config = ConfigDict(frozen=True)

    at: str
    kind: str
    detail: str


class CompareRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str
    a: float | None
    b: float | None
    delta_pct: float | None  # (b - a) / a * 100
    beyond_noise: bool
    better: bool | None  # None when equal within noise, not comparable, or a neutral fact (concurrency, power)


def _value(run: RunRecord, attr: str) -> float | None:
    obj: Any = run
    if attr.startswith("telemetry."):
        obj, attr = run.telemetry, attr.split(".", 1)[1]
    else:
        obj = run.bench
    v = getattr(obj, attr, None) if obj is not None else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


#: The ledger and its SQLite side files (WAL, shared memory, rollback journal) are owner-only: runs carry the
#: server's resolved configuration, and whatever redaction misses must not be readable by other local users.
LEDGER_FILE_MODE = 0o600
STATE_DIR_MODE = 0o700
SIDE_FILES = ("-wal", "-shm", "-journal")


def secure_ledger_file(path: Path) -> None:
    """Create the ledger 0600 (before SQLite opens it) and tighten an existing one and its side files.

    The directory is made 0700 when it is the tool's state dir (or was created here); an explicitly chosen
    directory that already exists keeps its mode, only the files in it are tightened.
    """
    parent = path.parent
    created = not parent.exists()
    parent.mkdir(parents=True, exist_ok=True, mode=STATE_DIR_MODE)
    if created or parent.resolve() == state_dir().resolve():
        os.chmod(parent, STATE_DIR_MODE)
    fd = open_no_follow(path, os.O_RDWR | os.O_CREAT, LEDGER_FILE_MODE, what="ledger")
    os.close(fd)
    for p in (path, *(path.with_name(path.name + s) for s in SIDE_FILES)):
        refuse_link(p, "ledger file")  # SQLite and chmod would follow it to a file outside the ledger's directory
        if p.exists() and (p.stat().st_mode & 0o777) != LEDGER_FILE_MODE:
            os.chmod(p, LEDGER_FILE_MODE)


class Ledger:
    """The run history at `path` (default: `state_dir()/ledger.sqlite`), created and migrated on first use.

    The team store's ledger (state/pg.py) runs the same queries against PostgreSQL: keep them in the SQL both read.
    """

    integrity_errors: tuple[type[Exception], ...] = (sqlite3.IntegrityError,)
    db_errors: tuple[type[Exception], ...] = (sqlite3.Error,)

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_ledger_path()
        secure_ledger_file(self.path)
        self._migrate()

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA busy_timeout = 10000")
            yield conn
        finally:
            conn.close()

    def _migrate(self) -> None:
        with self._connect() as conn:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
                if version > SCHEMA_VERSION:
                    raise ConfigError(
                        f"ledger {self.path} has schema version {version}, newer than this tool's "
                        f"{SCHEMA_VERSION}", fix="upgrade deploy, or point DEPLOY_STATE_DIR at another directory")
                for v in range(version, SCHEMA_VERSION):
                    for stmt in MIGRATIONS[v].split(";"):
                        if stmt.strip():
                            conn.execute(stmt)
                    conn.execute(f"PRAGMA user_version = {v + 1}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def link_tune_run(self, tune_id: str, run_id: str, *, point: str, concurrency: int, purpose: str) -> None:
        """File a bench run (already recorded in `runs`) under a tune: which point, concurrency and why."""
        with self._connect() as conn:  # an upsert both SQLite and PostgreSQL read (state/pg.py)
            conn.execute("INSERT INTO tune_runs VALUES (?, ?, ?, ?, ?) ON CONFLICT (tune_id, run_id) DO UPDATE SET "
                         "point = excluded.point, concurrency = excluded.concurrency, purpose = excluded.purpose",
                         (tune_id, run_id, point, int(concurrency), purpose))

    def tune_runs(self, tune_id: str) -> list[tuple[str, str, int, str]]:
        """(run id, point, concurrency, purpose) of every run filed under the tune, oldest first."""
        with self._connect() as conn:
            rows = conn.execute("SELECT run_id, point, concurrency, purpose FROM tune_runs WHERE tune_id = ? "
                                "ORDER BY run_id", (tune_id,)).fetchall()
        return [(r[0], r[1], int(r[2]), r[3]) for r in rows]

    def schema_version(self) -> int:
        with self._connect() as conn:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])

    def record_run(
        self,
        *,
        host: str,
        bench: BenchResult | None,
        source: RunSource = "bench",
        release_id: str | None = None,
        preset: str | None = None,
        started_at: datetime | None = None,
        flags: dict[str, Any] | None = None,
        telemetry: TelemetrySummary | None = None,
        diagnosis: Sequence[Diagnosis] = (),
        label: str | None = None,
        jsonl_path: str | None = None,
        run_id: str | None = None,
        verdict: RunVerdict | None = None,
    ) -> RunRecord:
        """Insert one run and return it as stored (secrets redacted: sglang's server_info carries its API key)."""
        started = started_at or datetime.now()
        for attempt in range(ID_ATTEMPTS):
            raw = RunRecord(id=run_id or new_run_id(started), host=host, release_id=release_id, preset=preset,
                            started_at=started, flags=dict(flags or {}), bench=bench, telemetry=telemetry,
                            diagnosis=tuple(diagnosis), source=source, label=label, jsonl_path=jsonl_path,
                            verdict=verdict)
            rec = RunRecord.model_validate(redact(raw.model_dump(mode="json")))
            try:
                self._insert(rec)
                return rec
            except self.integrity_errors:
                # Two runs of one second drew the same 16-bit tail (a fleet bench records many at once): draw
                # again. A caller's own id is never replaced.
                if run_id is not None or attempt == ID_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _insert(self, rec: RunRecord) -> None:
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO runs (id, host, release_id, preset, started_at, flags_json, bench_json, telemetry_json, "
                "diagnosis_json, source, label, jsonl_path, verdict) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (rec.id, rec.host, rec.release_id, rec.preset, rec.started_at.isoformat(),
                 json.dumps(rec.flags, sort_keys=True, default=str),
                 rec.bench.model_dump_json() if rec.bench else None,
                 rec.telemetry.model_dump_json() if rec.telemetry else None,
                 json.dumps([d.model_dump(mode="json") for d in rec.diagnosis]),
                 rec.source, rec.label, rec.jsonl_path, rec.verdict))

    @staticmethod
    def _row_to_record(row: sqlite3.Row) -> RunRecord:
        """A stored run; rows written before redaction existed are redacted as they are read."""
        rec = Ledger._decode_row(row)
        return RunRecord.model_validate(redact(rec.model_dump(mode="json")))

    @staticmethod
    def _decode_row(row: sqlite3.Row) -> RunRecord:
        return RunRecord(
            id=row["id"], host=row["host"], release_id=row["release_id"], preset=row["preset"],
            started_at=datetime.fromisoformat(row["started_at"]),
            flags=json.loads(row["flags_json"] or "{}"),
            bench=BenchResult.model_validate_json(row["bench_json"]) if row["bench_json"] else None,
            telemetry=(TelemetrySummary.model_validate_json(row["telemetry_json"])
                       if row["telemetry_json"] else None),
            diagnosis=tuple(Diagnosis.model_validate(d) for d in json.loads(row["diagnosis_json"] or "[]")),
            source=row["source"], label=row["label"], jsonl_path=row["jsonl_path"],
            verdict=row["verdict"] if "verdict" in row.keys() else None,  # noqa: SIM118 (as below)
            by=f"{row['by_user']}@{row['by_machine']}" if "by_user" in row.keys() and row["by_user"] else None)  # noqa: SIM118 (sqlite3.Row's `in` reads values)

    def get_run(self, run_id: str, hosts: Sequence[str] | None = None) -> RunRecord:
        """A run by id, or by a unique id prefix (`r-20261130-0203`).

        A full id is found whoever ran it; a prefix is matched among the runs of `hosts` only, when given (the
        inventory's hosts), so that another inventory's runs on this machine cannot make it ambiguous.
        """
        scope, scope_args = self._hosts_clause(hosts)
        with self._connect() as conn:
            row = conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                esc = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
                sql = "SELECT * FROM runs WHERE id LIKE ? ESCAPE '\\'" + (f" AND {scope}" if scope else "")
                rows = conn.execute(sql + " LIMIT 3", (esc + "%", *scope_args)).fetchall()
                if len(rows) > 1:
                    raise ConfigError(f"run id prefix {run_id!r} matches several runs "
                                      f"({', '.join(r['id'] for r in rows)}...)", fix="give more of the id")
                row = rows[0] if rows else None
        if row is None:
            where = f" among the runs of {', '.join(hosts) or 'no host'}" if hosts is not None else ""
            raise ConfigError(f"no run {run_id!r} in the ledger {self.path}{where}",
                              fix="list run ids with `deploy history --bench` (add --all-inventories for the runs "
                                  "of hosts outside this inventory)")
        return self._row_to_record(row)

    @staticmethod
    def _hosts_clause(hosts: Sequence[str] | None) -> tuple[str, list[str]]:
        """SQL condition (and its arguments) for `host IN hosts`; no condition when hosts is None."""
        if hosts is None:
            return "", []
        if not hosts:
            return "1 = 0", []
        return f"host IN ({', '.join('?' * len(hosts))})", list(hosts)

    def list_runs(self, host: str | None = None, limit: int = 20, source: RunSource | None = None,
                  preset: str | None = None, hosts: Sequence[str] | None = None) -> list[RunRecord]:
        """Newest first; `hosts` keeps the runs of those hosts only (None: every host)."""
        where, args = [], []
        for col, val in (("host", host), ("source", source), ("preset", preset)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        scope, scope_args = self._hosts_clause(hosts)
        if scope:
            where.append(scope)
            args += scope_args
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY started_at DESC, id DESC LIMIT ?"
        with self._connect() as conn:
            rows = conn.execute(sql, (*args, max(0, limit))).fetchall()
        return [self._row_to_record(r) for r in rows]

    def record_event(self, host: str, kind: str, detail: str, at: datetime | None = None) -> None:
        """One of a host's health events (`deploy watch`); the detail is redacted like every stored text."""
        stamp = (at or datetime.now().astimezone()).isoformat(timespec="seconds")
        try:
            with self._connect() as conn:
                conn.execute("INSERT INTO host_events VALUES (?, ?, ?, ?)", (host, stamp, kind, redact(detail)))
        except self.db_errors as exc:
            raise ConfigError(f"ledger {self.path}: the {kind} event of {host} was not recorded: {exc}",
                              fix="check the disk and the file's permissions (DEPLOY_STATE_DIR)", host=host) from exc

    def events(self, host: str, limit: int = 50) -> list[HostEvent]:
        """A host's events, oldest first (the last `limit`)."""
        with self._connect() as conn:
            rows = conn.execute("SELECT at, kind, detail FROM host_events WHERE host = ? ORDER BY at DESC, rowid DESC "
                                "LIMIT ?", (host, max(0, limit))).fetchall()
        return [HostEvent(at=r["at"], kind=r["kind"], detail=r["detail"]) for r in reversed(rows)]

    def runs_per_host(self) -> dict[str, int]:
        """How many runs each host has in the ledger (to say what a scoped listing leaves out)."""
        with self._connect() as conn:
            rows = conn.execute("SELECT host, COUNT(*) AS n FROM runs GROUP BY host ORDER BY host").fetchall()
        return {r["host"]: int(r["n"]) for r in rows}

    def compare(self, run_a: str | RunRecord, run_b: str | RunRecord,
                noise_pct: float = DEFAULT_NOISE_PCT) -> list[CompareRow]:
        """Metric by metric, b against a: delta % and whether it is beyond the noise band."""
        a = run_a if isinstance(run_a, RunRecord) else self.get_run(run_a)
        b = run_b if isinstance(run_b, RunRecord) else self.get_run(run_b)
        rows: list[CompareRow] = []
        for attr, label, higher in COMPARE_METRICS:
            va, vb = _value(a, attr), _value(b, attr)
            if va is None and vb is None:
                continue
            d = delta_pct(va, vb)
            beyond = d is not None and abs(d) > noise_pct
            better = None if not beyond or d is None or higher is None else (d > 0) == higher
            rows.append(CompareRow(metric=label, a=va, b=vb, delta_pct=d, beyond_noise=beyond, better=better))
        return rows

    def import_jsonl(self, path: Path | str, *, host: str, label: str | None = None, preset: str | None = None,
                     num_prompts: int | None = None) -> list[RunRecord]:
        """Record every run of a bench_serving file produced elsewhere as `import` runs: its `--output-file`
        JSONL (one record per line) or its printed result block(s) (see parsers.bench.parse_bench_import).

        The file's modification time stands in for the start time (neither format has one); runs get increasing
        seconds so their order survives.
        """
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
            records = parse_bench_import(text, num_prompts=num_prompts)
        except OSError as exc:
            raise ConfigError(f"cannot read {p}: {exc.strerror}", fix="check the path") from None
        except BenchValueError as exc:
            raise ConfigError(f"{p} holds a figure no bench run measures: {exc}",
                              fix="import the file bench_serving wrote, unedited; nothing was recorded") from None
        except (UnicodeDecodeError, BenchParseError) as exc:
            why = f"not UTF-8 text (byte {exc.start})" if isinstance(exc, UnicodeDecodeError) else str(exc)
            raise ConfigError(f"{p} is not a bench_serving result: {why}",
                              fix="pass the --output-file JSONL of a finished bench_serving run, or a file holding "
                                  "its printed '============ Serving Benchmark Result ============' block") from None
        base = datetime.fromtimestamp(p.stat().st_mtime)
        out: list[RunRecord] = []
        for i, bench in enumerate(records):
            started = datetime.fromtimestamp(base.timestamp() - (len(records) - 1 - i))
            out.append(self.record_run(host=host, bench=bench, source="import", preset=preset,
                                       started_at=started, label=label or (bench.tag or None),
                                       jsonl_path=str(p.resolve())))
        return out
