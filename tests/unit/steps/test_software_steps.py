"""Steps inside the container: driver_userspace, sglang_install, model_weights (and plans on a stopped CT)."""

from __future__ import annotations

import pytest

from orchestrator.errors import CheckFailed
from tests.unit.steps.conftest import out

KERNEL = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.58.03  Release Build  Mon Feb 2 2026\n"
INSTALLER = "/root/NVIDIA-Linux-x86_64-595.58.03.run"
VENV_PY = "/root/ml-env/bin/python"


def gpus(version: str) -> str:
    """The container's one nvidia-smi answer (CT_GPU_QUERY) for one GPU with this userspace version."""
    return (f"index, uuid, name, pci.bus_id, driver_version\n"
            f"0, GPU-1, NVIDIA RTX PRO 6000, 00000000:01:00.0, {version}\n")


def test_driver_userspace_that_matches_the_kernel_module_changes_nothing(make_run) -> None:
    run = make_run({"driver_version": KERNEL, "installer": "present\n"}, {"gpus": gpus("595.58.03")})
    rec = run.step("driver_userspace")
    assert rec.status == "ok" and "= host kernel module 595.58.03" in rec.summary
    assert run.node.calls == []


def test_driver_userspace_mismatch_pushes_and_runs_the_installer_without_kernel_modules(make_run) -> None:
    mismatch = out("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.65\n", 18)
    run = make_run({"driver_version": KERNEL, "installer": "present\n"}, {"gpus": mismatch})
    run.node.ct_after = {"gpus": gpus("595.58.03")}
    run.node.succeed("deploy-nvidia-userspace.run --silent")
    rec = run.step("driver_userspace")
    assert rec.status == "changed" and rec.changes == ["install NVIDIA userspace 595.58.03 in CT 120 (was 580.65)"]
    [script] = run.node.commands("script")
    lines = script.splitlines()
    assert lines[0] == "set -e"
    assert lines[1] == f"pct push 120 {INSTALLER} /tmp/deploy-nvidia-userspace.run --perms 0700"
    # nvidia-installer's own option names: userspace only, no question, no UI, the license accepted.
    assert lines[2] == ("pct exec 120 -- sh /tmp/deploy-nvidia-userspace.run --silent --no-kernel-module "
                        "--no-questions --ui=none --accept-license")
    assert lines[3] == "pct exec 120 -- rm -f /tmp/deploy-nvidia-userspace.run"
    assert rec.summary == "installed userspace 595.58.03 (= host 595.58.03)"


def test_driver_userspace_mismatch_without_an_installer_stops_with_the_fix(make_run) -> None:
    run = make_run({"driver_version": KERNEL, "installer": "none\n"}, {"gpus": out("", 127)})
    with pytest.raises(CheckFailed) as err:
        run.step("driver_userspace")
    assert "NVIDIA-Linux-x86_64-595.58.03.run" in (err.value.fix or "")
    assert run.node.calls == []


def test_sglang_at_the_pinned_version_is_not_reinstalled(make_run) -> None:
    run = make_run({}, {"sglang_version": "0.5.12.post1\n"})
    rec = run.step("sglang_install")
    assert rec.status == "ok" and run.node.calls == []


def test_missing_sglang_is_pip_installed_in_the_venv_inside_the_container(make_run) -> None:
    run = make_run({}, {"sglang_version": out("", 1, "ModuleNotFoundError: No module named 'sglang'")})
    run.node.ct_after = {"sglang_version": "0.5.12.post1\n"}
    run.node.succeed("pip install")
    rec = run.step("sglang_install")
    assert rec.status == "changed" and rec.summary == "installed sglang 0.5.12.post1"
    [pip] = run.node.commands("run")
    assert pip.startswith("pct exec 120 -- bash -c ")
    assert "python3 -m venv /root/ml-env" in pip and "sglang==0.5.12.post1" in pip


def test_plan_on_a_stopped_container_defers_inside_checks_instead_of_predicting_reinstalls(make_run) -> None:
    run = make_run({"driver_version": KERNEL, "installer": "present\n", "ct_status": "status: stopped\n"},
                   None, dry_run=True, skip_weights=True)
    for name in ("ct_packages", "driver_userspace", "sglang_install", "model_weights", "server_unit"):
        rec = run.step(name)
        assert rec.status == "skipped", (name, rec.summary)
        assert rec.changes == [] and "CT 120 is stopped" in rec.summary
    assert run.node.calls == []


def test_plan_on_an_absent_container_still_predicts_the_installs(make_run) -> None:
    run = make_run({"driver_version": KERNEL, "installer": "present\n", "ct_status": out("", 2)}, None,
                   dry_run=True)
    assert run.step("sglang_install").status == "would-change"
    assert run.step("driver_userspace").status == "would-change"


def test_driver_userspace_still_mismatched_after_the_installer_is_a_check_failure(make_run) -> None:
    mismatch = out("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.65\n", 18)
    run = make_run({"driver_version": KERNEL, "installer": "present\n"}, {"gpus": mismatch})
    run.node.ct_after = {"gpus": mismatch}  # the .run "succeeded" but left the old userspace
    run.node.succeed("deploy-nvidia-userspace.run --silent")
    with pytest.raises(CheckFailed) as err:
        run.step("driver_userspace")
    assert "after installing, the container userspace is 580.65, host is 595.58.03" in err.value.what
    assert [c.what for c in run.node.calls] == ["NVIDIA userspace install", "re-reading container facts"]
