"""`deploy metrics sd group G`: discovery files from the inventory, the key only in a 0600 token file, and a scrape
config that promtool accepts."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from click.testing import CliRunner

from orchestrator.cli import cli
from tests.shared import EXAMPLE_INVENTORY

SECRET = "sk-metrics-sd-secret-42"


def inventory(tmp: Path, *, key: bool = True) -> Path:
    inv = tmp / "inv"
    shutil.copytree(EXAMPLE_INVENTORY, inv)
    hosts = (inv / "hosts.yaml").read_text().replace("ip=dhcp", "ip=10.1.230.50/24,gw=10.1.230.1")
    (inv / "hosts.yaml").write_text(hosts + "groups:\n  prod: [pve-gpu-1]\n")
    if key:
        prof = (inv / "profiles.yaml").read_text()
        (inv / "profiles.yaml").write_text(prof.replace("    start_timeout_s: 900",
                                                        "    api_key: {env: TEST_SD_KEY}\n    start_timeout_s: 900"))
    return inv


def test_sd_files_name_each_target_and_keep_the_key_in_a_0600_file(tmp_path: Path, promtool: str) -> None:
    out = tmp_path / "prom"
    res = CliRunner().invoke(cli, ["--inventory", str(inventory(tmp_path)), "metrics", "sd", "group", "prod",
                                   "--out", str(out)], env={"TEST_SD_KEY": SECRET})
    assert res.exit_code == 0, res.output
    assert SECRET not in res.output
    sglang = json.loads((out / "deploy-prod-sglang.json").read_text())
    assert sglang == [{"targets": ["10.1.230.50:8000"], "labels": {"host": "pve-gpu-1", "deploy_group": "prod"}}]
    node = json.loads((out / "deploy-prod-node.json").read_text())
    assert node[0]["targets"] == ["10.1.230.174:9100"] and node[0]["labels"]["host"] == "pve-gpu-1"
    assert json.loads((out / "deploy-prod-router.json").read_text()) == []  # the example has no router
    token = out / "deploy-prod.token"
    assert token.read_text().strip() == SECRET and oct(token.stat().st_mode & 0o777) == "0o600"
    for path in out.iterdir():
        if path != token:
            assert SECRET not in path.read_text(), path
    scrape = (out / "deploy-prod-scrape.yml").read_text()
    assert f"credentials_file: {token}" in scrape
    check = subprocess.run([promtool, "check", "config", str(out / "deploy-prod-scrape.yml")], capture_output=True,
                           text=True, check=False)
    assert check.returncode == 0 and "SUCCESS" in check.stdout, check.stdout + check.stderr


def test_without_a_key_there_is_no_token_and_no_authorization(tmp_path: Path, promtool: str) -> None:
    out = tmp_path / "prom"
    res = CliRunner().invoke(cli, ["--inventory", str(inventory(tmp_path, key=False)), "--json", "metrics", "sd",
                                   "group", "prod", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert not (out / "deploy-prod.token").exists()
    assert "authorization" not in (out / "deploy-prod-scrape.yml").read_text()


def test_an_unknown_group_is_refused(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["--inventory", str(inventory(tmp_path)), "metrics", "sd", "group", "nope",
                                   "--out", str(tmp_path / "p")])
    assert res.exit_code == 2, res.output
    assert not (tmp_path / "p").exists()


def test_with_a_managed_router_each_worker_carries_the_url_the_router_lists(tmp_path: Path) -> None:
    """The `worker` label is what DeployHostOutOfRouter joins on smg_worker_health: the URL the router is given
    (worker_url), and the router's metrics port is its flags' when they set one."""
    inv = inventory(tmp_path, key=False)
    (inv / "router.yaml").write_text("router:\n  runs_on: pve-gpu-1\n  package: smg\n"
                                     "  flags:\n    prometheus-port: 29100\n")
    out = tmp_path / "prom"
    res = CliRunner().invoke(cli, ["--inventory", str(inv), "metrics", "sd", "group", "prod", "--out", str(out)])
    assert res.exit_code == 0, res.output
    sglang = json.loads((out / "deploy-prod-sglang.json").read_text())
    assert sglang[0]["labels"] == {"host": "pve-gpu-1", "deploy_group": "prod", "worker": "http://10.1.230.50:8000"}
    router = json.loads((out / "deploy-prod-router.json").read_text())
    assert router == [{"targets": ["10.1.230.50:29100"], "labels": {"host": "pve-gpu-1", "deploy_group": "prod"}}]
