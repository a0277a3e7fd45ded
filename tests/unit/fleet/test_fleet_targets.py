"""Fleet targets: inventory groups (nested, validated) and the one target grammar every command shares."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.fleet.targets import parse_targets, resolve_targets
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import Inventory
from tests.shared import EXAMPLE_INVENTORY, H200_NVLINK

REPO = Path(__file__).resolve().parents[3]


def fleet_inventory(groups: dict[str, list[str]], n: int = 4) -> Inventory:
    base = load_inventory(EXAMPLE_INVENTORY)
    seed = base.hosts["pve-gpu-1"]
    hosts = {f"gpu-{i}": seed.model_copy(update={"name": f"gpu-{i}", "address": f"10.9.0.{i}"})
             for i in range(1, n + 1)}
    return Inventory.model_validate({"hosts": {k: v.model_dump() for k, v in hosts.items()},
                                     "profiles": {k: v.model_dump() for k, v in base.profiles.items()},
                                     "presets": {k: v.model_dump() for k, v in base.presets.items()},
                                     "groups": groups})


@pytest.mark.parametrize(("words", "hosts", "groups", "fleet"), [
    (("host", "a"), ("a",), (), False),
    (("a",), ("a",), (), False),
    (("host", "a", "b", "c"), ("a", "b", "c"), (), True),
    (("host", "a", "host", "b"), ("a", "b"), (), True),
    (("group", "prod"), (), ("prod",), True),
    (("group", "prod", "host", "x"), ("x",), ("prod",), True),
    (("group", "a", "b"), (), ("a", "b"), True),
    ((), (), (), False),
])
def test_target_words(words: tuple[str, ...], hosts: tuple[str, ...], groups: tuple[str, ...], fleet: bool) -> None:
    spec = parse_targets(words)
    assert (spec.hosts, spec.groups, spec.fleet) == (hosts, groups, fleet)


@pytest.mark.parametrize("words", [("host",), ("group",), ("host", "a", "group"), ("host", "group", "g")])
def test_keyword_without_a_name_is_refused(words: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError, match="must be followed by a name"):
        parse_targets(words)


def test_all_excludes_names_and_is_a_fleet() -> None:
    assert parse_targets((), all_hosts=True).fleet
    with pytest.raises(ConfigError, match="--all cannot be combined"):
        parse_targets(("host", "a"), all_hosts=True)


def test_nested_groups_expand_in_order_each_host_once() -> None:
    inv = fleet_inventory({"a": ["gpu-2", "gpu-1"], "b": ["gpu-3", "gpu-1"], "both": ["a", "b", "gpu-4"]})
    assert [h.name for h in inv.group_hosts("both")] == ["gpu-2", "gpu-1", "gpu-3", "gpu-4"]
    spec = parse_targets(("group", "a", "host", "gpu-1", "10.9.0.4", "group", "b"))
    assert [h.name for h in resolve_targets(inv, spec)] == ["gpu-2", "gpu-1", "gpu-3", "gpu-4"]
    assert [h.name for h in resolve_targets(inv, parse_targets((), all_hosts=True))] == [
        "gpu-1", "gpu-2", "gpu-3", "gpu-4"]


def test_unknown_names_on_the_command_line_are_all_reported() -> None:
    inv = fleet_inventory({"prod": ["gpu-1"]})
    with pytest.raises(ConfigError) as exc:
        resolve_targets(inv, parse_targets(("group", "staging", "host", "gpu-9", "gpu-1")))
    assert "no group 'staging'" in exc.value.what and "known: prod" in exc.value.what
    assert "no host 'gpu-9'" in exc.value.what


@pytest.mark.parametrize(("groups", "needle"), [
    ({"prod": ["gpu-1", "gpu-1"]}, "groups.prod: 'gpu-1' is listed twice"),
    ({"gpu-1": ["gpu-2"]}, "groups.gpu-1: the name is also a host's"),
    ({"a": ["b"], "b": ["c"], "c": ["a"]}, "cycle a → b → c → a"),
    ({"group": ["gpu-1"]}, "'group' is a command keyword"),
])
def test_bad_groups_are_refused_naming_group_and_member(groups: dict[str, list[str]], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        fleet_inventory(groups)


def deploy(*args: str, inventory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", "--inventory", str(inventory), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


@pytest.fixture
def inv_dir(tmp_path: Path) -> Path:
    d = tmp_path / "inventory"
    shutil.copytree(EXAMPLE_INVENTORY, d)
    return d


def test_a_group_naming_an_unknown_host_is_refused_when_targeted() -> None:
    inv = fleet_inventory({"prod": ["gpu-1", "gpu-7"], "lab": ["gpu-2"]})  # loads: gpu-7 may be gone for now
    with pytest.raises(ConfigError) as exc:
        inv.group_hosts("prod")
    assert exc.value.what.startswith("group 'prod' names host(s) the inventory does not have: 'gpu-7'")
    assert "nothing was contacted" in (exc.value.fix or "")
    assert [h.name for h in inv.group_hosts("lab")] == ["gpu-2"]


def test_group_with_an_unknown_host_in_yaml_is_exit_2_naming_group_and_host(inv_dir: Path) -> None:
    (inv_dir / "groups.yaml").write_text("groups:\n  prod: [pve-gpu-1, pve-gpu-9]\n")
    res = deploy("status", "group", "prod", inventory=inv_dir)
    assert res.returncode == 2, res.stderr
    assert "group 'prod' names host(s) the inventory does not have: 'pve-gpu-9'" in res.stderr
    assert res.stderr.count("error:") == 1


def test_a_groups_file_naming_hosts_that_are_gone_breaks_no_other_command(inv_dir: Path) -> None:
    """Issue 25 item 11: after `deploy sim down` removed sim.yaml, a hand-written groups file still names sim-1."""
    (inv_dir / "groups.yaml").write_text("groups:\n  lab: [sim-1, sim-2]\n")
    fixtures = H200_NVLINK
    res = deploy("render", "host", "pve-gpu-1", "--devices-file", str(fixtures / "ls-dev-nvidia.txt"),
                 "--proc-devices-file", str(fixtures / "proc-devices.txt"), inventory=inv_dir)
    assert res.returncode == 0, res.stderr


def test_single_host_commands_refuse_fleet_targets(inv_dir: Path) -> None:
    (inv_dir / "groups.yaml").write_text("groups:\n  prod: [pve-gpu-1]\n")
    res = deploy("smoke", "group", "prod", inventory=inv_dir)
    assert res.returncode == 2
    assert "this command takes one host, got group prod" in res.stderr and "up, plan, status" in res.stderr
    assert "roll, rollback" in res.stderr  # fleet rolls: tests/unit/test_fleet_rollout.py, tests/e2e


def test_up_without_a_target_and_a_fleet_with_a_bad_name_change_nothing(inv_dir: Path) -> None:
    res = deploy("up", inventory=inv_dir)
    assert res.returncode == 2 and "no host given" in res.stderr
    res = deploy("--json", "up", "host", "pve-gpu-1", "nope", inventory=inv_dir)
    assert res.returncode == 2
    assert "no host 'nope'" in res.stdout and '"exit_code": 2' in res.stdout
