"""The watchdog as the target stores it, pure: its state file (JSON) and the `watchdog` fact's file lines.

The state file is written by orchestrator/watchdog/probe.py in the container; `deploy status` and
`deploy history` read it back as a typed WatchdogStatus.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any


def _iso(ts: float | None) -> str | None:
    return None if ts is None else dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class WatchdogAction:
    """One thing the watchdog did: "restart" (sglang restarted) or "gave-up" (the restart budget was spent)."""

    at: float
    action: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"at": _iso(self.at), "action": self.action, "reason": self.reason}


@dataclass(frozen=True)
class WatchdogStatus:
    """The state file: `state` is ok, waiting, suspect, restarted or exhausted ("absent": never installed)."""

    state: str
    reason: str = ""
    last_check: float | None = None
    restarts_in_window: int = 0
    budget: int = 0
    window_s: float = 0.0
    actions: tuple[WatchdogAction, ...] = field(default_factory=tuple)
    #: systemd's Result of the last check (sglang-watchdog.service): "success", "exit-code", …; "" when not read.
    last_run: str = ""

    @property
    def exhausted(self) -> bool:
        return self.state == "exhausted"

    @property
    def failing(self) -> str:
        """Why the watchdog's checks fail ("" when they do not): its last check ended in error, or its state file
        is not its JSON (a check that ran would have rewritten it). Either way nothing restarts a stuck server."""
        if self.last_run and self.last_run != "success":
            return f"its last check failed (sglang-watchdog.service Result={self.last_run})"
        if self.state == "unreadable":
            return "its state file is not the watchdog's JSON, so its checks are not running"
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "reason": self.reason, "last_check": _iso(self.last_check),
                "restarts_in_window": self.restarts_in_window, "restart_budget": self.budget,
                "budget_window_s": self.window_s, "actions": [a.to_dict() for a in self.actions],
                "last_run": self.last_run or None, "failing": self.failing or None}


def parse_watchdog_state(text: str | None) -> WatchdogStatus:
    """The state file's text; "absent" when there is none, "unreadable" when it is not the watchdog's JSON."""
    if text is None or not text.strip():
        return WatchdogStatus("absent")
    try:
        data = json.loads(text)
        actions = tuple(WatchdogAction(float(a["at"]), str(a["action"]), str(a["reason"]))
                        for a in data.get("actions") or ())
        return WatchdogStatus(state=str(data["state"]), reason=str(data.get("reason", "")),
                              last_check=None if data.get("last_check") is None else float(data["last_check"]),
                              restarts_in_window=len(data.get("restarts") or ()), budget=int(data.get("budget", 0)),
                              window_s=float(data.get("window_s", 0)), actions=actions)
    except (ValueError, KeyError, TypeError, AttributeError):
        return WatchdogStatus("unreadable", reason=text.strip()[:200])


#: Between the state file and the check's systemd Result in the `watchdog_state` fact's output.
RESULT_MARK = "__DEPLOY_WATCHDOG_RESULT__"


def parse_watchdog_fact(text: str | None) -> WatchdogStatus:
    """The `watchdog_state` fact: the state file, then RESULT_MARK and the last check's systemd Result."""
    state, sep, result = (text or "").partition(f"\n{RESULT_MARK}\n")
    status = parse_watchdog_state(state)
    last = result.strip().splitlines()[0].strip() if sep and result.strip() else ""
    if status.state == "absent" and last == "success":  # never installed: systemd says "success" of any unit
        last = ""
    return dataclasses.replace(status, last_run=last)


@dataclass(frozen=True)
class InstalledWatchdog:
    """The `watchdog` fact: each file's mode and body hash (None: missing), the timer's state and the last check's
    systemd Result ("" when not read)."""

    files: dict[str, tuple[str, str]]
    timer_active: str = "unknown"
    timer_enabled: str = "unknown"
    last_run: str = ""

    def matches(self, path: str, mode: int, sha256: str) -> bool:
        return self.files.get(path) == (f"{mode:o}", sha256)

    @property
    def present(self) -> bool:
        return bool(self.files) or self.timer_enabled == "enabled"


EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # sha256 of no bytes: a missing file


def parse_installed(text: str) -> InstalledWatchdog:
    files: dict[str, tuple[str, str]] = {}
    active = enabled = "unknown"
    last = ""
    for line in text.splitlines():
        parts = line.split()
        if parts[:1] == ["timer"]:
            active = parts[1] if len(parts) > 1 else "unknown"
            enabled = parts[2] if len(parts) > 2 else "disabled"
        elif parts[:1] == ["last"]:
            last = parts[1] if len(parts) > 1 else ""
        elif len(parts) == 3 and parts[2] != EMPTY_SHA:
            files[parts[0]] = (parts[1], parts[2])
    return InstalledWatchdog(files, active, enabled, last)
