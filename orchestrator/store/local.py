"""This machine's state store, the default: records as 0600 JSON files and claims as `flock`s under the state dir,
the ledger in SQLite (nothing to set up)."""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from orchestrator.errors import ConfigError
from orchestrator.local.files import write_file
from orchestrator.local.paths import state_dir

if TYPE_CHECKING:
    from orchestrator.ledger.sqlite import Ledger

from orchestrator.store.base import ClaimRow, Holder, RecordKind, StoreStatus


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
