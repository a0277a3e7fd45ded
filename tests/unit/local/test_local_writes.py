"""Every local file the tool writes is written without following a symbolic link (issue 38 item 9).

Each case puts a link where the tool writes, pointing at a file outside, runs the writer and checks that the file
outside is unchanged: replaced files (records, reports) replace the link itself; files kept open in place (claims,
run markers, the ledger) refuse it with a clear ConfigError or, for the best-effort run marker, skip it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.bench.report import SweepResult, write_sweep_report
from orchestrator.errors import ConfigError
from orchestrator.fleet.rollout import FleetRoll, HostRoll, RollSpec, RollStore
from orchestrator.ledger.sqlite import Ledger
from orchestrator.local.files import write_file
from orchestrator.locks.claims import claim_hosts, claims_dir
from orchestrator.locks.local_runs import runs_dir, start_run
from orchestrator.tune import record as tune_record
from tests.unit.bench.test_bench_report import points

PRECIOUS = "precious: true\n"


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path / "state"))
    path = tmp_path / "outside.txt"
    path.write_text(PRECIOUS)
    return path


def _link(at: Path, to: Path) -> Path:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(to)
    return at


def test_write_file_replaces_the_link_itself_with_the_mode_asked_and_leaves_no_temp(outside: Path,
                                                                                    tmp_path: Path) -> None:
    link = _link(tmp_path / "d" / "f.json", outside)
    write_file(link, "new\n", mode=0o600)
    assert outside.read_text() == PRECIOUS and not link.is_symlink() and link.read_text() == "new\n"
    assert link.stat().st_mode & 0o777 == 0o600 and os.listdir(link.parent) == ["f.json"]
    write_file(link, b"\x89PNG")
    assert link.read_bytes() == b"\x89PNG" and link.stat().st_mode & 0o777 == 0o644


def test_reports_records_and_fleet_rolls_replace_a_link_never_its_target(outside: Path, tmp_path: Path) -> None:
    report = tmp_path / "r"
    _link(report / "report.html", outside)
    _link(report / "sweep.png", outside)
    write_sweep_report(SweepResult(parameter="max-concurrency", points=tuple(points()), host="h", preset="p"), report)
    assert "<html" in (report / "report.html").read_text() and (report / "sweep.png").read_bytes()[:4] == b"\x89PNG"

    rec = tune_record.TuneRecord(tune_id="t-20261202-230000-ab12", host="h1", preset="p", slo="ttft_p99<=2s",
                                 over=[], range="8:64:8", started_at="2026-12-02T23:00:00")
    _link(tune_record.tunes_dir() / f"{rec.tune_id}.json", outside)
    assert tune_record.load(tune_record.save(rec).stem).host == "h1"

    store = RollStore(tmp_path / "state" / "fleet-rolls")
    roll = FleetRoll(id="fleetroll-20261130T100000-1", command="deploy roll group prod", targets="group prod",
                     inventory="inv", pid=0, started="", updated="", state="done", spec=RollSpec(set=["a=1"]),
                     waves=[["a"]], hosts=[HostRoll(host="a", wave=0)])
    _link(store.path(roll.id), outside)
    store.save(roll)
    assert [r.id for r in store.all()] == [roll.id]
    assert outside.read_text() == PRECIOUS


def test_a_linked_claim_file_is_refused_and_the_other_claims_given_back(outside: Path) -> None:
    _link(claims_dir() / "b.claim", outside)
    with (pytest.raises(ConfigError, match=r"claim file .*b\.claim is a symbolic link; deploy does not write"),
          claim_hosts(["a", "b"], "deploy roll group g")):
        pass
    with claim_hosts(["a"], "deploy roll group g"):  # a's claim was released
        pass
    assert outside.read_text() == PRECIOUS


def test_a_linked_ledger_or_side_file_is_refused(outside: Path, tmp_path: Path) -> None:
    mode = outside.stat().st_mode & 0o777
    with pytest.raises(ConfigError, match=r"ledger .* is a symbolic link") as err:
        Ledger(_link(tmp_path / "l1" / "ledger.sqlite", outside))
    assert "rm " in (err.value.fix or "")
    with pytest.raises(ConfigError, match=r"ledger file .*ledger\.sqlite-wal is a symbolic link"):
        Ledger(_link(tmp_path / "l2" / "ledger.sqlite-wal", outside).with_name("ledger.sqlite"))
    assert outside.read_text() == PRECIOUS and outside.stat().st_mode & 0o777 == mode != 0o600  # no chmod through


def test_a_linked_run_marker_is_skipped_not_truncated(outside: Path) -> None:
    run = start_run("h1", "r1", "me")
    run.end()
    _link(runs_dir("h1") / "r1.run", outside)
    assert start_run("h1", "r1", "me").fd is None
    assert outside.read_text() == PRECIOUS
