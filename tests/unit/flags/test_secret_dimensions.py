"""Issue 38 item 1: a secret flag is never a search dimension or a sweep, in any command.

A point's or sweep value's text is its label, drawn in tune.png and sweep plots, written into report.html, the
tune record and the ledger (`tune_runs.point`, a run's overrides). So `tune --over`, `bench --set/--sweep` (one
host or a fleet) and `bench --sweep-server` refuse a secret-named flag with exit 2 before anything connects (the
example host sits on a closed port: a command that got past its checks would fail with exit 3), echo no value, and
leave no file holding it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.flags import refuse_secret_dimension
from orchestrator.redact import redact_text

REPO = Path(__file__).resolve().parents[3]
VALUE = "sk-dimension-secret-0123456789"
SLO = "ttft_p99<=2s"


@pytest.mark.parametrize(("args", "flag"), [
    (("tune", "host", "pve-gpu-1", "--slo", SLO, "--over", f"admin-api-key={VALUE},{VALUE}2"), "admin-api-key"),
    (("tune", "host", "pve-gpu-1", "--slo", SLO, "--over", "max-running-requests=16,64", "--over",
      f"--api-key={VALUE}"), "api-key"),
    (("bench", "host", "pve-gpu-1", "--set", f"api-key={VALUE}"), "api-key"),
    (("bench", "host", "pve-gpu-1", "--set", f"hf_token={VALUE}"), "hf_token"),
    (("bench", "host", "pve-gpu-1", "--sweep", f"api-key={VALUE},{VALUE}2"), "api-key"),
    (("bench", "host", "pve-gpu-1", "--sweep-server", f"admin-api-key={VALUE},{VALUE}2"), "admin-api-key"),
    (("bench", "host", "pve-gpu-1", "--sweep-server", f"ssl-keyfile-password={VALUE},{VALUE}2"),
     "ssl-keyfile-password"),
    # a fleet bench (through the router) parses --set and --sweep in the same place
    (("bench", "group", "prod", "--set", f"api-key={VALUE}"), "api-key"),
    (("bench", "group", "prod", "--sweep", f"token={VALUE},{VALUE}2"), "token"),
])
def test_a_secret_flag_is_refused_as_a_dimension_by_every_command(local_inv: Path, tmp_path: Path,
                                                                  args: tuple[str, ...], flag: str) -> None:
    hosts = local_inv / "hosts.yaml"
    hosts.write_text(hosts.read_text() + "\ngroups:\n  prod: [pve-gpu-1]\n")
    state = tmp_path / "state"
    env = {**os.environ, "DEPLOY_PVE_TOKEN_SECRET": "not-used", "DEPLOY_STATE_DIR": str(state), "COLUMNS": "200"}
    res = subprocess.run([sys.executable, "-m", "orchestrator", "--inventory", str(local_inv), "--json", *args],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120, env=env)
    doc = json.loads(res.stdout)
    assert res.returncode == 2 and doc["error"] == "config-error", res.stdout + res.stderr
    assert f"'{flag}' is a secret flag" in doc["what"] and "secrets.yaml" in doc["fix"], doc
    assert VALUE not in res.stdout + res.stderr  # the refusal does not echo the value
    written = [p for p in state.rglob("*") if p.is_file() and VALUE.encode() in p.read_bytes()]
    assert written == [] and not (state / "tunes").exists(), written


@pytest.mark.parametrize("name", ["admin-api-key", "api_key", "hf_token", "ssl-keyfile-password", "token"])
def test_the_refusal_survives_its_own_redaction(name: str) -> None:
    """Every message is redacted on its way out; a `--api-key is …` shape lost its next word ("--admin-api-key
    <redacted> a secret"), so the message is worded to pass through unchanged."""
    with pytest.raises(ConfigError) as err:
        refuse_secret_dimension("--over", name)
    assert redact_text(err.value.what) == err.value.what and f"'{name}' is a secret flag" in err.value.what
    assert err.value.fix and redact_text(err.value.fix) == err.value.fix
