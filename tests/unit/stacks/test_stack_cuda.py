"""The host driver against the stack's CUDA (issue 48 item 3): the torch the stack pins (its lock's, else its
sglang release's) → the CUDA its wheel requires → the oldest driver branch that runs it, judged by doctor, plan and
up (host_prereqs) before anything is built. The tables are checked against the real wheels' metadata
(tests/fixtures/torch/, tests/fixtures/sglang/wheels/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.stacks.lock import Lock, LockEntry, render_lock
from orchestrator.verdicts.cuda import SGLANG_TORCH, TORCH_CUDA, stack_cuda, stack_driver_finding

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
A = "a" * 64


@pytest.mark.parametrize("torch", sorted(TORCH_CUDA))
def test_the_torch_table_is_what_the_torch_wheels_require(torch: str) -> None:
    text = (FIXTURES / "torch" / f"torch-{torch}-requires-dist.txt").read_text()
    assert text.startswith(f"# torch {torch}: torch-{torch}-cp311")
    (pin,) = re.findall(r"^cuda-toolkit\[[^\]]*\]==(\S+); platform_system == \"Linux\"$", text, re.M)
    assert TORCH_CUDA[torch] == pin


@pytest.mark.parametrize("sglang", sorted(SGLANG_TORCH))
def test_the_sglang_table_is_what_the_sglang_wheels_pin(sglang: str) -> None:
    text = (FIXTURES / "sglang" / "wheels" / sglang / "requires-torch-kernels.txt").read_text()
    assert f"Requires-Dist: torch=={SGLANG_TORCH[sglang]}\n" in text


def test_both_known_stacks_are_cuda_13_and_need_r580() -> None:
    for version, torch in (("0.5.12.post1", "2.11.0"), ("0.5.23", "2.14.1")):
        need = stack_cuda(version)
        assert need is not None and (need.torch, need.cuda.split(".")[0], need.min_driver) == (torch, "13", 580)
        assert need.source == f"sglang {version} pins torch=={torch}"
    assert stack_cuda("0.4.0") is None


def test_the_lock_says_which_torch_the_stack_has_when_it_pins_a_known_one() -> None:
    def lock(torch: str) -> str:
        return render_lock(Lock((LockEntry("sglang", "0.5.12.post1", A), LockEntry("torch", torch, A))),
                           profile="p", requirement="sglang==0.5.12.post1", index="", host="h", at="t")

    need = stack_cuda("0.5.12.post1", lock("2.14.1"))
    assert need is not None and need.torch == "2.14.1" and need.source == "the lock pins torch==2.14.1"
    standin = stack_cuda("0.5.12.post1", lock("2.9.1+deploysim"))  # not in the table: the release's pin
    assert standin is not None and standin.source == "sglang 0.5.12.post1 pins torch==2.11.0"


def test_a_575_driver_fails_with_the_fix_and_a_580_driver_passes() -> None:
    need = stack_cuda("0.5.12.post1")
    bad = stack_driver_finding("575.57.08", need)
    assert bad is not None and bad.status == "fail" and bad.check == "stack-cuda"
    assert bad.observed.startswith("driver 575.57.08 is older than R580, which CUDA 13.0.2 of the stack's torch "
                                   "2.11.0 (sglang 0.5.12.post1 pins torch==2.11.0) needs"), bad.observed
    assert "branch 580 or newer" in bad.fix
    good = stack_driver_finding("580.159.04", need)
    assert good is not None and good.status == "ok"
    assert stack_driver_finding(None, need) is None and stack_driver_finding("575.57.08", None) is None
