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

import fcntl
import getpass
import os
import secrets
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from orchestrator.errors import ConfigError
from orchestrator.local.files import write_file
from orchestrator.local.paths import state_dir

if TYPE_CHECKING:
    from orchestrator.ledger.sqlite import Ledger

URL_ENV = "DEPLOY_STATE_URL"
PASSWORD_FILE_ENV = "DEPLOY_STATE_PASSWORD_FILE"
#: The kinds of record a store keeps, each named as its folder under the local state dir.
RecordKind = Literal["fleet-rolls", "tunes", "watch"]
RECORD_KINDS: tuple[RecordKind, ...] = ("fleet-rolls", "tunes", "watch")


@dataclass(frozen=True)
class Holder:
    """Who holds a claim: what a refused command prints (user, machine, pid, command, run id, since)."""

    user: str
    machine: str
    pid: int
    command: str
    run_id: str
    since: str

    def text(self) -> str:
        return (f"{self.user}@{self.machine} pid {self.pid} running '{self.command}' (run {self.run_id}) "
                f"since {self.since}")


@dataclass(frozen=True)
class ClaimRow:
    """One claim held now, as `deploy state status` lists it."""

    name: str
    exclusive: bool
    holder: Holder | None  # None: a shared holder of this machine (they write no name)


@dataclass(frozen=True)
class StoreStatus:
    kind: Literal["local", "postgresql"]
    where: str
    schema_version: int
    tool_schema_version: int
    claims: tuple[ClaimRow, ...] = ()


class Records(Protocol):
    """Whole-document records by kind and key (JSON text): roll records, tune records, the watch's cordons."""

    def put(self, kind: RecordKind, key: str, text: str) -> None: ...
    def get(self, kind: RecordKind, key: str) -> str | None: ...
    def items(self, kind: RecordKind) -> list[tuple[str, str]]: ...
    def where(self, kind: RecordKind, key: str) -> str: ...


class Claims(Protocol):
    """The claims' backend (locks/claims.py keeps the re-entrance; this takes and frees the real lock)."""

    scope: str  # "on this machine" or "in the team store …": how a refusal says where the holder is

    def take(self, name: str, holder: Holder, exclusive: bool) -> Holder | str | None: ...
    def release(self, name: str) -> None: ...
    def lost(self) -> str | None: ...


class StateStore(Protocol):
    @property
    def kind(self) -> Literal["local", "postgresql"]: ...
    @property
    def where(self) -> str: ...
    @property
    def records(self) -> Records: ...
    @property
    def claims(self) -> Claims: ...

    def ledger(self) -> Ledger: ...
    def status(self) -> StoreStatus: ...
    def stale(self) -> bool:
        """True when a new connection should replace this one (lost, and no claim of this process rode on it:
        a long-lived `deploy watch` reconnects at its next cycle; a run whose claims were lost stops instead)."""
        ...


# ------------------------------------------------------------------------------------------ who runs this
_RUN_ID = ""


def run_id() -> str:
    """This process's run id, named by its claims and its ledger rows' attribution."""
    global _RUN_ID
    if not _RUN_ID:
        _RUN_ID = f"run-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{os.getpid()}-{secrets.token_hex(2)}"
    return _RUN_ID


def user() -> str:
    return getpass.getuser()


def machine() -> str:
    return socket.gethostname()


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------------------ this machine
@dataclass
class LocalRecords:
    """One 0600 JSON file per record under `root/<kind>/` (root: the state dir), written atomically."""

    root: Path | None = None

    def folder(self, kind: RecordKind) -> Path:
        return (self.root or state_dir()) / kind

    def _path(self, kind: RecordKind, key: str) -> Path:
        if not key or "/" in key or os.sep in key or key.startswith("."):
            raise ConfigError(f"{key!r} is not a record name", fix="give the id the tool printed")
        return self.folder(kind) / f"{key}.json"

    def put(self, kind: RecordKind, key: str, text: str) -> None:
        path = self._path(kind, key)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_file(path, text, mode=0o600)

    def get(self, kind: RecordKind, key: str) -> str | None:
        try:
            return self._path(kind, key).read_text()
        except FileNotFoundError:
            return None

    def items(self, kind: RecordKind) -> list[tuple[str, str]]:
        folder = self.folder(kind)
        if not folder.is_dir():
            return []
        out = []
        for p in sorted(folder.glob("*.json")):
            if p.name.endswith(".replay.json"):
                continue  # a fleet roll's secret copy, never a record (fleet/rollout.py)
            try:
                out.append((p.name[:-len(".json")], p.read_text()))
            except FileNotFoundError:
                continue
        return out

    def where(self, kind: RecordKind, key: str) -> str:
        return str(self._path(kind, key))


@dataclass
class LocalClaims:
    """`flock`s on `state_dir()/claims/NAME.claim` (released by the kernel when the process dies)."""

    scope: str = "on this machine"
    _fds: dict[str, tuple[int, bool]] = field(default_factory=dict)

    @staticmethod
    def folder() -> Path:
        return state_dir() / "claims"

    def path(self, name: str) -> Path:
        from orchestrator.local.files import file_name

        return self.folder() / f"{file_name(name)}.claim"

    def take(self, name: str, holder: Holder, exclusive: bool) -> Holder | str | None:
        from orchestrator.local.files import open_no_follow

        self.folder().mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = open_no_follow(self.path(name), os.O_RDWR | os.O_CREAT, 0o600, what="claim file")
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                lines = os.pread(fd, 4096, 0).decode(errors="replace").strip().splitlines()
                # Only an exclusive (fleet) holder writes its name: shared holders come and go together.
                return lines[0].strip() if lines else "a single-host roll or rollback"
            finally:
                os.close(fd)
        if exclusive:
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder.text().encode() + b"\n", 0)
        self._fds[name] = (fd, exclusive)
        return None

    def release(self, name: str) -> None:
        fd, exclusive = self._fds.pop(name)
        if exclusive:
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the only descriptor releases the flock

    def lost(self) -> str | None:
        return None  # a flock cannot be taken away from a living process

    def held_now(self) -> tuple[ClaimRow, ...]:
        """Claims some process of this machine holds now (a claim file whose lock cannot be taken)."""
        rows = []
        folder = self.folder()
        for p in sorted(folder.glob("*.claim")) if folder.is_dir() else []:
            try:
                fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                continue  # free
            except BlockingIOError:
                first = os.pread(fd, 4096, 0).decode(errors="replace").strip().splitlines()
            finally:
                os.close(fd)
            name = p.name[:-len(".claim")]
            rows.append(ClaimRow(name, True, Holder("", "", 0, first[0], "", "")) if first else
                        ClaimRow(name, False, None))
        return tuple(rows)


@dataclass
class LocalStore:
    """Today's state: files and SQLite under the state dir (nothing to set up)."""

    kind: Literal["local", "postgresql"] = "local"
    records: LocalRecords = field(default_factory=LocalRecords)
    claims: LocalClaims = field(default_factory=LocalClaims)

    @property
    def where(self) -> str:
        return f"this machine's state dir {state_dir()}"

    def ledger(self) -> Ledger:
        from orchestrator.ledger.sqlite import Ledger

        return Ledger()

    def stale(self) -> bool:
        return False

    def status(self) -> StoreStatus:
        from orchestrator.ledger.sqlite import SCHEMA_VERSION, default_ledger_path

        version = self.ledger().schema_version() if default_ledger_path().exists() else 0
        return StoreStatus("local", self.where, version, SCHEMA_VERSION, self.claims.held_now())


# ------------------------------------------------------------------------------------------ which store
@dataclass(frozen=True)
class StoreSettings:
    """A team store as named once: its URL (libpq's, TLS settings in its query: sslmode, sslrootcert, …) and
    where its password comes from (a 0600 file; else libpq's own PGPASSWORD / PGPASSFILE)."""

    url: str
    password_file: Path | None = None
    origin: str = URL_ENV


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
