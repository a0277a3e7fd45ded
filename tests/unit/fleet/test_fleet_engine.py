"""The fleet engine's own bounds, with a fake per-host job (the engine is generic over what a job does)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from orchestrator.commands.result import RunResult
from orchestrator.engine.runner import RunReport
from orchestrator.envelope import envelope
from orchestrator.errors import CheckFailed
from orchestrator.fleet.engine import Event, HostEvents, HostOutcome, run_fleet
from orchestrator.fleet.outcome import Refused, host_outcome
from orchestrator.runlog import StepRecord


class Tracker:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.threads: set[int] = set()

    def job(self, fail: set[str] | None = None, code: dict[str, int] | None = None, sleep_s: float = 0.01):
        def run(host: str, events: HostEvents) -> HostOutcome:
            with self.lock:
                self.now += 1
                self.peak = max(self.peak, self.now)
                self.threads.add(threading.get_ident())
            events.step("work")
            time.sleep(0 if fail and host in fail else sleep_s)  # failures come first, whatever the load
            with self.lock:
                self.now -= 1
            if fail and host in fail:
                if host.endswith("boom"):
                    raise RuntimeError("bug in one host's job")
                return HostOutcome(host, "failed", exit_code=(code or {}).get(host, 1))
            return HostOutcome(host, "ok")
        return run


def test_no_more_than_parallel_jobs_or_worker_threads_at_once() -> None:
    t = Tracker()
    hosts = [f"h{i}" for i in range(300)]
    seen: list[Event] = []
    run = run_fleet(hosts, t.job(sleep_s=0.002), parallel=5, on_event=seen.append, tick_s=0.01)
    assert t.peak == 5 and len(t.threads) == 5
    assert run.stats.workers == 5 and run.stats.peak_running <= 5
    assert run.stats.peak_threads - run.stats.baseline_threads <= 5
    assert [o.host for o in run.outcomes] == hosts and all(o.result == "ok" for o in run.outcomes)
    assert sum(1 for e in seen if e.kind == "done") == 300 and sum(1 for e in seen if e.kind == "step") == 300
    # Every worker has ended (by identity: a thread that an earlier test left may end meanwhile, so counts drift).
    assert not t.threads & {th.ident for th in threading.enumerate()}


def test_a_failing_host_never_stops_the_others_and_the_worst_exit_code_wins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path))
    hosts = ["a", "b", "c", "d", "e-boom"]
    run = run_fleet(hosts, Tracker().job(fail={"b", "d", "e-boom"}, code={"b": 1, "d": 3}), parallel=2)
    assert [o.result for o in run.outcomes] == ["ok", "failed", "ok", "failed", "failed"]
    assert run.exit_code == 3
    boom = run.outcomes[4]
    assert boom.detail.startswith("internal error in deploy: ") and "(a bug in deploy)" in boom.detail
    assert boom.exit_code == 1
    (crash,) = (tmp_path / "crashes").iterdir()  # a bug's traceback goes to a private file, named in the detail
    assert f"its traceback is in {crash}" in boom.detail and oct(crash.stat().st_mode & 0o777) == "0o600"
    assert "Traceback (most recent call last)" in crash.read_text()


def test_fail_fast_starts_nothing_after_a_failure() -> None:
    hosts = [f"h{i}" for i in range(10)]
    run = run_fleet(hosts, Tracker().job(fail={"h1"}, sleep_s=0.3), parallel=2, fail_fast=True)
    results = [o.result for o in run.outcomes]
    assert results[:2] == ["ok", "failed"] and run.exit_code == 1  # h0 was running: it finishes
    assert all(r == "skipped" for r in results[2:])
    assert run.outcomes[-1].detail == "not started (--fail-fast)" and run.outcomes[-1].exit_code == 0


def test_host_outcome_keeps_the_steps_of_a_failed_run() -> None:
    rec = StepRecord("connect", ssh_round_trips=0)
    lock = StepRecord("lock", status="changed", ssh_round_trips=2)
    refused = Refused(CheckFailed("no uvm", step="host_prereqs"))
    o = host_outcome("gpu-1", refused, [rec, lock])
    assert o.result == "failed" and o.ssh_round_trips == 2 and o.changed_steps == ["lock"]
    assert [s["name"] for s in o.report["steps"]] == ["connect", "lock", "host_prereqs"]  # type: ignore[index]
    assert (o.report["exit_code"], o.report["error"], o.report["changed"]) == (1, "check-failed", False)  # type: ignore[index]
    assert o.detail == "host_prereqs: no uvm"
    converged = RunReport("gpu-2", "up", dry_run=False, steps=[StepRecord("lock", status="ok")], ssh_round_trips=3)
    assert host_outcome("gpu-2", RunResult(converged), []).result == "ok"
    planned = RunReport("gpu-3", "up", dry_run=True, steps=[StepRecord("container", status="would-change")],
                        ssh_round_trips=3)
    o = host_outcome("gpu-3", RunResult(planned), [])
    assert (o.result, o.changed_steps, o.ssh_round_trips) == ("would change", ["container"], 3)
    assert o.report == envelope(planned.to_dict(), exit_code=0)  # the host's own document, as is


def test_the_calling_thread_gets_ticks_while_hosts_are_quiet() -> None:
    ticks: list[int] = []
    caller = threading.get_ident()
    run = run_fleet(["a", "b"], Tracker().job(sleep_s=0.4), parallel=2, tick_s=0.05,
                    on_tick=lambda: ticks.append(threading.get_ident()))
    assert run.exit_code == 0 and len(ticks) >= 3 and set(ticks) == {caller}


def test_the_calling_thread_never_takes_the_workers_lock(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A signal that lands between a lock's acquire and its `with` block leaves the lock held for good: if the
    calling thread (where Ctrl-C and SIGTERM land) ever took the workers' lock, a badly timed signal would hang the
    fleet run (seen: a fleet run's SIGTERM test left a process waiting on that lock for 38 min)."""
    from orchestrator.fleet import engine

    takers: set[int] = set()

    class Watched:
        def __init__(self) -> None:
            self.inner = threading.Lock()

        def __enter__(self) -> None:
            takers.add(threading.get_ident())
            self.inner.acquire()

        def __exit__(self, *exc: object) -> None:
            self.inner.release()

    monkeypatch.setattr(engine, "_new_lock", Watched)
    cancel = threading.Event()
    run = run_fleet([f"h{i}" for i in range(20)], Tracker().job(sleep_s=0.005), parallel=3, tick_s=0.001,
                    cancel=cancel)
    assert all(o.result == "ok" for o in run.outcomes)
    assert takers and threading.get_ident() not in takers
