"""A bug in deploy (an exception no layer turned into a DeployError) is one line and a 0600 traceback file, not a
traceback on the terminal or a broken --json document; DEPLOY_DEBUG=1 shows the traceback."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = """
import sys
from orchestrator.cli.common import AppContext, run_command

def body(app):
    if sys.argv[2:] == ["config-error"]:
        from orchestrator.errors import ConfigError
        raise ConfigError("a refused inventory", fix="fix it")
    token = {"a": 1}
    return token["missing-key"]

run_command(AppContext(inventory_dirs="/nonexistent", as_json=sys.argv[1] == "json"), body)
"""


def run(tmp_path: Path, mode: str, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, mode, *extra], capture_output=True, text=True, cwd=REPO,
                          timeout=60, check=False,
                          env={**os.environ, "DEPLOY_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "200", **env})


def test_an_internal_error_is_one_line_and_its_traceback_a_private_file(tmp_path: Path) -> None:
    proc = run(tmp_path, "text")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout
    assert "error: internal error in deploy: KeyError: 'missing-key'" in proc.stderr
    (crash,) = (tmp_path / "state" / "crashes").iterdir()
    assert str(crash) in proc.stderr.replace("\n", "")
    assert stat.S_IMODE(crash.stat().st_mode) == 0o600
    assert stat.S_IMODE(crash.parent.stat().st_mode) == 0o700
    assert ', in body' in crash.read_text() and "KeyError: 'missing-key'" in crash.read_text()


def test_json_gets_a_failure_document(tmp_path: Path) -> None:
    proc = run(tmp_path, "json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["ok"] is False and doc["error"] == "error"
    assert doc["what"].startswith("internal error in deploy: KeyError") and "bug in deploy" in doc["fix"]


def test_deploy_debug_shows_the_traceback(tmp_path: Path) -> None:
    proc = run(tmp_path, "text", DEPLOY_DEBUG="1")
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "KeyError: 'missing-key'" in proc.stderr


def test_a_deploy_error_keeps_its_own_exit_code_and_fix(tmp_path: Path) -> None:
    proc = run(tmp_path, "text", "config-error")
    assert proc.returncode == 2 and "error: a refused inventory" in proc.stderr and "fix: fix it" in proc.stderr
    assert "internal error" not in proc.stderr and not (tmp_path / "state" / "crashes").exists()


def test_deploy_debug_with_json_still_prints_one_document(tmp_path: Path) -> None:
    """Issue 38 (low): `DEPLOY_DEBUG=1 deploy --json …` printed a traceback and no JSON document."""
    proc = run(tmp_path, "json", DEPLOY_DEBUG="1")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["error"] == "error" and doc["what"].startswith("internal error in deploy")
    assert "Traceback" in proc.stderr and "KeyError: 'missing-key'" in proc.stderr
