"""The publish rides on the lock's release: written only while the lease is ours, atomically, with its modes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from orchestrator.locks.lease import LEASE_FILE, LeaseScript
from orchestrator.monitoring.publish import FAILED, PROM_NAME, publish_script

PROM = '# TYPE deploy_release_verified gauge\ndeploy_release_verified{host="h",release="r\'1"} 1\n'


def release(tmp: Path, run: str, extra: str) -> subprocess.CompletedProcess[str]:
    (tmp / "uptime").write_text("1000.0 1.0\n")
    (tmp / "boot").write_text("b\n")
    script = LeaseScript(run, "me", 60, lock_dir=str(tmp / "lock"), clock=str(tmp / "uptime"),
                         boot_id=str(tmp / "boot"))
    take = subprocess.run(["bash", "-c", script.render("acquire")], capture_output=True, text=True, check=False)
    assert take.returncode == 0, take.stderr
    return subprocess.run(["bash", "-c", script.render("release", extra)], capture_output=True, text=True,
                          check=False)


def test_the_release_writes_both_files_atomically_with_their_modes(tmp_path: Path) -> None:
    extra = publish_script(PROM, '{"current": "r"}\n', textfile_dir=str(tmp_path / "tf"),
                           state_dir=str(tmp_path / "state"))
    res = release(tmp_path, "run-1", extra)
    assert res.returncode == 0 and FAILED not in res.stderr, res.stderr
    prom = tmp_path / "tf" / PROM_NAME
    assert prom.read_text() == PROM  # quotes and newlines intact
    assert oct(prom.stat().st_mode & 0o777) == "0o644"
    assert oct((tmp_path / "state" / "metrics-state.json").stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in (tmp_path / "tf").iterdir()) == [PROM_NAME]  # no temporary file left
    assert not (tmp_path / "lock" / LEASE_FILE).exists()  # and the lease is released in the same script


def test_a_lease_that_is_no_longer_ours_publishes_nothing(tmp_path: Path) -> None:
    (tmp_path / "uptime").write_text("1000.0 1.0\n")
    (tmp_path / "boot").write_text("b\n")
    other = LeaseScript("run-other", "them", 60, lock_dir=str(tmp_path / "lock"), clock=str(tmp_path / "uptime"),
                        boot_id=str(tmp_path / "boot"))
    subprocess.run(["bash", "-c", other.render("acquire")], check=True, capture_output=True)
    mine = LeaseScript("run-1", "me", 60, lock_dir=str(tmp_path / "lock"), clock=str(tmp_path / "uptime"),
                       boot_id=str(tmp_path / "boot"))
    extra = publish_script(PROM, "{}", textfile_dir=str(tmp_path / "tf"), state_dir=str(tmp_path / "state"))
    subprocess.run(["bash", "-c", mine.render("release", extra)], check=True, capture_output=True)
    assert not (tmp_path / "tf").exists()
    assert (tmp_path / "lock" / LEASE_FILE).exists()  # the other run's lease stays


def test_a_failed_write_is_reported_and_the_lease_still_released(tmp_path: Path) -> None:
    (tmp_path / "tf").write_text("a file where the directory should be")
    extra = publish_script(PROM, "{}", textfile_dir=str(tmp_path / "tf"), state_dir=str(tmp_path / "state"))
    res = release(tmp_path, "run-1", extra)
    assert res.returncode == 0
    assert f"{FAILED} {tmp_path}/tf/{PROM_NAME}" in res.stderr
    assert (tmp_path / "state" / "metrics-state.json").exists()
    assert not (tmp_path / "lock" / LEASE_FILE).exists()
