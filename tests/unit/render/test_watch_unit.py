"""The systemd unit of `deploy watch group G --unit` (orchestrator/render/watch_unit.py): what it runs, with what
environment, and that systemd itself accepts it (`systemd-analyze verify`, where installed)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.render.watch_unit import render_watch_unit, watch_unit_name


def _unit(**over: object) -> str:
    args: dict = {"program": [sys.executable, "-m", "orchestrator"], "group": "prod", "interval_s": 30.0,
                  "drain_timeout_s": 120.0, "inventory": "/etc/deploy/inventory", "state_dir": "/var/lib/deploy",
                  "reboot_timeout_s": 600.0}
    args.update(over)
    return render_watch_unit(**args)


def test_the_unit_runs_the_watch_loop_with_absolute_paths_and_restarts_it() -> None:
    text = _unit()
    lines = text.splitlines()
    assert f"ExecStart={sys.executable} -m orchestrator watch group prod --interval 30 --drain-timeout 120" in lines
    assert "Environment=DEPLOY_INVENTORY=/etc/deploy/inventory" in lines
    assert "Environment=DEPLOY_STATE_DIR=/var/lib/deploy" in lines
    assert "Restart=always" in lines and "SuccessExitStatus=1" in lines and "WantedBy=multi-user.target" in lines
    assert "TimeoutStopSec=810" in lines  # a cycle, a drain and a reboot remedy, + 60 s
    assert watch_unit_name("prod") == "deploy-watch-prod.service"


def test_names_and_paths_a_unit_cannot_carry_are_refused() -> None:
    with pytest.raises(ConfigError):
        watch_unit_name("prod;rm")
    with pytest.raises(ConfigError) as err:
        _unit(inventory="/home/ops/my inventory")
    assert "Environment=" in err.value.what
    with pytest.raises(ConfigError):
        _unit(state_dir="relative/state")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    path = tmp_path / watch_unit_name("prod")
    path.write_text(_unit(inventory=str(tmp_path), state_dir=str(tmp_path)))
    res = subprocess.run(["systemd-analyze", "verify", path.name], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_team_store_goes_into_the_unit_by_url_and_password_file_never_the_password(tmp_path: Path) -> None:
    """Issue 51: the watch under systemd uses the team store this command uses (here named in the environment),
    the password by its 0600 file's path only; a readable file or a password in the URL writes no unit."""
    import os

    from tests.shared import EXAMPLE_INVENTORY

    inv = tmp_path / "inv"
    shutil.copytree(EXAMPLE_INVENTORY, inv)
    (inv / "fleet.yaml").write_text("groups:\n  prod: [pve-gpu-1]\nrouter:\n  host: 10.0.0.9\n  port: 30000\n")
    pw = tmp_path / "store.pw"
    pw.write_text("s3cret-pw\n")
    pw.chmod(0o600)
    url = "postgresql://deploy@db.example:5432/deploy?sslmode=verify-full&sslrootcert=/etc/ssl/db%20ca.pem"
    env = {**os.environ, "DEPLOY_STATE_DIR": str(tmp_path / "state"), "DEPLOY_STATE_URL": url,
           "DEPLOY_STATE_PASSWORD_FILE": str(pw)}

    def unit(**over: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator", "--inventory", str(inv), "watch", "group", "prod",
                               "--unit"], capture_output=True, text=True, env={**env, **over})

    res = unit()
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert f"Environment=DEPLOY_STATE_URL={url.replace('%', '%%')}" in lines
    assert f"Environment=DEPLOY_STATE_PASSWORD_FILE={pw}" in lines
    assert "s3cret-pw" not in res.stdout
    if shutil.which("systemd-analyze"):
        path = tmp_path / watch_unit_name("prod")
        path.write_text(res.stdout)
        checked = subprocess.run(["systemd-analyze", "verify", path.name], cwd=tmp_path, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    pw.chmod(0o644)
    res = unit()
    assert res.returncode == 2 and "readable by others" in res.stderr and not res.stdout, res.stdout + res.stderr
    pw.chmod(0o600)
    res = unit(DEPLOY_STATE_URL=url.replace("deploy@", "deploy:pw@"))
    assert res.returncode == 2 and "carries a password" in res.stderr and "deploy:pw" not in res.stdout + res.stderr
    with pytest.raises(ConfigError):
        _unit(state_url="postgresql://deploy@db/deploy?application_name=a b")
