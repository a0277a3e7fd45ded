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


def test_a_link_planted_in_the_textfile_directory_is_never_written_through(tmp_path: Path) -> None:
    """Issue 50 item 5: the textfile directory's parent is the `prometheus` user's on Debian. A symlink planted at
    the old fixed temporary name (`.deploy.prom.tmp`) made root overwrite a root-only file and leave it 0644; one at
    the final name must be replaced, not followed."""
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$hash:19000:0:99999:7:::\n")
    secret.chmod(0o600)
    tf = tmp_path / "tf"
    tf.mkdir()
    (tf / f".{PROM_NAME}.tmp").symlink_to(secret)
    (tf / PROM_NAME).symlink_to(secret)
    extra = publish_script(PROM, "{}", textfile_dir=str(tf), state_dir=str(tmp_path / "state"))
    res = release(tmp_path, "run-1", extra)
    assert res.returncode == 0 and FAILED not in res.stderr, res.stderr
    assert secret.read_text() == "root:$6$hash:19000:0:99999:7:::\n"
    assert oct(secret.stat().st_mode & 0o777) == "0o600"
    prom = tf / PROM_NAME
    assert not prom.is_symlink() and prom.read_text() == PROM and oct(prom.stat().st_mode & 0o777) == "0o644"
    left = sorted(p.name for p in tf.iterdir())
    assert left == [f".{PROM_NAME}.tmp", PROM_NAME], left  # the planted link left alone, no temporary file of ours
    assert "mktemp -u" in extra and "set -C" in extra and "chmod" not in extra
