"""Issue 21 item 8: SIGTERM and SIGHUP end a fleet run through the same cleanup as Ctrl-C. The signal lands in the
main thread while the hosts' work (and its leases) runs in the engine's workers: the workers observe the cancel
event and end through their own cleanup before the process exits 130 (SIGINT), 143 (SIGTERM) or 129 (SIGHUP).

A real process gets a real signal: run_command (the CLI's wrapper) around run_fleet, as a fleet roll runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from orchestrator.fleet.engine import HostEvents, HostOutcome, run_fleet

SCRIPT = """
import threading, time
from orchestrator.cli.common import AppContext, run_command
from orchestrator.fleet.engine import HostOutcome, run_fleet

cancel = threading.Event()

def job(name, events):
    print(f"{name}: started", flush=True)
    while not cancel.is_set():
        time.sleep(0.05)
    time.sleep(0.3)  # the cleanup takes a moment: the process must wait for it
    print(f"{name}: lease released", flush=True)
    return HostOutcome(name, "failed", exit_code=130)

def body(app):
    run_fleet(["gpu-1", "gpu-2"], job, parallel=1, cancel=cancel)
    return 0

run_command(AppContext(inventory_dirs="/nonexistent", as_json=False), body)
"""


@pytest.mark.parametrize(("sig", "code", "word"), [(signal.SIGINT, 130, "interrupted (Ctrl-C)"),
                                                    (signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                                    (signal.SIGHUP, 129, "hung up (SIGHUP)")])
def test_a_signal_ends_the_workers_through_their_cleanup_then_exits_with_its_code(sig, code, word) -> None:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "COLUMNS": "200"})
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "gpu-1: started"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, (out, err)
    assert "gpu-1: lease released" in out and "gpu-2" not in out, (out, err)  # cleaned up; no other host
    assert word in err and "Traceback" not in err


def test_the_engine_reraises_after_the_workers_ended_with_what_ran() -> None:
    cancel = threading.Event()
    ticks = 0

    def job(name: str, events: HostEvents) -> HostOutcome:
        while not cancel.is_set():
            time.sleep(0.01)
        return HostOutcome(name, "failed", exit_code=130, detail="stopped")

    def tick() -> None:
        nonlocal ticks
        ticks += 1
        if ticks == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as caught:
        run_fleet(["a", "b", "c"], job, parallel=2, on_tick=tick, tick_s=0.02, cancel=cancel)
    run = caught.value.run  # type: ignore[attr-defined]
    assert [(o.host, o.result) for o in run.outcomes] == [("a", "failed"), ("b", "failed"), ("c", "skipped")]
    assert run.outcomes[2].detail == "not started (interrupted)"


FINISHED = """
import os, signal, sys, time
from orchestrator.cli.common import AppContext, run_command

app = AppContext(inventory_dirs="/nonexistent", as_json=False)
write = app.out.finish

def finish(code):  # the signal lands after the command's body returned, while its report is written
    os.kill(os.getpid(), signal.{sig})
    time.sleep(0.3)
    write(code)

app.out.finish = finish
run_command(app, lambda app: 0)
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_after_the_command_finished_does_not_turn_its_result_into_an_interruption(sig: str) -> None:
    """A fleet roll that had finished (its record `done`) exited by SIGINT when Ctrl-C came during its last lines
    (found by tests/perf/chaos_soak.py): the exit code then said "interrupted" about a roll that was not."""
    proc = subprocess.run([sys.executable, "-c", FINISHED.replace("{sig}", sig)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr


