"""`deploy render` through click's CliRunner, on the seeds' inventory and the real H200 device capture."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner, Result

from orchestrator.cli import cli
from tests.shared import EXAMPLE_INVENTORY, H200_NVLINK

ROOT = Path(__file__).resolve().parents[3]
INV = EXAMPLE_INVENTORY
FIX = H200_NVLINK
DEV = ["--devices-file", str(FIX / "ls-dev-nvidia.txt"), "--proc-devices-file", str(FIX / "proc-devices.txt")]


def run(*args: str, inventory: Path = INV, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, ["--inventory", str(inventory), "render", *args], env=env)


def test_example_run_prints_devn_lines_and_canonical_flags() -> None:
    res = run("host", "10.1.230.174", *DEV)
    assert res.exit_code == 0, res.output
    out = res.output
    assert "dev0: /dev/nvidia0,mode=0666" in out and "dev3: /dev/nvidia-uvm,mode=0666" in out
    for want in ("--tensor-parallel-size 8", "--nsa-prefill-backend trtllm", "--nsa-decode-backend trtllm",
                 "--max-running-requests 2048", "--num-continuous-decode-steps 8",
                 "/etc/systemd/system/sglang.service", "mode 0644", "/etc/sglang/sglang.env", "mode 0600",
                 "/etc/pve/lxc/120.conf", "bundle sha256"):
        assert want in out, want


def test_json_output() -> None:
    res = run("pve-gpu-1", *DEV, "--json", "--pve-version", "7.4")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["ok"] is True and doc["host"] == "pve-gpu-1" and doc["sglang_version"] == "0.5.12.post1"
    assert doc["method"] == "raw-lxc"
    assert doc["flags"]["tensor-parallel-size"] == 8
    files = {f["name"]: f for f in doc["files"]}
    assert set(files) == {"passthrough-raw-lxc", "sglang.service", "sglang.env"}
    assert files["sglang.env"]["mode"] == "0600" and len(files["sglang.service"]["sha256"]) == 64
    assert "lxc.cgroup2.devices.allow: c 238:* rwm" in files["passthrough-raw-lxc"]["content"]
    # the same input renders the same bundle
    assert json.loads(run("pve-gpu-1", *DEV, "--json", "--pve-version", "7.4").output)["sha256"] == doc["sha256"]


def test_without_device_files_is_a_config_error() -> None:
    res = run("host", "10.1.230.174")
    assert res.exit_code == 2
    assert "--devices-file" in res.output and "deploy plan" in res.output


def test_renamed_flag_in_newer_sglang_is_reported() -> None:
    res = run("host", "10.1.230.174", *DEV, "--sglang-version", "0.5.23", "--json")
    assert res.exit_code == 2
    doc = json.loads(res.output)
    assert doc["error"] == "config-error" and doc["host"] == "pve-gpu-1"
    assert "--dsa-prefill-backend" in doc["what"]
    res = run("host", "10.1.230.174", *DEV, "--sglang-version", "0.4.0")
    assert res.exit_code == 2 and "0.5.12.post1" in res.output


def test_devn_refused_on_old_pve() -> None:
    res = run("pve-gpu-1", *DEV, "--method", "devN", "--pve-version", "8.0")
    assert res.exit_code == 2 and "raw-lxc" in res.output


def test_secret_is_never_printed(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    shutil.copytree(INV, inv)
    text = (inv / "profiles.yaml").read_text()
    (inv / "profiles.yaml").write_text(text.replace("    start_timeout_s: 900",
                                                    "    api_key: {env: TEST_SGLANG_KEY}\n    start_timeout_s: 900"))
    secret = "sk-very-secret-value-123"
    for extra in ([], ["--json"]):
        res = run("pve-gpu-1", *DEV, *extra, inventory=inv, env={"TEST_SGLANG_KEY": secret})
        assert res.exit_code == 0, res.output
        assert secret not in res.output
        assert "--config /etc/sglang/secrets.yaml" in res.output and "--api-key" not in res.output
        assert "SGLANG_API_KEY=" in res.output and "<redacted>" in res.output
        assert "api-key" in res.output  # secrets.yaml is shown, its value withheld
    # without the secret available, render still works and says so
    res = run("pve-gpu-1", *DEV, inventory=inv, env={"TEST_SGLANG_KEY": ""})
    assert res.exit_code == 0 and "placeholder" in res.output
