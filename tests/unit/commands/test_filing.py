"""Issue 47: the ledger is written by the command once its run has ended, from the run's typed state, with the
verdict of the gates that judge each run (commands/filing.py, bench/measured.py); never by a step."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.bench.measured import MeasuredRun, verdict_of
from orchestrator.bench.run import BenchRun
from orchestrator.commands import roll as roll_command
from orchestrator.commands.filing import file_runs
from orchestrator.engine.runner import RunReport
from orchestrator.engine.state import RollRequest, RunState
from orchestrator.engine.step import RunOptions
from orchestrator.errors import CheckFailed
from orchestrator.inventory.loader import load_inventory
from orchestrator.ledger.sqlite import Ledger
from orchestrator.parsers.bench import BenchResult
from orchestrator.runlog import StepRecord
from orchestrator.store import store
from tests.shared import EXAMPLE_INVENTORY

HOST = "pve-gpu-1"


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("DEPLOY_STATE_URL", raising=False)
    store.reset()
    yield tmp_path / "state"
    store.reset()


def bench_run(run_id: str, out: float) -> BenchRun:
    result = BenchResult(source="jsonl", completed=64, num_prompts=64, failed=0, output_throughput=out)
    return BenchRun(run_id, "e2e", datetime(2026, 12, 1, 3, 4, 5), result, None, [],
                    f"/var/lib/deploy/releases/rel-1/bench-e2e--{run_id}.jsonl", "")


def measured(run_id: str, out: float = 1000.0, *, judged_by: tuple[str, ...] = ("throughput", "gate"),
             step: str = "throughput", release: str = "rel-2", label: str | None = None) -> MeasuredRun:
    return MeasuredRun(run=bench_run(run_id, out), step=step, source="roll", release=release, preset="e2e",
                       flags={"tp-size": 8}, label=label, judged_by=judged_by)


def report(steps: list[tuple[str, str]], *runs: MeasuredRun, failure: Exception | None = None) -> RunReport:
    rep = RunReport(host=HOST, playbook="roll", dry_run=False,
                    steps=[StepRecord(name, status=status) for name, status in steps],  # type: ignore[arg-type]
                    state=RunState(measured=list(runs)))
    if failure is not None:
        rep.ok, rep.failure = False, failure  # type: ignore[assignment]
    return rep


@pytest.mark.parametrize(("steps", "want"), [
    ([("throughput", "ok"), ("gate", "ok"), ("unlock", "ok")], "passed"),
    ([("throughput", "failed")], "rejected"),  # the throughput gate failed its own run
    ([("throughput", "ok"), ("gate", "failed")], "rejected"),  # the roll's gate rolled it back
    ([("throughput", "ok"), ("watchdog", "failed")], "interrupted"),  # the run ended before `gate` judged it
    ([("throughput", "ok"), ("gate", "ok"), ("unlock", "failed")], "passed"),  # a later step is no gate
])
def test_the_verdict_is_what_the_gates_from_the_measuring_step_on_said(steps: list[tuple[str, str]],
                                                                        want: str) -> None:
    assert verdict_of(measured("r-1"), [StepRecord(n, status=s) for n, s in steps]) == want  # type: ignore[arg-type]


def test_a_run_no_gate_judges_has_no_verdict() -> None:
    baseline = measured("r-1", judged_by=(), step="install_release", release="rel-1")
    assert verdict_of(baseline, [StepRecord("install_release"), StepRecord("gate", status="failed")]) is None


def test_the_command_files_each_run_once_with_its_verdict(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    """A roll whose gate rolled the candidate back: after the run, its baseline (no gate judges it) and its
    candidate (rejected) are in the ledger, each once, with what the step used to write."""
    baseline = measured("r-20261201-030405-aaaa", 1200.0, judged_by=(), step="install_release", release="rel-1")
    candidate = measured("r-20261201-030405-bbbb", 700.0)
    rejected = CheckFailed("throughput regressed")
    ran: list[str] = []

    def fake_run(playbook: str, *_a: Any, **_kw: Any) -> RunReport:
        ran.append(playbook)
        assert not (state_dir / "ledger.sqlite").exists()  # nothing is written while the run runs
        return report([("install_release", "changed"), ("throughput", "ok"), ("gate", "failed")],
                      baseline, candidate, failure=rejected)

    monkeypatch.setattr(roll_command, "run_playbook_to_end", fake_run)
    inventory = load_inventory(EXAMPLE_INVENTORY)
    said: list[str] = []
    outcome = roll_command.roll_host(inventory.hosts[HOST], inventory, RollRequest(set=("x=1",)),
                                     RunOptions(command="deploy roll"), say=said.append)
    assert ran == ["roll"] and outcome.error is rejected
    assert said == []  # a second write of the same run would say "could not write" (its id is taken)
    runs = {r.id: r for r in Ledger(state_dir / "ledger.sqlite").list_runs(host=HOST)}
    assert list(runs) == [candidate.run.run_id, baseline.run.run_id]  # each once
    got = runs[candidate.run.run_id]
    assert (got.verdict, got.release_id, got.preset, got.source, got.flags) == ("rejected", "rel-2", "e2e", "roll",
                                                                               {"tp-size": 8})
    assert got.jsonl_path == f"{HOST}:{candidate.run.remote_jsonl}" and got.bench is not None
    assert got.bench.output_throughput == 700.0 and got.started_at == candidate.run.started_at
    assert runs[baseline.run.run_id].verdict is None and runs[baseline.run.run_id].release_id == "rel-1"


def test_a_run_that_measured_nothing_opens_no_ledger(state_dir: Path) -> None:
    assert file_runs(report([("connect", "ok"), ("status", "ok")])) == []
    assert not (state_dir / "ledger.sqlite").exists()


def test_a_ledger_that_cannot_be_written_is_said_and_never_fails_the_command(monkeypatch: pytest.MonkeyPatch
                                                                             ) -> None:
    def refuse(self: Ledger, **_kw: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(Ledger, "record_run", refuse)
    said: list[str] = []
    assert file_runs(report([("throughput", "ok")], measured("r-1")), said.append) == []
    assert said == ["  warning: could not write the local ledger: disk full"]


def test_a_sweep_point_is_filed_with_its_label_and_no_verdict(state_dir: Path) -> None:
    point = MeasuredRun(run=bench_run("r-20261201-030405-cccc", 900.0), step="bench", source="sweep",
                        release="rel-1", preset="e2e", flags={}, label="max-concurrency=16")
    [rec] = file_runs(report([("bench", "ok")], point))
    stored = Ledger(state_dir / "ledger.sqlite").get_run(rec.id)
    assert (stored.source, stored.label, stored.verdict) == ("sweep", "max-concurrency=16", None)


def test_a_run_stopped_by_a_signal_files_what_it_measured(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    """Ctrl-C during a roll's `gate` step: the baseline and the candidate were measured before it. Both are filed
    (nothing the operator waited for is lost), the candidate `interrupted`: its gate was running, so it judged
    nothing, though its record still reads "ok" (a step's record is only set when it ends). The stop goes on."""
    baseline = measured("r-20261201-030405-cccc", 1200.0, judged_by=(), step="install_release", release="rel-1")
    candidate = measured("r-20261201-030405-dddd", 1100.0)

    def stopped_run(playbook: str, *_a: Any, **_kw: Any) -> RunReport:
        stop = KeyboardInterrupt()
        stop.report = report([("install_release", "changed"), ("throughput", "ok"), ("gate", "ok")],  # type: ignore[attr-defined]
                             baseline, candidate)
        raise stop

    monkeypatch.setattr(roll_command, "run_playbook_to_end", stopped_run)
    inventory = load_inventory(EXAMPLE_INVENTORY)
    with pytest.raises(KeyboardInterrupt):
        roll_command.roll_host(inventory.hosts[HOST], inventory, RollRequest(set=("x=1",)),
                               RunOptions(command="deploy roll"))
    runs = {r.id: r for r in Ledger(state_dir / "ledger.sqlite").list_runs(host=HOST)}
    assert set(runs) == {baseline.run.run_id, candidate.run.run_id}
    assert runs[candidate.run.run_id].verdict == "interrupted" and runs[baseline.run.run_id].verdict is None


def test_a_signal_stops_the_real_runner_with_its_report_attached(monkeypatch: pytest.MonkeyPatch,
                                                                  state_dir: Path) -> None:
    """The real runner hangs the run's report on the stop, its state complete (filled by the runner's `finally`
    before the stop leaves it), and `filed_if_stopped` files it with the step in progress counted as not ended."""
    import dataclasses

    from orchestrator.commands.filing import filed_if_stopped
    from orchestrator.engine.runner import run_playbook_to_end
    from orchestrator.engine.step import StepContext
    from orchestrator.steps import REGISTRY, load_all_steps

    load_all_steps()
    run = measured("r-20261201-030405-eeee", judged_by=("smoke",), step="connect")

    def connect(ctx: StepContext, record: StepRecord) -> None:
        ctx.state.measured.append(run)

    def smoke(ctx: StepContext, record: StepRecord) -> None:
        raise KeyboardInterrupt  # Ctrl-C while the step that judges the run runs

    monkeypatch.setitem(REGISTRY, "connect", dataclasses.replace(REGISTRY["connect"], fn=connect))
    monkeypatch.setitem(REGISTRY, "smoke", dataclasses.replace(REGISTRY["smoke"], fn=smoke))
    inv = load_inventory(EXAMPLE_INVENTORY)
    with pytest.raises(KeyboardInterrupt) as stopped, filed_if_stopped():
        run_playbook_to_end("smoke", inv.hosts[HOST], inv, RunOptions())
    rep = stopped.value.report  # type: ignore[attr-defined]
    assert rep.state.measured == [run] and [s.name for s in rep.steps] == ["connect", "smoke"]
    got = Ledger(state_dir / "ledger.sqlite").list_runs(host=HOST)
    assert [(r.id, r.verdict) for r in got] == [(run.run.run_id, "interrupted")]
