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

from orchestrator.cli.tune_cmd import stopped
from orchestrator.errors import HungUp, Interrupted, Terminated
from orchestrator.local import signals
from orchestrator.locks.claims import claim_hosts
from orchestrator.tune.record import TuneRecord

REPO = Path(__file__).resolve().parents[3]


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


def _spin() -> None:
    for _ in range(10000):  # a pending signal's handler runs between two bytecodes
        pass


def test_after_the_first_signal_of_a_one_stop_block_every_later_one_is_held() -> None:
    """Issue 38 item 3: a quick second Ctrl-C landed while the first one still unwound the bench run it stopped,
    in the `finally` that frees that run's lease; the lease stayed on the host and the restore was refused."""
    said: list[str] = []
    before = {sig: signal.getsignal(sig) for sig in signals.HELD}
    freed = False
    with pytest.raises(KeyboardInterrupt), signals.one_stop("the stop of tune t1", said.append) as held:
        try:
            os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C stops the block as before
            _spin()
        finally:
            assert signals.holding()
            os.kill(os.getpid(), signal.SIGINT)  # the impatient second one, during the cleanup
            os.kill(os.getpid(), signal.SIGTERM)
            _spin()
            freed = True  # the cleanup ran to its end
    assert freed and held == ["SIGINT", "SIGTERM"], said
    assert "SIGINT: the stop of tune t1 is still running and finishes first" in said[0]
    assert not signals.holding() and {sig: signal.getsignal(sig) for sig in signals.HELD} == before


def test_the_host_lease_signal_handler_holds_inside_a_stopped_block() -> None:
    """The host lease traps SIGTERM during each run (locks/lease.py); in a tune that is already stopping its
    handler must hold the signal too, not raise SystemExit into the cleanup that frees the lease."""
    from orchestrator.locks.lease import _exit_on_signal

    with pytest.raises(SystemExit):  # outside any block: the run ends
        _exit_on_signal(signal.SIGTERM, None)
    with pytest.raises(SystemExit) as first, signals.one_stop("the stop of tune t1", lambda _m: None) as held:
        try:
            _exit_on_signal(signal.SIGTERM, None)  # the first: stops the run, exit 143
        finally:
            _exit_on_signal(signal.SIGTERM, None)  # the second: held
    assert first.value.code == 143 and held == ["SIGTERM"]


def test_a_closed_output_is_told_from_a_sigterm() -> None:
    """`deploy tune … | head -2`: rich answers the BrokenPipeError with SystemExit(1) (Console.on_broken_pipe);
    the tune said "terminated" and exited 143 as for a SIGTERM."""
    try:
        try:
            raise BrokenPipeError(32, "Broken pipe")
        except BrokenPipeError:
            raise SystemExit(1) from None  # `from None` hides the context from tracebacks; it is still set
    except SystemExit as exc:
        stop = exc
    err = stopped("h1", _record("r-orig"), stop)
    assert isinstance(err, HungUp) and err.exit_code == 129 and "its output was closed" in err.what, err.what
    assert isinstance(stopped("h1", _record("r-orig"), SystemExit(143)), Terminated)


def test_a_quick_second_signal_cannot_cut_short_the_unwinding_of_the_run_the_first_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first Ctrl-C stops a bench run; the second lands in that run's `finally` (which frees the host lease):
    the release ran to its end, then the restore, and the first stop went on up."""
    from orchestrator.tune import driver

    steps: list[str] = []

    def bench_run(_ctx: object) -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            _spin()
        finally:
            os.kill(os.getpid(), signal.SIGINT)
            _spin()
            steps.append("lease released")

    monkeypatch.setattr(driver, "_tune", bench_run)
    monkeypatch.setattr(driver, "save", lambda _rec: None)
    monkeypatch.setattr(driver, "restore_and_read_back", lambda _ctx, _say: steps.append("restored"))
    said: list[str] = []
    ctx = driver.TuneContext(host=None, inventory=None, plan=None, slo=None,  # type: ignore[arg-type]
                             record=_record(None), progress=None, say=said.append)
    with pytest.raises(KeyboardInterrupt):
        driver.run_tune(ctx)
    assert steps == ["lease released", "restored"], (steps, said)
    assert any("SIGINT: the stop of tune t-20261202-230000-ab12" in s for s in said), said
