"""Proof that a run of this machine is dead: its file's flock is free once its process is gone, SIGKILL included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.locks import local_runs

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path))
    return tmp_path


def test_a_live_run_is_never_dead_even_to_its_own_process() -> None:
    mark = local_runs.start_run("gpu-1", "run-a", "me@box pid 1")
    assert local_runs.dead_runs("gpu-1") == ()
    assert (mark.path.stat().st_mode & 0o777) == 0o600
    mark.end()
    assert local_runs.dead_runs("gpu-1") == () and not mark.path.exists()


def test_a_killed_process_leaves_its_run_provably_dead_for_that_host_only(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from orchestrator.locks import local_runs
        local_runs.start_run("gpu-1", "run-k", "me@box")
        print("marked", flush=True)
        time.sleep(60)
        """)], cwd=REPO, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "DEPLOY_STATE_DIR": str(tmp_path)})
    assert child.stdout is not None and child.stdout.readline().strip() == "marked"
    assert local_runs.dead_runs("gpu-1") == ()  # alive in another process
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    assert local_runs.dead_runs("gpu-1") == ("run-k",)
    assert local_runs.dead_runs("gpu-2") == ()
    local_runs.forget("gpu-1", ("run-k",))
    assert local_runs.dead_runs("gpu-1") == ()


def test_an_unwritable_state_dir_marks_nothing_and_fails_nothing(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(blocker))
    mark = local_runs.start_run("gpu-1", "run-a", "me")
    assert mark.fd is None and local_runs.dead_runs("gpu-1") == ()
    mark.end()
