"""`deploy init DIR` and the example's profiles and presets that `deploy sim up` writes beside sim.yaml."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from orchestrator.inventory.example import record_seeded, seed_server_files, seeded_files
from orchestrator.inventory.loader import load_inventory
from tests.shared import EXAMPLE_INVENTORY

SIM_HOSTS = """hosts:
  sim-9:
    address: 127.0.0.10
    ssh: {user: root, port: 2222, key_file: /nonexistent/id_ed25519, known_hosts: /nonexistent/known_hosts}
    pve: {node: sim-9, root_ssh: true}
    container: {vmid: 120, hostname: sglang-glm5, ostemplate: local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst,
                cores: 32, memory_mb: 65536, rootfs_size_gb: 64, unprivileged: false,
                driver_installer: /root/NVIDIA-Linux-x86_64-595.58.03.run}
    profile: glm5-nvfp4
"""


def deploy(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DEPLOY_INVENTORY"} | {"COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=60)


def test_init_writes_the_example_that_loads_and_names_the_next_command(tmp_path: Path) -> None:
    site = tmp_path / "site" / "inv"
    res = deploy(tmp_path, "init", str(site))
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in site.iterdir()) == ["hosts.yaml", "patches", "presets.yaml", "profiles.yaml"]
    for name in ("hosts.yaml", "profiles.yaml", "presets.yaml"):
        assert (site / name).read_text() == (EXAMPLE_INVENTORY / name).read_text()
        assert f"wrote {site / name}: " in res.stdout
    assert "#   prod: [pve-gpu-1, pve-gpu-2]" in (site / "hosts.yaml").read_text()  # groups: commented
    inv = load_inventory(site)
    assert list(inv.hosts) == ["pve-gpu-1"] and inv.groups == {} and "seed-1024x256" in inv.presets
    assert res.stdout.splitlines()[-1] == (f"next: edit {site / 'hosts.yaml'}, then: "
                                           f"deploy --inventory {site} doctor host pve-gpu-1")
    helped = deploy(tmp_path, "--inventory", str(site), "bench", "--help")
    assert f"Presets (inventory {site})" in helped.stdout and "seed-c2048" in helped.stdout


def test_init_into_the_default_directory_needs_no_inventory_option(tmp_path: Path) -> None:
    res = deploy(tmp_path, "--json", "init", "inventory")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["ok"] and doc["next"] == "deploy doctor host pve-gpu-1" and doc["replaced"] == []
    assert doc["written"] == [f"inventory/{n}" for n in ("hosts.yaml", "profiles.yaml", "presets.yaml",
                                                          "patches/sglang-autotune-flashinfer-cutlass.patch")]
    assert doc["profiles"] == ["glm5-nvfp4"] and "quick" in doc["presets"]


def test_init_refuses_a_directory_with_inventory_yaml_and_writes_nothing(tmp_path: Path) -> None:
    site = tmp_path / "inv"
    site.mkdir()
    (site / "mine.yml").write_text("hosts: {}\n")
    res = deploy(tmp_path, "init", str(site))
    assert res.returncode == 2
    text = " ".join(res.stderr.split())
    assert f"directory {site} already holds inventory YAML (mine.yml); nothing written" in text and "--force" in text
    assert [p.name for p in site.iterdir()] == ["mine.yml"]
    as_json = json.loads(deploy(tmp_path, "--json", "init", str(site)).stdout)
    assert as_json["ok"] is False and as_json["exit_code"] == 2 and as_json["step"] == "init"


def test_init_force_replaces_the_example_files_and_keeps_the_others(tmp_path: Path) -> None:
    site = tmp_path / "inv"
    site.mkdir()
    (site / "hosts.yaml").write_text("hosts: {}\n")
    (site / "groups.yaml").write_text("groups: {}\n")
    res = deploy(tmp_path, "init", str(site), "--force")
    assert res.returncode == 0, res.stderr
    assert (site / "hosts.yaml").read_text() == (EXAMPLE_INVENTORY / "hosts.yaml").read_text()
    assert (site / "groups.yaml").read_text() == "groups: {}\n"


def test_init_on_a_file_is_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("")
    res = deploy(tmp_path, "init", "taken")
    assert res.returncode == 2 and "taken is not a directory" in res.stderr and "Traceback" not in res.stderr


def test_sim_inventory_gets_the_example_profiles_only_where_there_is_no_inventory(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "sim.yaml").write_text(SIM_HOSTS)
    written = seed_server_files(fresh, fresh / "sim.yaml")
    assert [p.name for p in written] == ["profiles.yaml", "presets.yaml"]
    inv = load_inventory(fresh)
    assert list(inv.hosts) == ["sim-9"] and inv.profile_for(inv.hosts["sim-9"]).served_model_name == "glm-5"
    assert seed_server_files(fresh, fresh / "sim.yaml") == []  # a second `sim up` leaves them (and edits) alone

    site = tmp_path / "site"
    site.mkdir()
    (site / "sim.yaml").write_text(SIM_HOSTS)
    (site / "profiles.yml").write_text("profiles: {}\n")
    assert seed_server_files(site, site / "sim.yaml") == []
    assert sorted(p.name for p in site.iterdir()) == ["profiles.yml", "sim.yaml"]


def test_init_force_replaces_a_symlinked_file_itself_and_leaves_its_target_outside_unchanged(tmp_path: Path) -> None:
    """Issue 38 item 9: `hosts.yaml -> ../outside.yaml` was written through, clobbering a file outside DIR."""
    site = tmp_path / "inv"
    site.mkdir()
    outside = tmp_path / "outside.yaml"
    outside.write_text("precious: true\n")
    dangling = tmp_path / "not-there.yaml"
    (site / "hosts.yaml").symlink_to(outside)
    (site / "presets.yaml").symlink_to(dangling)  # a dangling link would have made a file outside DIR
    res = deploy(tmp_path, "--json", "init", str(site), "--force")
    assert res.returncode == 0, res.stderr
    assert outside.read_text() == "precious: true\n" and not dangling.exists()
    for name in ("hosts.yaml", "presets.yaml"):
        assert not (site / name).is_symlink()
        assert (site / name).read_text() == (EXAMPLE_INVENTORY / name).read_text()
    assert json.loads(res.stdout)["links_replaced"] == {str(site / "hosts.yaml"): str(outside),
                                                        str(site / "presets.yaml"): str(dangling)}
    # no temp left
    assert sorted(p.name for p in site.iterdir()) == ["hosts.yaml", "patches", "presets.yaml", "profiles.yaml"]
    (site / "hosts.yaml").unlink()
    (site / "hosts.yaml").symlink_to(outside)
    text = deploy(tmp_path, "init", str(site), "--force").stdout
    assert f"it was a symbolic link to {outside}: the link was replaced, its target left unchanged" in text
    assert outside.read_text() == "precious: true\n"


def test_sim_down_removes_only_the_example_files_sim_up_wrote_and_keeps_edited_ones(tmp_path: Path) -> None:
    """Issue 38: `sim down` removed any profiles.yaml/presets.yaml that matched the example, also those an earlier
    `deploy init` had written (the user's). It now removes what `sim up` recorded writing, unless edited since."""
    site = tmp_path / "inv"
    assert deploy(tmp_path, "init", str(site)).returncode == 0
    (site / "hosts.yaml").unlink()  # the user's profiles and presets, from `deploy init`, the same as the example's
    (site / "sim.yaml").write_text(SIM_HOSTS)
    down = deploy(tmp_path, "--inventory", str(site), "sim", "down", "--root", str(tmp_path / "root"))
    assert down.returncode == 0, down.stderr
    assert sorted(p.name for p in site.iterdir()) == ["patches", "presets.yaml", "profiles.yaml"]  # sim.yaml only went

    fresh, root = tmp_path / "fresh", tmp_path / "root2"
    fresh.mkdir()
    root.mkdir()
    (fresh / "sim.yaml").write_text(SIM_HOSTS)
    record_seeded(root / "inventory-seeded.json", seed_server_files(fresh, fresh / "sim.yaml"))
    (fresh / "profiles.yaml").write_text((fresh / "profiles.yaml").read_text() + "# mine\n")
    assert seeded_files(root / "inventory-seeded.json") == ([fresh / "presets.yaml"], [fresh / "profiles.yaml"])
    down = deploy(tmp_path, "--inventory", str(fresh), "sim", "down", "--root", str(root))
    assert down.returncode == 0, down.stderr
    assert sorted(p.name for p in fresh.iterdir()) == ["profiles.yaml"]
    assert not (root / "inventory-seeded.json").exists()
    assert f"kept {fresh / 'profiles.yaml'}: edited since `deploy sim up` wrote it" in down.stdout
