"""What a stack was made for, before anything is built (issue 48 items 3, 7 and 8): a lock resolved for another Python
is refused naming both and the fix; a venv that breaks the profile's constraints is not adopted as the constrained
stack; a host driver older than the stack's CUDA needs fails doctor and host_prereqs."""

from __future__ import annotations

import pytest

from orchestrator.errors import CheckFailed, ConfigError
from orchestrator.stacks.lock import Lock, LockEntry, LockTarget, render_lock
from tests.unit.steps.conftest import with_container
from tests.unit.steps.test_provision_steps import with_profile
from tests.unit.steps.test_software_steps import BARE_SHA, BASE_SHA, pip_succeeds, stack_line

A = "a" * 64
CP311 = LockTarget("cpython", "3.11", "linux", "x86_64")


def locked(run, target: LockTarget | None = CP311):
    text = render_lock(Lock((LockEntry("sglang", "0.5.12.post1", A),)), profile="glm5-nvfp4",
                       requirement="sglang==0.5.12.post1", index="", host="sim-1", at="2026-12-07T00:00:00+00:00",
                       target=target, constraints=("kernels<0.15",))
    return with_profile(run, lock_text=text, lock_file="/inv/locks/glm5-nvfp4.txt")


def test_a_lock_of_another_python_is_refused_before_any_build_naming_both_and_the_fix(make_run) -> None:
    run = locked(make_run({}, {"sglang_version": "0.5.12.post1\n", "python_target": "cpython 3.13 linux x86_64\n"}))
    with pytest.raises(ConfigError) as err:
        run.step("sglang_install")
    assert err.value.what.startswith("/inv/locks/glm5-nvfp4.txt was resolved for cp311 (cpython 3.11, linux x86_64), "
                                     "but CT 120's python3 is cp313 (cpython 3.13, linux x86_64)"), err.value.what
    assert "nothing was built" in err.value.what and err.value.exit_code == 2
    assert "deploy lock glm5-nvfp4 --host H` on a host of cp313" in err.value.fix
    assert not [c for c in run.node.commands("run") if "pip install" in c]


@pytest.mark.parametrize("target", [CP311, None])
def test_a_lock_of_this_python_or_of_an_unknown_one_builds(make_run, target: LockTarget | None) -> None:
    run = locked(make_run({}, {"sglang_version": "0.5.12.post1\n", "python_target": "cpython 3.11 linux x86_64\n"}),
                 target)
    pip_succeeds(run, "0.5.12.post1")
    rec = run.step("sglang_install")
    assert rec.status == "changed" and rec.summary.startswith("built stack "), rec.summary
    assert any("--require-hashes" in c for c in run.node.commands("run"))


def test_a_venv_that_breaks_the_constraints_is_not_adopted_as_the_constrained_stack(make_run) -> None:
    run = make_run({}, {"sglang_version": "0.5.12.post1\n",
                        "venv_dists": "kernels-0.19.1.dist-info\nsglang-0.5.12.post1.dist-info\n"})
    pip_succeeds(run, "0.5.12.post1")
    rec = run.step("sglang_install")
    assert rec.details["unmet_constraints"] == ["kernels 0.19.1 (constraint kernels<0.15)"]
    assert rec.summary == f"built stack {BASE_SHA} (sglang 0.5.12.post1) in /opt/deploy/stacks/{BASE_SHA}"
    adopt = next(c for c in run.node.commands("script") if "record stack" in c or ".json.tmp" in c)
    assert f"/opt/deploy/stacks/{BARE_SHA}.json" in adopt  # the venv as pip filled it: the bare stack, kept


def test_a_venv_that_meets_the_constraints_is_adopted_with_no_pip_run(make_run) -> None:
    run = make_run({}, {"sglang_version": "0.5.12.post1\n",
                        "venv_dists": "kernels-0.14.1.dist-info\nsglang-0.5.12.post1.dist-info\n"})
    run.node.succeed(".json.tmp")
    rec = run.step("sglang_install")
    assert rec.summary == f"adopt /root/ml-env (sglang 0.5.12.post1) as stack {BASE_SHA}"
    assert not [c for c in run.node.commands("run") if "pip install" in c]


def nvrm(version: str) -> str:
    return f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  Mon Feb 2 2026\n"


def test_doctor_and_host_prereqs_name_a_driver_too_old_for_the_stack_before_anything_is_built(make_run) -> None:
    run = make_run({"driver_version": nvrm("575.57.08")})
    run.step("doctor")
    (found,) = [f for f in run.ctx.state.doctor_findings if f.check == "stack-cuda"]
    assert found.status == "fail" and "older than R580" in found.observed
    run = make_run({"driver_version": nvrm("575.57.08")})
    with pytest.raises(CheckFailed) as err:
        run.step("host_prereqs")
    assert "stack-cuda" in err.value.what and "older than R580" in err.value.what, err.value.what
    run = with_profile(make_run({"driver_version": nvrm("595.58.03")}), sglang_version="0.5.23")
    run.step("doctor")
    (found,) = [f for f in run.ctx.state.doctor_findings if f.check == "stack-cuda"]
    assert found.status == "ok" and "torch 2.14.1" in found.observed


def test_a_stack_change_is_refused_before_its_build_when_the_host_driver_is_older_than_its_cuda(make_run) -> None:
    """`up`, `roll --profile` and fleet staging all build through sglang_install: a 0.5.23 stack (torch 2.14.1,
    CUDA 13) on a 575 host is refused before pip runs."""
    run = with_profile(make_run({"driver_version": nvrm("575.57.08")}, {"sglang_version": "0.5.12.post1\n"}),
                       sglang_version="0.5.23")
    with pytest.raises(CheckFailed) as err:
        run.step("sglang_install")
    assert err.value.what.startswith("driver 575.57.08 is older than R580, which CUDA 13.0.3 of the stack's torch "
                                     "2.14.1 (sglang 0.5.23 pins torch==2.14.1) needs"), err.value.what
    assert err.value.what.endswith("; nothing was built") and "branch 580 or newer" in err.value.fix
    assert not [c for c in run.node.commands("run") if "pip install" in c]


STOCK = ('{"cc": null, "cxx": null, "python_h": null, "include": "/usr/include/python3.11", "nvcc": null, '
         '"cuda_home": null}\n')


def test_doctor_shows_what_the_container_lacks_for_a_first_start_and_plan_records_it(make_run) -> None:
    run = make_run({"driver_version": nvrm("595.58.03")}, {"toolchain": STOCK})
    run.step("doctor")
    (found,) = [f for f in run.ctx.state.doctor_findings if f.check == "ct-toolchain"]
    assert found.status == "warn" and "a C compiler" in found.observed and "nvcc" in found.observed
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "toolchain": STOCK,
                        "stacks": stack_line(BASE_SHA, "/root/ml-env")})
    rec = run.step("sglang_install")
    assert len(rec.details["toolchain_missing"]) == 4


def test_doctor_shows_where_the_caches_live_and_warns_when_room_is_low(make_run) -> None:
    """Issue 48 items 5 and 6: doctor's kernel-cache row names the configured cache root, its filesystem and free
    space, and the pip cache beside the stacks."""
    pip = ("path\t/opt/deploy/stacks/.pip-cache\n"
           "df\t/dev/loop0 ext4 100000000000 10000000000 90000000000 10% /\ndu\t4000000000\nentry\thttp-v2\n")
    run = make_run({"driver_version": nvrm("595.58.03")}, {"toolchain": STOCK, "pip_cache_usage": pip})
    run.step("doctor")
    (found,) = [f for f in run.ctx.state.doctor_findings if f.check == "kernel-cache"]
    assert found.status == "ok" and found.observed.startswith("/var/lib/deploy/kernel-cache/120 (the default, ")
    assert "pip cache /opt/deploy/stacks/.pip-cache 4.0 GB" in found.observed
    full = ("path\t/tank/kc/120\ndf\ttank/kc zfs 100000000000 99000000000 1000000000 99% /tank\ndu\t90000000000\n"
            "entry\ta-b\n")
    run = with_container(make_run({"driver_version": nvrm("595.58.03"), "kernel_cache_usage": full}),
                         kernel_cache="/tank/kc/120")
    run.step("doctor")
    (found,) = [f for f in run.ctx.state.doctor_findings if f.check == "kernel-cache"]
    assert found.status == "warn" and found.observed.startswith("/tank/kc/120 (container.kernel_cache) on tank/kc")
    assert "1.0 GB free of 100.0 GB" in found.observed and "container.kernel_cache" in found.fix
