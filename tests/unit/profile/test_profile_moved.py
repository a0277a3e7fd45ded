"""Issue 52: after a roll, the next profiled bench says whether the share the last verdict's lever acts on moved.
The runs' diagnoses are made as a bench makes them: the stand-in's traces (tests/unit/test_profile_standin_shapes)
read into a breakdown, judged, and turned into the `profile-<verdict>` diagnosis the ledger keeps."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from orchestrator.ledger.sqlite import RunRecord
from orchestrator.profile.breakdown import breakdown
from orchestrator.profile.capture import ProfileOutcome
from orchestrator.profile.moved import LEVER_SHARE, MOVED_POINTS, share_move
from orchestrator.profile.trace import read_trace
from orchestrator.profile.verdict import NEXT_ACTION, judge
from orchestrator.verdicts.power import Diagnosis
from tests.unit.profile.test_profile_standin_shapes import _window


def diagnosis(tmp: Path, shape: str, i: int = 0) -> list[Diagnosis]:
    b = breakdown([read_trace(p) for p in _window(tmp, shape, i)])
    return [Diagnosis(code="kernels-not-saturating", severity="warn", message="low power", figures={}),
            ProfileOutcome(b, judge(b)).diagnosis()]


def record(run_id: str, release: str | None, diag: list[Diagnosis]) -> RunRecord:
    return RunRecord(id=run_id, host="h", release_id=release, started_at=datetime(2026, 12, 7), diagnosis=tuple(diag))


def test_every_verdict_names_the_share_its_lever_acts_on() -> None:
    assert set(LEVER_SHARE) == set(NEXT_ACTION)


def test_the_collective_share_fell_after_the_roll_and_the_lever_moved_it(tmp_path: Path) -> None:
    before = record("r-1", "rel-a", diagnosis(tmp_path, "collective"))
    now = diagnosis(tmp_path, "moe", 1)
    move = share_move([before], "r-2", "rel-b", now)
    assert move is not None and move.share == "collective" and move.predicted_by == "collective-bound"
    assert move.before >= 0.40 and move.after <= move.before - MOVED_POINTS and move.moved
    line = move.line()
    assert line.startswith(f"collective share {100 * move.before:.0f} % → {100 * move.after:.0f} %: "
                           "the predicted lever moved it"), line
    assert "run r-1 on release rel-a said collective-bound; now release rel-b" in line
    assert move.to_dict()["message"] == line and move.to_dict()["moved"] is True


def test_the_same_shape_after_the_roll_did_not_move(tmp_path: Path) -> None:
    move = share_move([record("r-1", "rel-a", diagnosis(tmp_path, "collective"))], "r-2", "rel-b",
                      diagnosis(tmp_path, "collective", 1))
    assert move is not None and not move.moved
    assert "the predicted lever did not move it" in move.line()


def test_a_share_that_rose_says_so(tmp_path: Path) -> None:
    # rank-imbalanced names the collective share (the others wait there); a collective-bound window after the roll
    move = share_move([record("r-1", "rel-a", diagnosis(tmp_path, "slow_rank"))], "r-2", "rel-b",
                      diagnosis(tmp_path, "collective", 1))
    assert move is not None and move.share == "collective" and move.predicted_by == "rank-imbalanced"
    assert move.after > move.before + MOVED_POINTS and not move.moved
    assert "it rose: the change did not help it" in move.line(), move.line()


def test_the_host_bound_lever_is_read_on_gpu_idle(tmp_path: Path) -> None:
    move = share_move([record("r-1", "rel-a", diagnosis(tmp_path, "host"))], "r-2", "rel-b",
                      diagnosis(tmp_path, "moe", 1))
    assert move is not None and move.share == "idle" and move.moved
    assert move.line().startswith(f"GPU idle share {100 * move.before:.0f} % → {100 * move.after:.0f} %: the "
                                  "predicted lever moved it"), move.line()


def test_the_newest_earlier_profiled_run_is_the_one_compared(tmp_path: Path) -> None:
    unprofiled = record("r-3", "rel-b", [Diagnosis(code="low-power", severity="warn", message="m", figures={})])
    failed = record("r-2", "rel-b", [Diagnosis(code="profile-failed", severity="warn", message="m", figures={})])
    newest = record("r-1", "rel-a", diagnosis(tmp_path, "host"))
    oldest = record("r-0", "rel-0", diagnosis(tmp_path, "collective"))
    move = share_move([unprofiled, failed, newest, oldest], "r-4", "rel-c", diagnosis(tmp_path, "host", 1))
    assert move is not None and move.since_run == "r-1" and move.share == "idle"


@pytest.mark.parametrize("case", ["same-release", "no-earlier", "no-verdict-now", "own-run"])
def test_no_comparison_without_a_roll_or_a_verdict(tmp_path: Path, case: str) -> None:
    earlier = [record("r-1", "rel-a", diagnosis(tmp_path, "collective"))]
    now = diagnosis(tmp_path, "moe", 1)
    if case == "same-release":
        assert share_move(earlier, "r-2", "rel-a", now) is None
    elif case == "no-earlier":
        assert share_move([], "r-2", "rel-b", now) is None
    elif case == "no-verdict-now":
        assert share_move(earlier, "r-2", "rel-b", now[:1]) is None
    else:
        assert share_move([record("r-2", "rel-a", now)], "r-2", "rel-b", now) is None
