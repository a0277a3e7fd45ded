"""Playbook loader: shipped playbooks list the agreed steps; mistakes name the file, the item and the choices."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.playbooks import StepRef, available_playbooks, load_playbook

UP = ["connect", "lock", "cluster", "host_prereqs", "boot_nodes", "power_limit", "container", "ct_packages",
      "driver_userspace", "container_gpus",
      "sglang_install", "model_weights", "verify_p2p", "server_unit", "health", "smoke", "correctness", "throughput",
      "release_verdict", "watchdog", "unlock"]
ROLL = ["connect", "lock", "roll_stack", "resolve_release", "validate_flags", "install_release", "health", "smoke",
        "correctness", "throughput", "gate", "unlock"]
VALID: dict[str, object] = {name: object() for name in {*UP, *ROLL}}


def test_shipped_playbooks() -> None:
    assert {"up", "roll", "verify-p2p"} <= set(available_playbooks())
    assert load_playbook("up", VALID).step_names == UP
    assert load_playbook("roll", VALID).step_names == ROLL
    assert load_playbook("up", VALID).description


def test_every_shipped_playbook_resolves_against_the_real_step_registry() -> None:
    from orchestrator.steps import load_all_steps

    registry = load_all_steps()
    for name in available_playbooks():
        assert load_playbook(name, registry).step_names
    p2p = load_playbook("verify-p2p", registry)
    assert p2p.step_names == ["connect", "verify_p2p", "p2p_bandwidth"]


def test_provision_is_up_without_anything_that_runs_a_server() -> None:
    """The site-template playbook: every install step of `up`, in `up`'s order, and no unit, server or release."""
    from orchestrator.steps import load_all_steps

    steps = load_playbook("provision", load_all_steps()).step_names
    assert steps == [s for s in UP if s in steps]
    assert {"ct_packages", "driver_userspace", "sglang_install", "model_weights"} <= set(steps)
    assert not {"server_unit", "health", "smoke", "throughput", "release_verdict"} & set(steps)
    assert steps[:2] == ["connect", "lock"] and steps[-1] == "unlock"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    return path


def test_unknown_step_lists_valid_steps_and_close_match(tmp_path: Path) -> None:
    path = write(tmp_path, "name: mine\nsteps:\n  - connect\n  - helth\n")
    with pytest.raises(ConfigError) as exc:
        load_playbook(path, VALID)
    err = exc.value
    assert "step 2" in err.what and "'helth'" in err.what and str(path) in err.what
    assert "did you mean health?" in err.fix
    assert err.details["valid_steps"] == sorted(VALID)
    assert ", ".join(sorted(VALID)) in err.fix
    assert err.exit_code == 2


def test_options_and_marked_duplicates(tmp_path: Path) -> None:
    path = write(tmp_path, "name: mine\ndescription: d\nsteps:\n  - connect\n  - {step: health, timeout_s: 60}\n"
                           "  - smoke\n  - {step: health, allow_duplicate: true}\n")
    pb = load_playbook(str(path), VALID)
    assert pb.steps == [StepRef("connect"), StepRef("health", {"timeout_s": 60}), StepRef("smoke"), StepRef("health")]


@pytest.mark.parametrize("text, needle", [
    ("name: mine\nsteps:\n  - health\n  - health\n", "appears twice"),
    ("name: mine\nsteps: []\n", "non-empty list"),
    ("steps: [connect]\n", "'name'"),
    ("name: mine\nstep: [connect]\n", "unknown key"),
    ("name: mine\nsteps:\n  - {timeout_s: 3}\n", "needs 'step"),
    ("name: mine\nsteps:\n  - 42\n", "expected a step name"),
    ("name: [unclosed\n", "not valid YAML"),
])
def test_malformed_playbooks(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_playbook(write(tmp_path, text), VALID)
    assert needle in exc.value.what


def test_missing_playbook_names_shipped_ones() -> None:
    with pytest.raises(ConfigError) as exc:
        load_playbook("nope", VALID)
    assert "up" in exc.value.what and "roll" in exc.value.what
