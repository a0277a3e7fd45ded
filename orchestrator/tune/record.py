"""A tune's record on this machine: what it asked, what each point measured, where it stands (`--resume`).

Why a file: a tune runs for many minutes and may be killed. Every bench run is saved here as soon as it ends
(and filed in the ledger under the tune), so `deploy tune --resume ID` goes on from the last finished run and
replays the runs a killed point already made. 0600 under the state dir; it holds no secret (flags as the user
typed them on --over, release ids, figures).
"""

from __future__ import annotations

import os
import secrets
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from orchestrator.errors import ConfigError
from orchestrator.local.files import private_state_dir, read_private_file, write_file
from orchestrator.store.store import team_records
from orchestrator.tune.search import Measurement

PointStatus = Literal["pending", "done", "lost", "skipped"]
CURRENT = "current"


class RunEntry(BaseModel):
    run_id: str
    concurrency: int
    purpose: Literal["search", "confirm", "power"]
    figures: dict[str, float | None]
    output_tok_s: float
    tok_s_per_w: float | None = None
    j_per_token: float | None = None
    power_pct_of_limit: float | None = None
    failed: str = ""  # a failed bench (orchestrator/bench/failures.py): the run never meets the SLO

    def measurement(self) -> Measurement:
        return Measurement(self.concurrency, dict(self.figures), self.output_tok_s, self.run_id, self.failed)


class PointRecord(BaseModel):
    label: str
    sets: list[str]
    status: PointStatus = "pending"
    reason: str = ""  # why it lost: "SLO: …", "gate: …", "crash: …", "budget"
    release: str | None = None
    runs: list[RunEntry] = Field(default_factory=list)
    limit: int | None = None
    at_top: bool = False
    goodput: dict[str, float | int] | None = None  # Estimate.to_dict() of output tok/s at the limit
    search_runs: int = 0
    repeats: int = 0


class PowerPointRecord(BaseModel):
    """One power limit of the power phase (tune/power.py): its runs at the flags' SLO limit and the judgement."""

    watts: int
    concurrency: int
    runs: list[RunEntry] = Field(default_factory=list)
    holds: bool = False
    misses: list[str] = Field(default_factory=list)
    j_per_token: float | None = None
    output_tok_s: float | None = None


class TuneRecord(BaseModel):
    tune_id: str
    host: str
    preset: str
    slo: str
    over: list[str]
    range: str
    budget: str | None = None
    apply: bool = False
    confirm: int = 2
    noise_pct: float = 5.0
    started_at: str
    elapsed_s: float = 0.0  # time spent in earlier sessions of this tune (the budget counts across resumes)
    phase: Literal["running", "interrupted", "done"] = "running"
    original_release: str | None = None
    points: list[PointRecord] = Field(default_factory=list)
    winner: str | None = None
    verdict: str = ""
    final_release: str | None = None
    #: The release the host ran when the last session of this tune ended, read back from the host after its
    #: restore (None: not read, e.g. the host could not be reached). What an interrupted tune reports.
    host_release: str | None = None
    #: The power phase (`--power-step W`): the GPUs' limits when it began (restored unless --apply), each limit
    #: tried, the chosen one and why.
    power_step_w: int | None = None
    power_original: list[float] | None = None
    power_points: list[PowerPointRecord] = Field(default_factory=list)
    power_winner: int | None = None
    power_verdict: str = ""
    power_applied: bool = False  # --apply persisted power_winner: nothing to restore

    def point(self, label: str) -> PointRecord:
        return next(p for p in self.points if p.label == label)


def tunes_dir() -> Path:
    return private_state_dir() / "tunes"


def new_tune_id() -> str:
    return f"t-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def save(record: TuneRecord) -> Path:
    """Atomic (a kill mid-write leaves the previous record), 0600 in a 0700 directory, never through a link; or a
    row of the team store (state/store.py), where any machine can resume the tune."""
    path = tunes_dir() / f"{record.tune_id}.json"
    team = team_records()
    if team is not None:
        team.put("tunes", record.tune_id, record.model_dump_json(indent=1))
        return Path(team.where("tunes", record.tune_id))
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return write_file(path, record.model_dump_json(indent=1), mode=0o600)


def load(tune_id: str) -> TuneRecord:
    if not tune_id.startswith("t-") or "/" in tune_id or os.sep in tune_id:
        raise ConfigError(f"--resume {tune_id!r} is not a tune id", fix="tune ids look like t-20261201-180000-ab12")
    path = tunes_dir() / f"{tune_id}.json"
    team = team_records()
    try:
        if team is not None:
            text = team.get("tunes", tune_id)
            if text is None:
                raise ConfigError(f"no tune {tune_id} in the team store {team.where('tunes', tune_id)}",
                                  fix="a tune's id is printed when it starts; `deploy state status` names the store")
            return TuneRecord.model_validate_json(text)
        text = read_private_file(path, "tune record")
        if text is None:
            raise FileNotFoundError(path)
        return TuneRecord.model_validate_json(text)
    except FileNotFoundError:
        raise ConfigError(f"no tune {tune_id} on this machine ({path})",
                          fix="`ls` the tunes directory; a tune's id is printed when it starts") from None
    except ValueError as exc:
        raise ConfigError(f"tune record {path} cannot be read: {exc}", fix="start a new tune") from None
