"""A fleet roll's plan and progress: the waves (pure), and the record kept on the operator machine (typed state).

Why a record on this machine: a fleet roll outlives any one host's lock. If the `deploy` process dies mid-wave,
`deploy roll … --resume` needs the same flag request, the same waves and which hosts are already done, and
`deploy rollback group G` needs every host's release from before the roll. Each host's own releases live on the
host; this file only says which host the fleet roll took where. One JSON file per fleet roll under
`state_dir()/fleet-rolls/`, rewritten atomically after every host's step.

The record holds no secret: a `--set admin-api-key=…` is written `<redacted>` there, as everywhere the tool writes.
`--resume` still needs the value, so while a roll with a secret in it is unfinished its full copy waits beside the
record (`<id>.replay.json`, 0600) and is deleted once the roll ends.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from orchestrator.errors import ConfigError
from orchestrator.local.files import private_state_dir, read_private_file, write_file
from orchestrator.redact import REDACTED, redact
from orchestrator.store.store import Records, team_records

HostState = Literal["pending", "in_progress", "rolled", "rolled_back", "failed", "untouched", "reverted"]
RollState = Literal["running", "done", "failed", "reverted"]
#: How each host state reads in the report.
STATE_WORDS: dict[str, str] = {"pending": "pending", "in_progress": "in progress", "rolled": "rolled",
                               "rolled_back": "rolled back", "failed": "failed", "untouched": "untouched",
                               "reverted": "reverted"}


# ------------------------------------------------------------------------------------------------ the plan
def batch_size(batch: str, hosts: int) -> int:
    """`--batch`: a count (`2`) or a percentage of the whole fleet (`25%`, rounded up, at least 1)."""
    text = batch.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)%", text)
    if m:
        pct = float(m.group(1))
        if not 0 < pct <= 100:
            raise ConfigError(f"--batch {batch}: a percentage must be above 0 and at most 100",
                              fix="e.g. --batch 25% or --batch 2")
        return max(1, math.ceil(hosts * pct / 100))
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"--batch {batch}: give a host count (at least 1) or a percentage",
                          fix="e.g. --batch 25% or --batch 2")
    return int(text)


def plan_waves(hosts: Sequence[str], *, canary: int, batch: str) -> list[list[str]]:
    """Wave 0 holds the canaries (the first `canary` hosts in target order); the rest go in waves of `batch`."""
    if canary < 0 or canary > len(hosts):
        raise ConfigError(f"--canary {canary}: the targets have {len(hosts)} host(s)",
                          fix=f"give --canary between 0 and {len(hosts)}")
    size = batch_size(batch, len(hosts))
    waves = [list(hosts[:canary])] if canary else []
    rest = list(hosts[canary:])
    waves += [rest[i:i + size] for i in range(0, len(rest), size)]
    return waves


# ------------------------------------------------------------------------------------------------ the record
class RollSpec(BaseModel):
    """What `deploy roll` was asked to do: replayed as-is by --resume."""

    set: list[str] = Field(default_factory=list)
    unset: list[str] = Field(default_factory=list)
    replacement: dict[str, Any] | None = None
    accept_regression: bool = False
    threshold_pct: float | None = None
    gate_metrics: list[str] = Field(default_factory=list)
    preset: str | None = None
    skip_bench: bool = False
    canary: int = 1
    batch: str = "25%"
    max_unavailable: int = 1
    rollback_all: bool = False
    #: `--profile P`: P's flags and stack; the stack is built on every host first (orchestrator/fleet/stage.py).
    stack_profile: str | None = None
    stage_only: bool = False  # `--stage-only`: build the stack on every host and stop there


class HostRoll(BaseModel):
    host: str
    wave: int
    state: HostState = "pending"
    previous_release: str | None = None  # the release before this fleet roll (read by the plan)
    previous_flags_sha: str | None = None
    release: str | None = None  # the release the host is on now, as far as this roll knows
    flags_sha: str | None = None
    router: str = ""  # what the drain did: "no router", "drained, back in the router", "left out of the router"
    detail: str = ""
    exit_code: int = 0


class FleetRoll(BaseModel):
    id: str
    command: str
    targets: str
    inventory: str
    pid: int
    started: str
    updated: str
    state: RollState = "running"
    spec: RollSpec
    waves: list[list[str]]
    hosts: list[HostRoll]
    router: str | None = None  # the router's URL when hosts are drained through it
    notes: list[str] = Field(default_factory=list)

    def host(self, name: str) -> HostRoll:
        return next(h for h in self.hosts if h.host == name)

    @property
    def host_names(self) -> list[str]:
        return [h.host for h in self.hosts]

    def to_revert(self) -> list[str]:
        """Hosts this roll left off their previous release: rolled, in progress when it died, or failed after the
        new release was installed (e.g. not back in the router)."""
        return [h.host for h in self.hosts if h.previous_release and (
            h.state in ("rolled", "in_progress") or (h.state == "failed" and h.release != h.previous_release))]

    @property
    def exit_code(self) -> int:
        return max((h.exit_code for h in self.hosts), default=0)


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_roll_id() -> str:
    return datetime.now(UTC).strftime("fleetroll-%Y%m%dT%H%M%S") + f"-{os.getpid()}"


class RollStore:
    """The fleet-roll records on this machine (0700 directory, one JSON file per roll, atomic rewrites), or in the
    team store (state/store.py: any machine resumes or reverts the roll). The replay copy of a roll with a secret
    stays on the machine that started it, in either case: a secret is kept in a 0600 file only."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or private_state_dir() / "fleet-rolls"
        self.team = None if root is not None else team_records()

    @property
    def location(self) -> str:
        """Where the records are, as a refusal says it."""
        return f"in the team store {self.team.where('fleet-rolls', '')}" if self.team is not None else \
            f"on this machine ({self.root})"

    def where(self, roll_id: str) -> str:
        return self.team.where("fleet-rolls", roll_id) if self.team is not None else str(self.path(roll_id))

    def path(self, roll_id: str) -> Path:
        return self.root / f"{roll_id}.json"

    def replay_path(self, roll_id: str) -> Path:
        """The full copy of an unfinished roll that carries a secret (its record has it redacted)."""
        return self.root / f"{roll_id}.replay.json"

    def save(self, roll: FleetRoll) -> None:
        roll.updated = now_text()
        full = roll.model_dump(mode="json")
        public = redact(full)
        replay = self.replay_path(roll.id)
        if self.team is None or (public != full and roll.state == "running"):
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        if public != full and roll.state == "running":
            write_file(replay, json.dumps(full, indent=1), mode=0o600)
        if self.team is not None:
            self.team.put("fleet-rolls", roll.id, json.dumps(public, indent=1))
        else:
            write_file(self.path(roll.id), json.dumps(public, indent=1), mode=0o600)
        if (public == full or roll.state != "running") and replay.exists():
            replay.unlink()

    def all(self) -> list[FleetRoll]:
        """Every record, oldest first (ids sort by start time)."""
        if self.team is not None:
            return self._team_all(self.team)
        if not self.root.is_dir():
            return []
        rolls = []
        for p in sorted(self.root.glob("fleetroll-*.json")):
            if p.name.endswith(".replay.json"):
                continue
            try:
                rolls.append(FleetRoll.model_validate_json(read_private_file(p, "fleet roll record") or ""))
            except ValueError as exc:
                raise ConfigError(f"fleet roll record {p} is unreadable: {exc}",
                                  fix="move the file away (it only records a past fleet roll)") from exc
        return sorted(rolls, key=lambda r: r.started + r.id)

    @staticmethod
    def _team_all(team: Records) -> list[FleetRoll]:
        rolls = []
        for key, doc in team.items("fleet-rolls"):
            try:
                rolls.append(FleetRoll.model_validate_json(doc))
            except ValueError as exc:
                raise ConfigError(f"fleet roll record {team.where('fleet-rolls', key)} is unreadable: {exc}",
                                  fix="delete that row of the store's records (it only records a past fleet "
                                      "roll)") from exc
        return sorted(rolls, key=lambda r: r.started + r.id)

    def unfinished(self, hosts: Sequence[str]) -> FleetRoll | None:
        """The newest unfinished roll that shares a host with `hosts`."""
        wanted = set(hosts)
        for roll in reversed(self.all()):
            if roll.state == "running" and wanted & set(roll.host_names):
                return self._with_secrets(roll)
        return None

    def _with_secrets(self, roll: FleetRoll) -> FleetRoll:
        """The roll as it was asked for, secrets included, when its record has them redacted."""
        replay = self.replay_path(roll.id)
        text = read_private_file(replay, "fleet roll replay copy")
        if text is None:
            if REDACTED in roll.model_dump_json():
                raise ConfigError(f"fleet roll {roll.id} carries a secret that only the machine that started it "
                                  f"keeps ({roll.command})",
                                  fix=f"resume it on that machine, or revert it with `deploy rollback {roll.targets}`"
                                      " and roll again") from None
            return roll
        try:
            return FleetRoll.model_validate_json(text)
        except ValueError as exc:
            raise ConfigError(f"fleet roll replay copy {replay} is unreadable: {exc}",
                              fix=f"revert the roll with `deploy rollback {roll.targets}` and roll again") from exc

    def last(self, hosts: Sequence[str]) -> FleetRoll | None:
        """The newest roll over exactly these hosts (any order), else the newest sharing one of them."""
        rolls = list(reversed(self.all()))
        wanted = set(hosts)
        exact = next((r for r in rolls if set(r.host_names) == wanted), None)
        return exact or next((r for r in rolls if wanted & set(r.host_names)), None)


def process_alive(pid: int) -> bool:
    """True while a process with this pid runs on this machine (the record's owner may still be rolling)."""
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return True
    return "orchestrator" in cmdline or "deploy" in cmdline
