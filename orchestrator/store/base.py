"""The state store's contract (issue 51): what a store keeps and answers (records, claims, their holders, its
status), who runs this process (user, machine, run id), and how a team store is named. Both backends build on it:
this machine's (store/local.py) and PostgreSQL's (store/pg.py); store/store.py picks one."""

from __future__ import annotations

import getpass
import os
import secrets
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

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


# ------------------------------------------------------------------------------------------ which store
@dataclass(frozen=True)
class StoreSettings:
    """A team store as named once: its URL (libpq's, TLS settings in its query: sslmode, sslrootcert, …) and
    where its password comes from (a 0600 file; else libpq's own PGPASSWORD / PGPASSFILE)."""

    url: str
    password_file: Path | None = None
    origin: str = URL_ENV
