"""What an operator meets on day one (issue 25): typos refused early with "did you mean", accurate hints and
summaries. Every CLI run here is refused or answered before any SSH connection: the hosts point at a closed
loopback port, so a run that got as far as connecting would fail with exit 3 instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def deploy(*args: str, inventory: Path | None = None) -> subprocess.CompletedProcess[str]:
    inv = ["--inventory", str(inventory)] if inventory else []
    env = {**os.environ, "DEPLOY_PVE_TOKEN_SECRET": "not-used", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "orchestrator", *inv, *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60, env=env)



@pytest.mark.parametrize("args", [
    ("up", "host", "pve-gpu-1", "--preset", "quik"),
    ("up", "host", "pve-gpu-1", "--preset", "quik", "--skip-bench"),
    ("up", "--all", "--preset", "quik"),
    ("roll", "host", "pve-gpu-1", "--set", "chunked-prefill-size=4096", "--preset", "quik"),
    ("bench", "host", "pve-gpu-1", "--preset", "quik"),
])
def test_a_mistyped_preset_is_refused_before_any_connection(local_inv: Path, args: tuple[str, ...]) -> None:
    res = deploy("--json", *args, inventory=local_inv)
    assert res.returncode == 2, res.stderr
    err = json.loads(res.stdout)
    assert "no bench preset 'quik'" in err["what"] and "quick" in err["what"]
    assert err["fix"].startswith("did you mean 'quick'?")


def test_a_mistyped_profile_is_refused_with_did_you_mean(local_inv: Path) -> None:
    res = deploy("roll", "host", "pve-gpu-1", "--profile", "glm5-nvfp", inventory=local_inv)
    assert res.returncode == 2
    assert "no profile 'glm5-nvfp'" in res.stderr and "did you mean 'glm5-nvfp4'?" in res.stderr


def test_a_mistyped_command_names_the_closest_one() -> None:
    res = deploy("uo", "host", "pve-gpu-1")
    assert res.returncode == 2
    assert "No such command 'uo'. Did you mean 'up'?" in res.stderr and "verify-p2p" in res.stderr


def test_a_mistyped_subcommand_of_sim_names_the_closest_one() -> None:
    res = deploy("sim", "stauts")
    assert res.returncode == 2 and "No such command 'stauts'. Did you mean 'status'?" in res.stderr


def test_a_mistyped_host_names_the_closest_one(local_inv: Path) -> None:
    res = deploy("--json", "status", "host", "pve-gpu1", inventory=local_inv)
    assert res.returncode == 2
    assert json.loads(res.stdout)["fix"].startswith("did you mean 'pve-gpu-1'?")


def test_a_mistyped_sweep_key_names_the_closest_bench_flag(local_inv: Path) -> None:
    res = deploy("bench", "host", "pve-gpu-1", "--sweep", "max-concurency=256,512", inventory=local_inv)
    assert res.returncode == 2
    assert "unknown bench flag --max-concurency" in res.stderr and "did you mean --max-concurrency?" in res.stderr


def test_an_unknown_inventory_key_names_the_closest_allowed_key(local_inv: Path) -> None:
    hosts = local_inv / "hosts.yaml"
    hosts.write_text(hosts.read_text().replace("      cores: 64", "      coers: 64"))
    res = deploy("up", "host", "pve-gpu-1", inventory=local_inv)
    assert res.returncode == 2
    assert "hosts.pve-gpu-1.container.coers: unknown key" in res.stderr and "did you mean 'cores'?" in res.stderr


@pytest.mark.parametrize("command", ["roll", "compare"])
def test_help_shows_a_single_percent_sign(command: str) -> None:
    res = deploy(command, "--help")
    assert res.returncode == 0 and "Noise threshold in %" in res.stdout and "%%" not in res.stdout
