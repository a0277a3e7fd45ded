"""Unit runtime state and journal files of one container (ct/<vmid>/run, ct/<vmid>/journal).

systemctl (short-lived, runs in the SSH channel) and the supervisor (detached, owns the service process)
only share these files, so every command sees the same state however many SSH sessions come and go.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.gpu.simctx import SimContext, context_from_env
from simulator.procs import alive


def unit_name(arg: str) -> str:
    return arg if "." in arg else f"{arg}.service"


@dataclass(frozen=True)
class CtUnits:
    """Paths of one container's units."""

    ct_dir: Path

    @classmethod
    def from_env(cls) -> CtUnits:
        ctx: SimContext = context_from_env()
        return cls(ctx.ct_dir)

    @property
    def fs(self) -> Path:
        return self.ct_dir / "fs"

    def unit_file(self, unit: str) -> Path:
        return self.fs / "etc/systemd/system" / unit

    def wants_link(self, unit: str) -> Path:
        return self.fs / "etc/systemd/system/multi-user.target.wants" / unit

    def state_file(self, unit: str) -> Path:
        return self.ct_dir / "run" / f"{unit}.state.json"

    def pid_file(self, unit: str) -> Path:
        return self.ct_dir / "run" / f"{unit}.pid"

    def loaded_file(self, unit: str) -> Path:
        return self.ct_dir / "run" / f"{unit}.loaded.json"

    def journal(self, unit: str) -> Path:
        return self.ct_dir / "journal" / f"{unit.removesuffix('.service')}.log"

    def read_state(self, unit: str) -> dict[str, Any]:
        try:
            data = json.loads(self.state_file(unit).read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def write_state(self, unit: str, **changes: Any) -> dict[str, Any]:
        state = self.read_state(unit)
        state.update(changes)
        path = self.state_file(unit)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
        os.replace(tmp, path)
        pid = state.get("MainPID") or 0
        if pid:
            self.pid_file(unit).write_text(f"{pid}\n")
        else:
            self.pid_file(unit).unlink(missing_ok=True)
        return state


def journal_prefix(ident: str, pid: int, now: float | None = None) -> str:
    stamp = time.strftime("%b %d %H:%M:%S", time.localtime(time.time() if now is None else now))
    return f"{stamp} {socket.gethostname()} {ident}[{pid}]: "


def journal_append(path: Path, ident: str, pid: int, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = journal_prefix(ident, pid)
    with open(path, "a") as fh:
        for line in lines:
            fh.write(prefix + line.rstrip("\n") + "\n")


def systemd_log(units: CtUnits, unit: str, message: str) -> None:
    journal_append(units.journal(unit), "systemd", 1, [message])


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie (one implementation for the whole simulator)."""
    return pid > 0 and alive(pid)
