"""Steps inside the container: driver_userspace, sglang_install, model_weights (and plans on a stopped CT)."""

from __future__ import annotations

import pytest

from orchestrator.errors import CheckFailed
from orchestrator.stacks.stack import Stack, StackRecord
from tests.unit.steps.conftest import out
from tests.unit.steps.test_provision_steps import with_profile

KERNEL = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.58.03  Release Build  Mon Feb 2 2026\n"
INSTALLER = "/root/NVIDIA-Linux-x86_64-595.58.03.run"
VENV_PY = "/root/ml-env/bin/python"
#: The shipped profile's constraints (pins below sglang): part of its stack's identity.
CONSTRAINTS = ("kernels<0.15",)
#: The shipped profile's stack (sglang==0.5.12.post1, no extras, pip's default index): its sha on every host.
BASE_SHA = Stack("sglang==0.5.12.post1", "0.5.12.post1", constraints=CONSTRAINTS).sha
#: What pip filled without the profile's constraints (an older venv adopted as it is).
BARE_SHA = Stack("sglang==0.5.12.post1", "0.5.12.post1").sha


def pip_succeeds(run, version: str) -> None:
    """pip installs, pip's record then names `version`, and the stack's record is written."""
    run.node.answer("dist-info/METADATA", f"{version}\n")
    run.node.succeed("pip install", ".json.tmp")


def stack_line(sha: str, venv: str, version: str = "0.5.12.post1", adopted: bool = True,
               built_at: str = "2026-12-01T00:00:00+00:00", installed: str | None = None) -> str:
    """One line of CT.stacks: the record's JSON, TAB, the version pip's record in its venv names now."""
    rec = StackRecord(sha, venv, version, f"sglang=={version}", adopted, built_at)
    return f"{rec.record_json()}\t{installed if installed is not None else version}\n"


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
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "stacks": stack_line(BASE_SHA, "/root/ml-env")})
    rec = run.step("sglang_install")
    assert rec.status == "ok" and run.node.calls == []
    assert rec.summary == f"stack {BASE_SHA} (sglang 0.5.12.post1) in /root/ml-env"


def test_missing_sglang_is_pip_installed_in_the_venv_inside_the_container(make_run) -> None:
    run = make_run({}, {"sglang_version": out("", 1, "ModuleNotFoundError: No module named 'sglang'")})
    pip_succeeds(run, "0.5.12.post1")
    rec = run.step("sglang_install")
    assert rec.status == "changed"
    assert rec.summary == f"installed sglang 0.5.12.post1 (stack {BASE_SHA} in /root/ml-env)"
    pip, _version = run.node.commands("run")
    assert pip.startswith("pct exec 120 -- bash -c ")
    assert "python3 -m venv /root/ml-env" in pip and "sglang==0.5.12.post1" in pip
    [record] = run.node.commands("script")
    assert f"/opt/deploy/stacks/{BASE_SHA}.json" in record and '"adopted": true' in record


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


# --------------------------------------------------------------------------------------- stacks side by side
NEW_SHA = Stack("sglang==0.5.23", "0.5.23", constraints=CONSTRAINTS).sha


def test_a_changed_pin_builds_a_new_stack_beside_the_running_venv_and_adopts_the_old_one(make_run) -> None:
    """Issue 35: the old single venv is adopted as the stack it holds (kept, never upgraded in place); the new one
    is built under /opt/deploy/stacks/<sha> while the server runs (no systemctl in any command)."""
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "stacks": out("", 0)})
    with_profile(run, sglang_version="0.5.23")
    pip_succeeds(run, "0.5.23")
    rec = run.step("sglang_install")
    assert rec.status == "changed"
    assert rec.summary == f"built stack {NEW_SHA} (sglang 0.5.23) in /opt/deploy/stacks/{NEW_SHA}"
    adopt, record = run.node.commands("script")
    assert f"/opt/deploy/stacks/{BARE_SHA}.json" in adopt and '"venv": "/root/ml-env"' in adopt
    assert f"/opt/deploy/stacks/{NEW_SHA}.json" in record and '"adopted": false' in record
    pip, _version = run.node.commands("run")
    assert f"rm -rf /opt/deploy/stacks/{NEW_SHA} && " in pip and "/root/ml-env" not in pip
    assert f"/opt/deploy/stacks/{NEW_SHA}/bin/pip install " in pip and "sglang==0.5.23" in pip
    assert not run.node.sent("systemctl")
    assert run.ctx.state.stack is not None and run.ctx.state.stack.venv == f"/opt/deploy/stacks/{NEW_SHA}"


def test_a_stack_built_before_is_reused_with_no_pip_run(make_run) -> None:
    listing = (stack_line(BASE_SHA, "/root/ml-env")
               + stack_line(NEW_SHA, f"/opt/deploy/stacks/{NEW_SHA}", "0.5.23", adopted=False))
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "stacks": listing})
    with_profile(run, sglang_version="0.5.23")
    rec = run.step("sglang_install")
    assert rec.status == "ok" and run.node.calls == []
    assert run.ctx.state.stack is not None and run.ctx.state.stack.venv == f"/opt/deploy/stacks/{NEW_SHA}"


def test_a_recorded_stack_whose_venv_is_gone_is_built_again(make_run) -> None:
    listing = (stack_line(BASE_SHA, "/root/ml-env")
               + stack_line(NEW_SHA, f"/opt/deploy/stacks/{NEW_SHA}", "0.5.23", adopted=False, installed=""))
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "stacks": listing})
    with_profile(run, sglang_version="0.5.23")
    pip_succeeds(run, "0.5.23")
    rec = run.step("sglang_install")
    assert rec.status == "changed" and rec.summary.startswith(f"built stack {NEW_SHA} ")


def test_a_build_prunes_beyond_keep_stacks_but_not_the_current_release_stack(make_run) -> None:
    olds = [Stack(f"sglang==0.5.{n}", f"0.5.{n}").sha for n in (1, 2, 3)]
    listing = stack_line(BASE_SHA, "/root/ml-env") + "".join(
        stack_line(sha, f"/opt/deploy/stacks/{sha}", "0.5.23", adopted=False, built_at=f"2026-11-0{i + 1}")
        for i, sha in enumerate(olds))
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "stacks": listing})
    with_profile(run, sglang_version="0.5.23", keep_stacks=2)
    run.node.answer("dist-info/METADATA", "0.5.23\n")
    run.node.succeed("pip install")
    releases = ('{"current":"20261101T000000-aaaaaaaa"}\n'
                f'{{"id":"20261101T000000-aaaaaaaa","meta":{{"stack":{{"sha":"{olds[0]}"}}}},"verdict":null}}\n')
    run.node.answer(".json.tmp", releases)
    run.node.succeed("rm -f /opt/deploy/stacks/")
    rec = run.step("sglang_install")
    assert rec.details["pruned"] == [olds[1]]  # newest two kept (the new one, olds[2]); olds[0] is current's
    prune = run.node.commands("run")[-1]
    assert prune == (f"pct exec 120 -- bash -c 'rm -f /opt/deploy/stacks/{olds[1]}.json && "
                     f"rm -rf /opt/deploy/stacks/{olds[1]} /var/cache/deploy/kernels/{olds[1]}-*'")


def test_a_plan_names_the_stack_it_would_build_and_changes_nothing(make_run) -> None:
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "stacks": stack_line(BASE_SHA, "/root/ml-env")},
                   dry_run=True)
    with_profile(run, sglang_version="0.5.23")
    rec = run.step("sglang_install")
    assert rec.status == "would-change" and run.node.calls == []
    assert rec.summary.startswith(f"build stack {NEW_SHA} (sglang==0.5.23) in /opt/deploy/stacks/{NEW_SHA} while")


def test_a_site_template_venv_recorded_from_another_index_is_adopted_not_rebuilt(make_run) -> None:
    """A container created from a site template holds the record its provisioning host wrote (another index URL,
    so another sha): the same requirement in the profile's venv is adopted under this host's stack, no pip run."""
    other = Stack("sglang==0.5.12.post1", "0.5.12.post1", " --index-url http://10.9.0.3:3141/simple").sha
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "stacks": stack_line(other, "/root/ml-env")})
    run.node.succeed(".json.tmp")
    rec = run.step("sglang_install")
    assert rec.status == "changed" and rec.summary == f"adopt /root/ml-env (sglang 0.5.12.post1) as stack {BASE_SHA}"
    assert not run.node.sent("pip install")


def test_a_build_uses_the_managed_pip_cache_and_the_budget_empties_it_before_any_stack(make_run) -> None:
    """Issue 48 item 5: the build's pip run writes its wheels to the managed pip cache beside the stacks (not root's
    ~/.cache/pip); over the budget, that cache is emptied first, and what the budget counted and pruned is typed
    in the step's details (`up`/`roll --json`)."""
    old = Stack("sglang==0.5.1", "0.5.1").sha
    listing = stack_line(BASE_SHA, "/root/ml-env") + stack_line(old, f"/opt/deploy/stacks/{old}", "0.5.1",
                                                                 adopted=False, built_at="2026-11-01")
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "stacks": listing})
    with_profile(run, sglang_version="0.5.23", stacks_disk_budget_gb=1)
    pip_succeeds(run, "0.5.23")
    releases = ('{"current":"20261101T000000-aaaaaaaa"}\n'
                f'{{"id":"20261101T000000-aaaaaaaa","meta":{{"stack":{{"sha":"{old}"}}}},"verdict":null}}\n')
    sizes = f"{BASE_SHA}\t300000000\n{old}\t200000000\n{NEW_SHA}\t300000000\n"
    run.node.answer(".json.tmp", releases + "__DEPLOY_STACK_SIZES__\n" + sizes + "pip-cache\t400000000\n")
    run.node.answer("rm -rf /opt/deploy/stacks/.pip-cache", sizes)
    said: list[str] = []
    run.ctx.say = said.append
    rec = run.step("sglang_install")
    assert rec.status == "changed"
    build = next(c for c in run.node.commands("run") if "bin/pip install" in c)
    assert f"PIP_CACHE_DIR=/opt/deploy/stacks/.pip-cache /opt/deploy/stacks/{NEW_SHA}/bin/pip install " in build
    prune = run.node.commands("run")[-1]
    assert prune.startswith("pct exec 120 -- bash -c 'rm -rf /opt/deploy/stacks/.pip-cache && if cd "), prune
    assert "pruned" not in rec.details  # 800 MB of stacks fit 1 GB once the 400 MB of cache are gone
    budget = rec.details["disk_budget"]
    assert budget["counted"]["pip_cache_bytes"] == 400_000_000 and budget["counted"]["total_bytes"] == 1_200_000_000
    assert budget["pruned"] == {"stacks": [], "pip_cache_bytes": 400_000_000, "total_bytes": 400_000_000}
    assert budget["kept"]["total_bytes"] == 800_000_000 and budget["over"] is False
    assert "emptied the pip cache /opt/deploy/stacks/.pip-cache (keep_stacks 3, stacks_disk_budget_gb 1), " \
           "400,000,000 bytes freed" in said, said
    kept = ", ".join(f"{sha} {n} bytes" for sha, n in sorted(
        {BASE_SHA: "300,000,000", NEW_SHA: "300,000,000", old: "200,000,000"}.items()))
    assert said[-1] == f"kept stacks: {kept}; pip cache 0 bytes; 800,000,000 bytes of a budget of 1,000,000,000"
