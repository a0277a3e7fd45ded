"""The stand-in's profiler traces, read by the tool's own reader: each kernel_shape gives its verdict.

The traces are written by the stand-in's code (simulator/sglang_standin/sglang/_sim/profiler.py) to files in the
real format and read back through orchestrator.profile, as `deploy profile import` reads them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from orchestrator.profile.breakdown import breakdown
from orchestrator.profile.kernels import KernelClass
from orchestrator.profile.trace import read_trace
from orchestrator.profile.verdict import COLLECTIVE_SHARE, judge
from orchestrator.verdicts.power import Diagnosis
from simulator.config import KERNEL_SHAPES

# The stand-in's module by its file (standard library only): the stand-in's `sglang` package stays off sys.path.
_SPEC = importlib.util.spec_from_file_location(
    "standin_profiler", Path(__file__).resolve().parents[3] / "simulator/sglang_standin/sglang/_sim/profiler.py")
assert _SPEC is not None and _SPEC.loader is not None
profiler = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = profiler  # its dataclasses look their module up
_SPEC.loader.exec_module(profiler)

EXPECTED = {"collective": "collective-bound", "moe": "moe-bound", "attention": "attention-bound",
            "host": "host-bound", "slow_rank": "rank-imbalanced"}
#: PROFILE_WINDOWS=40: the issue's figure (tests/perf/profile_verdicts.py measures it through the CLI)
WINDOWS = int(os.environ.get("PROFILE_WINDOWS", "10"))


def _window(tmp: Path, shape: str | None, i: int, tp: int = 4, slow: int | None = None) -> list[Path]:
    steps = [profiler.StepSpec(batch=64 + i, step_us=25_000.0 + 37.0 * i) for _ in range(3)]
    return profiler.write_traces(tmp / f"{shape}-{i}", profile_id=f"17966{i}.{shape}", prefix="w", by_stage=True,
                                 tp=tp, steps=steps, shape=shape, slow_rank=slow, custom_ar=True, start_us=1e12)


def test_the_stand_in_knows_the_simulator_s_shapes() -> None:
    assert profiler.KERNEL_SHAPES == KERNEL_SHAPES


@pytest.mark.parametrize("shape", sorted(EXPECTED))
def test_each_shape_gives_its_verdict_in_95_percent_of_40_windows(tmp_path: Path, shape: str) -> None:
    right = 0
    for i in range(WINDOWS):
        b = breakdown([read_trace(p) for p in _window(tmp_path, shape, i)])
        assert all(abs(r.coverage - 1) < 0.05 for r in b.ranks)
        right += judge(b).code == EXPECTED[shape]
    assert right >= 0.95 * WINDOWS, f"{shape}: {right}/{WINDOWS}"


def test_slow_rank_is_named_and_the_real_file_names_are_used(tmp_path: Path) -> None:
    paths = _window(tmp_path, "slow_rank", 1, tp=8, slow=5)
    assert [p.name for p in paths][:2] == ["w-179661.slow_rank-TP-0-DECODE.trace.json.gz",
                                           "w-179661.slow_rank-TP-1-DECODE.trace.json.gz"]
    v = judge(breakdown([read_trace(p) for p in paths]))
    assert (v.code, v.slow_rank) == ("rank-imbalanced", 5) and "rank 5" in v.next_action


def test_low_power_is_never_called_moe_bound_when_the_collective_share_is_over_40_percent(tmp_path: Path) -> None:
    low_power = Diagnosis(code="kernels-not-saturating", severity="warn",
                          message="decode ran at 34 % of the power limit with SM utilisation 97 %: kernels are not "
                                  "saturating the GPUs — MoE kernel tuning / autotune is the lever",
                          figures={"power_pct_of_limit": 34.0, "mean_sm_util_pct": 97.0})
    for i in range(10):
        b = breakdown([read_trace(p) for p in _window(tmp_path, "collective", i)])
        assert b.mean_share(KernelClass.collective) > COLLECTIVE_SHARE
        v = judge(b, [low_power])
        assert v.code == "collective-bound"
        assert v.evidence and "the MoE lever is not the first one" in v.evidence[0]


def test_tp1_has_no_collective_and_nccl_names_without_custom_all_reduce(tmp_path: Path) -> None:
    one = breakdown([read_trace(p) for p in _window(tmp_path, None, 0, tp=1)])
    assert one.ranks[0].by_class_us[KernelClass.collective] == 0
    steps = [profiler.StepSpec(batch=8, step_us=30_000.0)]
    [p, _] = profiler.write_traces(tmp_path / "nccl", profile_id="1.5", prefix=None, by_stage=False, tp=2,
                                   steps=steps, shape=None, slow_rank=None, custom_ar=False, start_us=0.0)
    names = {e.name for e in read_trace(p).events}
    assert "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)" in names
    assert p.name == "1.5-TP-0.trace.json.gz"
