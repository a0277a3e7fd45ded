"""The operator's `health:` policy (inventory) and what `deploy watch` may do under it (hardware/policy.py):
a reboot is never automatic unless enabled and never while another host is out; a failed remap keeps the host
out; a restart-class Xid is restarted unless the policy says not to; the section is validated like the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.hardware.catalog import Action
from orchestrator.hardware.policy import plan_remedy
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import HealthPolicy

DEFAULT = HealthPolicy()
REBOOT = HealthPolicy(reboot=True)


def test_defaults_restart_by_itself_and_never_reboot() -> None:
    assert (DEFAULT.restart, DEFAULT.reboot, DEFAULT.isolate) == (True, False, True)
    assert plan_remedy(Action.none, DEFAULT, host="h").remedy == "none"
    assert plan_remedy(Action.restart_unit, DEFAULT, host="h").remedy == "restart"
    manual = plan_remedy(Action.reboot_host, DEFAULT, host="h")
    assert manual.remedy == "manual" and manual.drains and not manual.runs
    assert "a reboot is not automatic (health.reboot: false)" in manual.why
    assert "`health: {reboot: true}`" in manual.why


def test_a_reboot_is_allowed_only_while_no_other_host_is_out() -> None:
    assert plan_remedy(Action.reboot_host, REBOOT, host="h").remedy == "reboot"
    wait = plan_remedy(Action.reboot_host, REBOOT, host="h", others_out=["sim-2"])
    assert wait.remedy == "wait" and wait.drains and not wait.runs
    assert "sim-2 is out of the router too" in wait.why


def test_isolate_keeps_the_host_out_even_where_reboots_are_allowed() -> None:
    keep = plan_remedy(Action.isolate_gpu, REBOOT, host="h", gpu="GPU 3 (00000000:76:00.0)")
    assert keep.remedy == "keep_out" and keep.drains and not keep.runs
    assert "GPU 3 (00000000:76:00.0) cannot be repaired in place" in keep.why
    off = plan_remedy(Action.isolate_gpu, HealthPolicy(isolate=False), host="h")
    assert off.remedy == "report" and not off.drains


def test_restart_off_only_reports() -> None:
    plan = plan_remedy(Action.restart_unit, HealthPolicy(restart=False), host="h")
    assert plan.remedy == "report" and not plan.drains and "health.restart is false" in plan.why


def _inventory(tmp_path: Path, health: str) -> Path:
    from orchestrator.inventory.example import write_example

    inv = tmp_path / "inv"
    inv.mkdir(parents=True)
    write_example(inv)
    (inv / "health.yaml").write_text(health)
    return inv


def test_the_section_loads_and_a_typo_is_refused(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, "health:\n  reboot: true\n  reboot_timeout_s: 300\n"))
    assert inv.health.reboot is True and inv.health.reboot_timeout_s == 300 and inv.health.restart is True
    with pytest.raises(ConfigError) as err:
        load_inventory(_inventory(tmp_path / "b", "health:\n  reboots: true\n"))
    assert "health.yaml: line 2: health.reboots: unknown key" in err.value.what
    assert "did you mean 'reboot'" in err.value.fix
    with pytest.raises(ConfigError) as err:
        load_inventory(_inventory(tmp_path / "c", "health:\n  reboot: sometimes\n"))
    assert "health.reboot" in err.value.what
