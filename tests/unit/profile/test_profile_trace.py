"""The profile reader, breakdown and verdict on the real sglang 0.5.12.post1 H100 traces (tests/fixtures/profile/)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from orchestrator.profile.breakdown import breakdown
from orchestrator.profile.kernels import KernelClass, classify, short_name
from orchestrator.profile.trace import TraceError, parse_trace, read_trace
from orchestrator.profile.verdict import judge

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "profile"
DECODE = FIXTURES / "bystage-1796659222.7204502-TP-0-DECODE.trace.gpu.json.gz"
EXTEND = FIXTURES / "bystage-1796659222.7204502-TP-0-EXTEND.trace.gpu.json.gz"


def test_real_trace_reads_its_rank_device_and_six_decode_steps() -> None:
    t = read_trace(DECODE)
    assert (t.rank, t.world_size, t.device) == (0, 1, "NVIDIA H100 80GB HBM3")
    steps = t.decode_steps()
    assert len(steps) == 6 and {s.batch_size for s in steps} == {1}
    # every host annotation found its GPU annotation, which starts after the host started the step
    assert all(s.gpu_start_us is not None and s.gpu_start_us >= s.cpu_start_us for s in steps)
    assert round(steps[0].cpu_dur_us, 3) == 6337.212 and round(steps[-1].gpu_dur_us or 0, 3) == 845.938


def test_real_breakdown_sums_to_the_measured_step_time_within_5_percent() -> None:
    r = breakdown([read_trace(DECODE)]).ranks[0]
    for st in r.per_step:
        assert abs(st.accounted_us - st.step_us) <= 0.05 * st.step_us
    assert abs(r.coverage - 1.0) <= 0.05
    # the kernels' own time, counted independently of the windows: what the classes other than idle hold
    events = read_trace(DECODE).events
    inside = sum(min(e.end_us, s.end_us) - max(e.start_us, s.start_us)
                 for s in read_trace(DECODE).decode_steps() for e in events
                 if e.end_us > s.start_us and e.start_us < s.end_us)
    busy = sum(v for c, v in r.by_class_us.items() if c is not KernelClass.idle)
    assert busy == pytest.approx(inside, rel=1e-3)  # two streams barely overlap: nearly equal


def test_real_kernels_fall_into_their_classes() -> None:
    r = breakdown([read_trace(DECODE)]).ranks[0]
    assert r.by_class_us[KernelClass.moe] > 0 and r.by_class_us[KernelClass.attention] > 0
    assert r.by_class_us[KernelClass.dense_gemm] > 0 and r.by_class_us[KernelClass.collective] == 0
    names = {k.name: k.kernel_class for k in r.top_kernels}
    assert names["fused_moe_kernel"] is KernelClass.moe
    assert names["_fwd_grouped_kernel_stage1"] is KernelClass.attention
    assert names["nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN"] is KernelClass.dense_gemm


def test_the_real_tiny_model_is_host_bound() -> None:
    """The tiny model's CUDA graph runs ~90 µs of a 1–6 ms step: the GPU waits for the scheduler."""
    v = judge(breakdown([read_trace(DECODE)]))
    assert v.code == "host-bound" and v.shares["idle"] > 0.9
    assert "num-continuous-decode-steps" in v.next_action


@pytest.mark.parametrize(("name", "cls"), [
    # NCCL >= 2.19 (src/device/generate.py), <= 2.18, symmetric kernels
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", KernelClass.collective),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", KernelClass.collective),
    ("ncclSymkDevKernel_AllReduce_AGxLL_R_bf16(ncclSymkDevWorkArgs4K)", KernelClass.collective),
    # sglang-kernel 0.4.2.post2 common_ops.abi3.so, demangled
    ("void sglang::cross_device_reduce_1stage<__nv_bfloat16, 8>(sglang::RankData*, sglang::RankSignals, "
     "sglang::Signal*, __nv_bfloat16*, int, int)", KernelClass.collective),
    ("void sglang::cross_device_reduce_2stage<__half, 4>(sglang::RankData*, sglang::RankSignals, sglang::Signal*, "
     "__half*, int, int)", KernelClass.collective),
    # sglang 0.5.12.post1 jit_kernel/csrc/distributed/custom_all_reduce_{pull,push}.cuh
    ("void (anonymous namespace)::all_reduce_one_shot_kernel<__nv_bfloat16, 8u, true>(AllReduceData const*, "
     "AllReduceParams, PullController)", KernelClass.collective),
    ("void (anonymous namespace)::all_reduce_one_shot_push_kernel<__nv_bfloat16, 2u, false>(AllReducePushData, "
     "PushController)", KernelClass.collective),
    ("void (anonymous namespace)::all_reduce_two_shot_kernel<float, 4u, true>(AllReduceData const*, "
     "AllReduceParams, PullController)", KernelClass.collective),
    ("void topkGatingSoftmax<__nv_bfloat16, 8, 8, 4, 16>(__nv_bfloat16 const*, bool const*, float*, int, int*, "
     "int, int, int, bool, float, float const*)", KernelClass.moe),
    ("void count_and_sort_expert_tokens_kernel<int>(int const*, int*, int*, unsigned long)", KernelClass.moe),
    ("_fwd_kernel_stage2", KernelClass.attention),
    ("_fwd_kernel", KernelClass.attention),
    ("Memcpy DtoD (Device -> Device)", KernelClass.other),
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, "
     "__nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)", KernelClass.other),
])
def test_classify(name: str, cls: KernelClass) -> None:
    assert classify(name) is cls


def test_short_name_keeps_the_kernel_and_drops_the_arguments() -> None:
    assert short_name("void (anonymous namespace)::fused_qknorm_warp<64l, true, __nv_bfloat16>((anonymous "
                      "namespace)::QKNormParams)") == "fused_qknorm_warp<64l, true, __nv_bfloat16>"


def _doc(events: list[dict[str, object]], rank: int = 0, world: int = 2) -> bytes:
    return json.dumps({"distributedInfo": {"rank": rank, "world_size": world}, "traceEvents": events}).encode()


def _step(ts: float, dur: float) -> list[dict[str, object]]:
    return [{"ph": "X", "cat": "user_annotation", "name": "step[DECODE bs=8]", "ts": ts, "dur": dur},
            {"ph": "X", "cat": "gpu_user_annotation", "name": "step[DECODE bs=8]", "ts": ts + 1, "dur": dur - 2}]


def _kernel(name: str, ts: float, dur: float, stream: int = 7) -> dict[str, object]:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "tid": stream}


def test_overlapping_kernels_on_two_streams_are_counted_once() -> None:
    """An all-reduce hidden under a GEMM on another stream is not exposed: the overlap goes to the GEMM, and the
    classes still add up to the step (summing durations would give 140 %)."""
    events = [*_step(0, 100), _kernel("nvjet_sm90_tst_x", 10, 60, 7),
              _kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)", 30, 80, 9)]
    r = breakdown([parse_trace(_doc(events), "t")]).ranks[0]
    assert r.by_class_us[KernelClass.dense_gemm] == 60
    assert r.by_class_us[KernelClass.collective] == 30  # 70..100: the part after the GEMM, clipped at the step end
    assert r.by_class_us[KernelClass.idle] == 10
    assert r.coverage == pytest.approx(1.0)


def test_rank_from_the_file_name_when_distributed_info_is_missing() -> None:
    raw = json.dumps({"traceEvents": [*_step(0, 10)]}).encode()
    assert parse_trace(gzip.compress(raw), "p-1.2-TP-3-DECODE.trace.json.gz").rank == 3


def test_refusals_name_the_file_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="has no step\\[DECODE …\\] annotation \\(it has EXTEND steps\\)"):
        breakdown([read_trace(EXTEND)])
    (tmp_path / "x.json.gz").write_bytes(b"\x1f\x8bnot gzip")
    with pytest.raises(TraceError, match=r"x\.json\.gz is not a chrome trace"):
        read_trace(tmp_path / "x.json.gz")
    with pytest.raises(TraceError, match="cannot read trace"):
        read_trace(tmp_path / "missing.json.gz")
    with pytest.raises(TraceError, match="are both rank 0"):
        breakdown([read_trace(DECODE), read_trace(DECODE)])
