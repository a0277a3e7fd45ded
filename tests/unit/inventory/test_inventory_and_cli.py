"""Inventory validation and the CLI surface: one clear error and exit 2; offline verify-p2p on real captures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import __version__
from orchestrator.errors import ConfigError
from orchestrator.inventory.loader import load_inventory
from tests.shared import EXAMPLE_INVENTORY, NVIDIA_SMI

REPO = Path(__file__).resolve().parents[3]
COMMANDS = ["up", "plan", "doctor", "verify-p2p", "render", "roll", "rollback", "status", "history", "bench",
            "smoke", "compare", "profile", "router", "sim", "init", "watch"]


def deploy(*args: str, inventory: Path = EXAMPLE_INVENTORY) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", "--inventory", str(inventory), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


def test_shipped_inventory_loads_and_finds_host_by_name_or_address() -> None:
    inv = load_inventory(EXAMPLE_INVENTORY)
    assert inv.find_host("10.1.230.174").name == "pve-gpu-1"
    assert inv.find_host("pve-gpu-1").address == "10.1.230.174"
    prof = inv.profile_for(inv.find_host("pve-gpu-1"))
    assert prof.flags["nsa-prefill-backend"] == "trtllm" and prof.flags["num-continuous-decode-steps"] == 8
    assert inv.preset("seed-1024x256").random_range_ratio == 1.0


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda t: t.replace("cores: 64", "cores: sixty-four"), "hosts.pve-gpu-1.container.cores"),
    (lambda t: t.replace("      cores: 64", "      cores: 64\n      coers: 64"), "coers"),
    (lambda t: t.replace("      unprivileged: false\n", ""), "unprivileged"),
    (lambda t: t.replace("profile: glm5-nvfp4", "profile: nope"), "unknown profile 'nope'"),
    # Air-gapped sites: mirrors are URLs only, and never carry credentials (argv, logs).
    (lambda t: t.replace("      gpus: all\n", "      gpus: all\n      apt_proxy: 10.0.0.5:3142\n"),
     "must be an http:// or https:// URL"),
    (lambda t: t.replace("      gpus: all\n", "      gpus: all\n      pip_index_url: 'http://u:pw@10.0.0.5/simple'\n"),
     "must not carry credentials"),
    (lambda t: t.replace("      gpus: all\n", "      gpus: all\n      hf_endpoint: \"https://hub.example/ x\"\n"),
     "hosts.pve-gpu-1.container.hf_endpoint"),
    # A host model directory is an absolute, normalised path.
    (lambda t: t.replace("      gpus: all\n", "      gpus: all\n      model_mount: tank/models\n"),
     "must be an absolute directory"),
    (lambda t: t.replace("      gpus: all\n", "      gpus: all\n      model_mount: /tank/../etc\n"),
     "must be a normalised absolute path"),
])
def test_malformed_inventory_is_one_clear_error(inv: Path, edit, needle: str) -> None:
    hosts = inv / "hosts.yaml"
    hosts.write_text(edit(hosts.read_text()))
    with pytest.raises(ConfigError) as exc:
        load_inventory(inv)
    assert needle in exc.value.what
    res = deploy("up", "host", "pve-gpu-1", inventory=inv)
    assert res.returncode == 2
    assert needle in res.stderr and res.stderr.count("error:") == 1


def test_missing_host_exits_2_and_lists_known_hosts(inv: Path) -> None:
    res = deploy("--json", "up", "host", "no-such-host", inventory=inv)  # refused before any connection
    assert res.returncode == 2
    err = json.loads(res.stdout)
    assert err["error"] == "config-error" and "pve-gpu-1 (10.1.230.174)" in err["what"]


def test_help_lists_every_command_and_version() -> None:
    res = deploy("--help")
    assert res.returncode == 0
    for name in COMMANDS:
        assert f"  {name} " in res.stdout
    assert deploy("--version").stdout.strip() == f"deploy, version {__version__} (pve-sglang-deploy)"


def test_offline_verify_p2p_on_the_real_8_gpu_capture() -> None:
    res = deploy("verify-p2p", "--topo-file", str(NVIDIA_SMI / "rtx-pro-6000-x8-bare/topo-m.txt"),
                 "--p2p-read-file", str(NVIDIA_SMI / "rtx-pro-6000-x8-bare/topo-p2p-r.txt"),
                 "--p2p-write-file", str(NVIDIA_SMI / "rtx-pro-6000-x8-bare/topo-p2p-w.txt"))
    assert res.returncode == 0, res.stderr
    for word in ("PIX", "NODE", "SYS", "WARN"):
        assert word in res.stdout
    js = json.loads(deploy("--json", "verify-p2p", "--topo-file", str(NVIDIA_SMI / "h200x2-nvlink/topo-m.txt"),
                           "--p2p-read-file", str(NVIDIA_SMI / "h200x2-nvlink/topo-p2p-r.txt"),
                           "--p2p-write-file", str(NVIDIA_SMI / "h200x2-nvlink/topo-p2p-w.txt")).stdout)
    assert js["ok"] and js["verdict"]["status"] == "pass"
    assert js["topology"]["links"]["GPU0"]["GPU1"] == "NV18"


def test_offline_verify_p2p_fails_on_the_vm_capture() -> None:
    res = deploy("--json", "verify-p2p", "--topo-file", str(NVIDIA_SMI / "rtx-pro-6000-x8-vm/topo-m.txt"),
                 "--p2p-read-file", str(NVIDIA_SMI / "rtx-pro-6000-x8-vm/topo-p2p-r.txt"),
                 "--p2p-write-file", str(NVIDIA_SMI / "rtx-pro-6000-x8-vm/topo-p2p-w.txt"))
    assert res.returncode == 1
    verdict = json.loads(res.stdout)["verdict"]
    assert verdict["vm_passthrough"] and verdict["status"] == "fail"


def test_unimplemented_grammar_errors_are_usage_errors() -> None:
    res = deploy("up", "host")
    assert res.returncode == 2 and "host" in res.stderr


def test_a_model_path_with_a_space_cannot_be_a_mount_target(inv: Path) -> None:
    (inv / "hosts.yaml").write_text((inv / "hosts.yaml").read_text().replace(
        "      gpus: all\n", "      gpus: all\n      model_mount: /tank/models/glm5\n"))
    (inv / "profiles.yaml").write_text((inv / "profiles.yaml").read_text().replace(
        "model_path: /models/GLM-5-NVFP4", "model_path: /models/GLM 5"))
    with pytest.raises(ConfigError) as exc:
        load_inventory(inv)
    assert "container.model_mount" in exc.value.what and "'/models/GLM 5'" in exc.value.what


@pytest.mark.parametrize(("model_path", "needle"), [
    ("../../etc", "must be an absolute directory other than /"),
    ("zai-org/GLM-5", "must be an absolute directory other than /"),  # a hub name: that is weights_repo
    ("/", "must be an absolute directory other than /"),
    ("/models/../etc", "must be a normalised absolute path"),
    ("/models//GLM-5", "must be a normalised absolute path"),
])
def test_model_path_is_an_absolute_normalised_directory_with_or_without_a_mount(inv: Path, model_path: str,
                                                                               needle: str) -> None:
    """Issue 38: `model_path: ../../etc` loaded without a model_mount, and `hf download --local-dir` would have
    written the weights relative to the container command's working directory."""
    (inv / "profiles.yaml").write_text((inv / "profiles.yaml").read_text().replace(
        "model_path: /models/GLM-5-NVFP4", f"model_path: '{model_path}'"))
    with pytest.raises(ConfigError) as exc:
        load_inventory(inv)
    assert f"profiles.glm5-nvfp4.model_path: {model_path!r} (the weights' directory in the container" in exc.value.what
    assert needle in exc.value.what
    res = deploy("up", "host", "pve-gpu-1", inventory=inv)
    assert res.returncode == 2 and needle in " ".join(res.stderr.split())


def test_sglang_extras_make_the_pinned_requirement(inv: Path) -> None:
    (inv / "profiles.yaml").write_text((inv / "profiles.yaml").read_text().replace(
        "model_path: /models/GLM-5-NVFP4", "model_path: /models/GLM-5-NVFP4\n    sglang_extras: [srt, 'bad extra']"))
    with pytest.raises(ConfigError) as exc:
        load_inventory(inv)
    assert "'bad extra' is not a pip extra name" in exc.value.what
    (inv / "profiles.yaml").write_text((inv / "profiles.yaml").read_text().replace("'bad extra'", "blackwell"))
    prof = load_inventory(inv).profiles["glm5-nvfp4"]
    assert prof.sglang_requirement == f"sglang[srt,blackwell]=={prof.sglang_version}"


@pytest.mark.parametrize("value", ["0", "-1", ".nan", "lots"])
def test_a_stacks_disk_budget_must_be_a_positive_number_of_gb(inv: Path, value: str) -> None:
    (inv / "profiles.yaml").write_text((inv / "profiles.yaml").read_text().replace(
        "model_path: /models/GLM-5-NVFP4", f"model_path: /models/GLM-5-NVFP4\n    stacks_disk_budget_gb: {value}", 1))
    with pytest.raises(ConfigError) as exc:
        load_inventory(inv)
    assert "stacks_disk_budget_gb" in str(exc.value.what)


def test_a_path_like_profile_name_is_refused_before_deploy_lock_writes_anywhere(inv: Path, tmp_path: Path) -> None:
    """Issue 50 (LOW): `deploy lock PROFILE` writes locks/<PROFILE>.txt; a profile named `../../x` put that file
    outside the inventory. The inventory refuses such a name at load, before any command runs."""
    for f in inv.glob("*.yaml"):
        f.write_text(f.read_text().replace("glm5-nvfp4", "../../escaped"))
    with pytest.raises(ConfigError, match=r"a profile name is letters, digits and \. _ -"):
        load_inventory(inv)
    res = deploy("lock", "../../escaped", "--host", "pve-gpu-1", inventory=inv)
    assert res.returncode == 2 and "a profile name is letters" in res.stderr, res.stderr
    assert not (tmp_path / "escaped.txt").exists() and not (inv.parent / "escaped.txt").exists()
