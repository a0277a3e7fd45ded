"""Issue 38 items 2 and 3 (the parts that need no host): a tune's claim keeps other commands off its host, a signal
during its restore is held until the restore ends, and its message says "restored" only when it was read back.
The end-to-end half is tests/e2e/test_tune.py::test_a_tune_owns_its_host_and_a_second_ctrl_c_lets_its_restore_finish.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import signals
from orchestrator.cli.tune_cmd import stopped
from orchestrator.errors import HungUp, Interrupted, Terminated
from orchestrator.state.claims import claim_hosts
from orchestrator.tune.record import TuneRecord

REPO = Path(__file__).resolve().parents[2]


def deploy(inv: Path, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", "--inventory", str(inv), "--json", *args],
                          cwd=REPO, env={**os.environ, "DEPLOY_STATE_DIR": str(state),
                                         "DEPLOY_PVE_TOKEN_SECRET": "unit-test-token"},
                          capture_output=True, text=True, timeout=60)


def test_a_signal_during_a_finishing_block_is_held_and_named() -> None:
    said: list[str] = []
    before = signal.getsignal(signal.SIGINT)
    with signals.finishing("the restore of release r1", said.append) as received:
        assert signals.holding()
        os.kill(os.getpid(), signal.SIGINT)  # delivered at the next bytecode: no KeyboardInterrupt here
        os.kill(os.getpid(), signal.SIGTERM)
    assert received == ["SIGINT", "SIGTERM"]
    assert len(said) == 2 and "the restore of release r1 is still running and finishes first" in said[0]
    assert not signals.holding() and signal.getsignal(signal.SIGINT) is before
    with pytest.raises(KeyboardInterrupt):  # outside the block, Ctrl-C interrupts again
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass


def _record(host_release: str | None) -> TuneRecord:
    return TuneRecord(tune_id="t-20261202-230000-ab12", host="h1", preset="p", slo="ttft_p99<=2s", over=[],
                      range="8:64:8", started_at="2026-12-02T23:00:00", original_release="r-orig",
                      host_release=host_release)


class _SigTerm(KeyboardInterrupt):  # the name run_command's SIGTERM has (cli/common.py)
    pass


def test_an_interrupted_tune_says_restored_only_when_the_host_was_read_back_on_its_original() -> None:
    err = stopped("h1", _record("r-orig"), KeyboardInterrupt())
    assert isinstance(err, Interrupted) and err.exit_code == 130
    assert "the original release r-orig was restored (read back from the host)" in err.what
    assert "rollback" not in (err.fix or "")
    err = stopped("h1", _record("r-trial"), KeyboardInterrupt())
    assert "restored" not in err.what.replace("restore of", "")
    assert "did not finish: h1 runs release r-trial" in err.what
    assert "deploy rollback host h1 --to r-orig" in (err.fix or "")
    err = stopped("h1", _record(None), _SigTerm())
    assert isinstance(err, Terminated) and "could not be read back" in err.what
    # the host lease's own SIGTERM (SystemExit 143) and a closed output pipe are stops too, with their own codes
    assert isinstance(stopped("h1", _record("r-orig"), SystemExit(143)), Terminated)
    assert isinstance(stopped("h1", _record("r-orig"), BrokenPipeError()), HungUp)


def test_a_host_claimed_by_a_tune_refuses_up_and_roll_before_any_connection(local_inv: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path))
    with claim_hosts(["pve-gpu-1"], "deploy tune t-20261202-230000-ab12"):
        for args in (("up", "host", "pve-gpu-1"), ("roll", "host", "pve-gpu-1", "--set", "max-running-requests=8"),
                     ("bench", "host", "pve-gpu-1"),
                     ("tune", "host", "pve-gpu-1", "--slo", "ttft_p99<=2s", "--over", "max-running-requests=8,16")):
            res = deploy(local_inv, tmp_path, *args)
            doc = json.loads(res.stdout)
            # lock-held, not the remote-error of the closed port: refused before any connection was tried
            assert res.returncode == 3 and doc["error"] == "lock-held", (args, res.stdout, res.stderr)
            assert "deploy tune t-20261202-230000-ab12" in doc["what"], doc
    # plan and status read only: they take no claim and get as far as the (closed) host
    res = deploy(local_inv, tmp_path, "status", "host", "pve-gpu-1")
    assert json.loads(res.stdout)["error"] == "remote-error", res.stdout


def test_resume_refuses_the_settings_its_record_fixes(local_inv: Path, tmp_path: Path) -> None:
    for extra in (("--confirm", "3"), ("--noise", "0"), ("--budget", "10m")):
        res = deploy(local_inv, tmp_path, "tune", "host", "pve-gpu-1", "--resume", "t-20261202-230000-ab12", *extra)
        doc = json.loads(res.stdout)
        assert res.returncode == 2 and f"{extra[0]} would be ignored" in doc["what"], (extra, res.stdout)
    assert not (tmp_path / "tunes").exists()
