"""The CUDA a stack carries is the server's CUDA_HOME (issue 48 item 2), and `plan` shows what the first start lacks.

flashinfer finds nvcc through `get_cuda_path()`: CUDA_HOME, else CUDA_PATH, else `which nvcc`, else /usr/local/cuda
(flashinfer/jit/cpp_ext.py:47-64, the same lines in the released flashinfer_python 0.6.11.post1 and 0.7.2 wheels,
sha256 52c6dbd1…d23551a and 770550a0…9c99bd8, read 2026-12-07). sglang 0.5.23 pulls nvidia-cuda-nvcc into
`site-packages/nvidia/cu13/bin`, on none of those paths, so the unit names it as CUDA_HOME and PATH stays as it is.
"""

from __future__ import annotations

import dataclasses

from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.steps.release import bundle_for
from tests.unit.steps.test_provision_steps import with_profile
from tests.unit.steps.test_software_steps import BASE_SHA, NEW_SHA, pip_succeeds, stack_line
from tests.unit.steps.test_stack_targets import STOCK

NEW_VENV = f"/opt/deploy/stacks/{NEW_SHA}"
NEW_HOME = f"{NEW_VENV}/lib/python3.11/site-packages/nvidia/cu13"
#: The check after pip: pip's record of sglang, the mark, then the nvcc the venv carries (stack_nvcc_command).
CARRIES = f"0.5.23\n__DEPLOY_STACK_NVCC__\n{NEW_HOME}/bin/nvcc\n"
#: A provisioned container (compilers and headers), no CUDA toolkit, the new stack's own nvcc.
PROVISIONED = ('{"cc": "/usr/bin/gcc", "cxx": "/usr/bin/c++", "python_h": "/usr/include/python3.11/Python.h", '
               '"include": "/usr/include/python3.11", "nvcc": null, "cuda_home": null, "stack_homes": {%s}}\n')


def unit_of(run) -> str:
    flags = canonicalize({}, FlagSchema.load(run.ctx.profile.sglang_version))  # the unit's env is what is tested
    return bundle_for(run.ctx, flags, "r1").file("sglang.service").content


def built_0523(make_run, check: str, **profile: object):
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "stacks": ""})
    with_profile(run, sglang_version="0.5.23", **profile)
    pip_succeeds(run, "0.5.23")
    run.node.answer("dist-info/METADATA", check)
    run.step("sglang_install")
    return run


def test_a_built_stack_that_carries_nvcc_gets_it_as_the_units_cuda_home(make_run) -> None:
    run = built_0523(make_run, CARRIES)
    assert run.ctx.state.stack is not None and run.ctx.state.stack.cuda_home == NEW_HOME
    check = next(c for c in run.node.commands("run") if "dist-info/METADATA" in c)
    assert f"{NEW_VENV}/lib/python3*/site-packages/nvidia/cu*/bin/nvcc" in check  # the same round trip
    unit = unit_of(run)
    assert f"\nEnvironment=CUDA_HOME={NEW_HOME}\n" in unit
    assert f"ExecStart={NEW_VENV}/bin/python -m sglang.launch_server" in unit
    assert "PATH=" not in unit.replace("PROMETHEUS", "")  # PATH is left as it is
    assert run.ctx.state.stack.to_meta()["cuda_home"] == NEW_HOME  # meta.json: a later flags roll keeps it


def test_a_stack_without_nvcc_leaves_cuda_home_unset(make_run) -> None:
    run = built_0523(make_run, "0.5.23\n__DEPLOY_STACK_NVCC__\n")
    assert run.ctx.state.stack is not None and run.ctx.state.stack.cuda_home is None
    unit = unit_of(run)
    assert "CUDA_HOME" not in unit and "cuda_home" not in run.ctx.state.stack.to_meta()


def test_the_profiles_own_cuda_home_wins_and_the_unit_sets_none(make_run) -> None:
    run = built_0523(make_run, CARRIES, env={"CUDA_HOME": "/usr/local/cuda-13.0"})
    assert "Environment=CUDA_HOME" not in unit_of(run)
    assert 'CUDA_HOME="/usr/local/cuda-13.0"' in bundle_for(
        run.ctx, canonicalize({}, FlagSchema.load("0.5.23"))).file("sglang.env").content


def test_a_stack_built_before_gets_the_cuda_the_facts_found_in_its_venv(make_run) -> None:
    listing = (stack_line(BASE_SHA, "/root/ml-env")
               + stack_line(NEW_SHA, NEW_VENV, "0.5.23", adopted=False))
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "stacks": listing,
                        "toolchain": PROVISIONED % f'"{NEW_VENV}": "{NEW_HOME}"'})
    with_profile(run, sglang_version="0.5.23")
    said: list[str] = []
    run.ctx.say = said.append
    rec = run.step("sglang_install")
    assert rec.status == "ok" and run.node.calls == []
    assert f"\nEnvironment=CUDA_HOME={NEW_HOME}\n" in unit_of(run)
    assert rec.details["toolchain_missing"] == [] and said == []  # the stack's own nvcc counts
    assert "lacks" not in rec.summary


def test_plan_text_names_each_missing_piece_with_its_fix_as_json_does(make_run) -> None:
    """The step's line says what the first start lacks, and one line each names the piece and its fix; --json has
    the same pieces and fixes in the same order."""
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "toolchain": STOCK,
                        "stacks": stack_line(BASE_SHA, "/root/ml-env")})
    said: list[str] = []
    run.ctx.say = said.append
    run.ctx.options = dataclasses.replace(run.ctx.options, dry_run=True)  # `plan`: a first start may be ahead
    rec = run.step("sglang_install")
    assert rec.summary.endswith("; the first start lacks 4: a C compiler, a C++ compiler, the Python headers, nvcc")
    assert len(said) == 4 and all(line.startswith("  toolchain: missing ") for line in said)
    assert said[0].startswith("  toolchain: missing a C compiler (CC, gcc or clang: Triton's first kernel launch): "
                              "`apt-get install gcc`")
    assert "`apt-get install python3-dev`" in said[2] and "nvidia-cuda-nvcc" in said[3]
    assert [f"  toolchain: missing {w}: {f}" for w, f in zip(rec.details["toolchain_missing"],
                                                           rec.details["toolchain_fixes"], strict=True)] == said


def test_a_converged_up_records_what_the_first_start_lacks_without_saying_it(make_run) -> None:
    """An `up` that changes nothing (its server's first start is behind it) keeps the pieces in --json only; doctor's
    ct-toolchain says them on every look."""
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "toolchain": STOCK,
                        "stacks": stack_line(BASE_SHA, "/root/ml-env")})
    said: list[str] = []
    run.ctx.say = said.append
    rec = run.step("sglang_install")
    assert rec.status == "ok" and "lacks" not in rec.summary and said == []
    assert len(rec.details["toolchain_missing"]) == len(rec.details["toolchain_fixes"]) == 4


def test_plan_of_a_stack_carrying_nvcc_lacks_only_what_apt_gives(make_run) -> None:
    """A stock container whose server stack (the profile's venv here) carries nvcc: nvcc is not missing."""
    tool = STOCK.replace('"cuda_home": null}', '"cuda_home": null, "stack_homes": {"/root/ml-env": '
                                               '"/root/ml-env/lib/python3.11/site-packages/nvidia/cu13"}}')
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "toolchain": tool,
                        "stacks": stack_line(BASE_SHA, "/root/ml-env")})
    rec = run.step("sglang_install")
    assert [w.split(" (")[0] for w in rec.details["toolchain_missing"]] == ["a C compiler", "a C++ compiler",
                                                                           "the Python headers"]


def test_doctor_counts_the_current_release_stacks_own_nvcc(make_run) -> None:
    meta = f'{{"stack": {{"sha": "{NEW_SHA}", "venv": "{NEW_VENV}", "sglang_version": "0.5.23"}}}}\n'
    run = make_run({}, {"toolchain": PROVISIONED % f'"{NEW_VENV}": "{NEW_HOME}"', "current_meta": meta})
    run.step("doctor")
    (found,) = [f for f in run.ctx.state.doctor_findings if f.check == "ct-toolchain"]
    assert found.status == "ok" and f"{NEW_HOME}/bin/nvcc, the stack's own" in found.observed
    run = make_run({}, {"toolchain": PROVISIONED % f'"{NEW_VENV}": "{NEW_HOME}"',
                        "current_meta": '{"stack": {"sha": "x", "venv": "/root/ml-env"}}\n'})
    run.step("doctor")
    (found,) = [f for f in run.ctx.state.doctor_findings if f.check == "ct-toolchain"]
    assert found.status == "warn" and "nvcc" in found.observed
