"""sglang_install against what a lock and the profile's constraints were made for (issue 48 items 7 and 8): a lock
resolved for another Python is refused before any build, naming both and the fix; a venv that breaks the profile's
constraints is not adopted as the constrained stack."""

from __future__ import annotations

import pytest

from orchestrator.errors import ConfigError
from orchestrator.stack_lock import Lock, LockEntry, LockTarget, render_lock
from tests.unit.steps.test_provision_steps import with_profile
from tests.unit.steps.test_software_steps import BARE_SHA, BASE_SHA, pip_succeeds

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
