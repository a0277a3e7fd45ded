"""sglang's `/start_profile` and `/stop_profile`, writing torch-profiler chrome traces shaped like the real ones.

The request body is sglang 0.5.12.post1's `ProfileReqInput` (`io_struct.py`): output_dir, start_step, num_steps,
activities, profile_by_stage, with_stack, record_shapes, merge_profiles, profile_prefix, profile_stages; a wrong
type is FastAPI's 422. With `num_steps` the call returns once that many decode steps ran and the files are written
(the scheduler answers the tokenizer manager at `profiler_target_forward_ct`); without it `/stop_profile` writes
them. One file per TP rank, named as `profile_utils.py` names them:
`[PREFIX-]PROFILE_ID-TP-RANK[-DECODE].trace.json.gz` in output_dir (else $SGLANG_TORCH_PROFILER_DIR, else /tmp).

Each decode step is one `step[DECODE bs=N]` annotation on the host and on the GPU stream (as `model_runner.py`
writes it), and the kernels of a Qwen3-MoE-like layer with the names the real H100 trace has
(tests/fixtures/profile/), plus the all-reduce a TP group runs twice per layer: sglang-kernel's
`cross_device_reduce_1stage` (custom all-reduce), or NCCL's `ncclDevKernel_AllReduce_Sum_bf16_RING_LL` with
--disable-custom-all-reduce. The step's length is the performance model's (perf.py); its split follows the
container's `kernel_shape` fault (docs/simulator.md): collective, moe, attention, host, slow_rank (with
`slow_rank`, default the last rank), or none (a balanced MoE decode).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KERNEL_SHAPES = ("collective", "moe", "attention", "host", "slow_rank")

# Real names, from the real sglang 0.5.12.post1 H100 trace (fused_moe, triton attention, cuBLAS nvjet, flashinfer).
_NORM = ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, "
         "__nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)")
_QKV = "nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN"
_ROUTER = "nvjet_sm90_tst_64x8_64x16_1x1_h_bz_TNT"
_QKNORM = ("void (anonymous namespace)::fused_qknorm_warp<64l, true, __nv_bfloat16>((anonymous "
           "namespace)::QKNormParams)")
_ROPE = ("void (anonymous namespace)::fused_rope_store_kernel<true, 64l, true, __nv_bfloat16, long, 8u>((anonymous "
         "namespace)::FusedRopeStoreParams)")
_TOPK = ("void topkGatingSoftmax<__nv_bfloat16, 8, 8, 4, 16>(__nv_bfloat16 const*, bool const*, float*, int, int*, "
         "int, int, int, bool, float, float const*)")
_ALIGN = ("void moe_align_block_size_small_batch_expert_kernel<int, 256>(int const*, int*, int*, int*, int, int, "
          "unsigned long, bool, int)")
_ACT = ("void (anonymous namespace)::act_and_mul_kernel<__nv_bfloat16, ((anonymous namespace)::ActivationKind)0, "
        "true, false>((anonymous namespace)::ActivationParams)")
_ADD = ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
# sglang-kernel 0.4.2.post2 (common_ops.abi3.so, demangled) and NCCL's generate.py.
_CUSTOM_AR = ("void sglang::cross_device_reduce_1stage<__nv_bfloat16, {n}>(sglang::RankData*, sglang::RankSignals, "
              "sglang::Signal*, __nv_bfloat16*, int, int)")
_NCCL_AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

#: One layer: (name, class, relative length). "ar" marks the all-reduce (TP > 1 only).
_LAYER: tuple[tuple[str, str, float], ...] = (
    (_NORM, "other", 2.0), (_QKV, "gemm", 3.0), (_QKNORM, "other", 1.0), (_ROPE, "other", 1.5),
    ("_fwd_grouped_kernel_stage1", "attn", 5.0), ("_fwd_kernel_stage2", "attn", 2.5), (_QKV, "gemm", 2.5),
    ("ar", "ar", 2.0), (_NORM, "other", 2.0), (_ROUTER, "gemm", 2.0), (_TOPK, "moe", 1.5), (_ALIGN, "moe", 3.0),
    ("fused_moe_kernel", "moe", 5.5), (_ACT, "other", 1.3), ("fused_moe_kernel", "moe", 5.0), ("ar", "ar", 2.0),
    (_ADD, "other", 1.4))
LAYERS = 8
STREAM = 7
#: The share of a step the GPU waits for the host (launch, scheduling), and with the `host` shape.
IDLE_SHARE, HOST_IDLE_SHARE = 0.04, 0.62
#: Per-class multipliers of each shape; slow_rank's rank works SLOW_RANK_FACTOR longer, the others wait in the
#: all-reduce.
_SHAPE_FACTORS: dict[str, dict[str, float]] = {
    "collective": {"ar": 14.0}, "moe": {"moe": 3.5}, "attention": {"attn": 5.0}}
SLOW_RANK_FACTOR = 1.6
JITTER = 0.08


@dataclass(frozen=True)
class StepSpec:
    """One decode step the engine ran: its batch and its model length."""

    batch: int
    step_us: float


def _layer_kernels(tp: int, shape: str | None, rank: int, slow: int, rng: random.Random,
                   custom_ar: bool) -> list[tuple[str, float]]:
    """One layer's kernels and relative lengths on `rank` (before scaling to the step)."""
    factors = _SHAPE_FACTORS.get(shape or "", {})
    out: list[tuple[str, float]] = []
    waited = 0.0  # the slow rank's extra work since the last all-reduce, which the others wait for inside it
    for name, cls, length in _LAYER:
        if cls == "ar":
            if tp <= 1:
                continue
            ar_name = _CUSTOM_AR.format(n=tp) if custom_ar else _NCCL_AR
            extra = waited if (shape == "slow_rank" and rank != slow) else 0.0
            out.append((ar_name, length * factors.get("ar", 1.0) * rng.uniform(1 - JITTER, 1 + JITTER) + extra))
            waited = 0.0
            continue
        base = length * factors.get(cls, 1.0)
        if shape == "slow_rank":
            waited += base * (SLOW_RANK_FACTOR - 1)
            if rank == slow:
                base *= SLOW_RANK_FACTOR
        out.append((name, base * rng.uniform(1 - JITTER, 1 + JITTER)))
    return out


def rank_trace(*, rank: int, tp: int, steps: list[StepSpec], shape: str | None, slow_rank: int | None,
               seed: int, start_us: float, custom_ar: bool = True, pid: int = 0) -> dict[str, Any]:
    """One rank's trace document for `steps` decode steps starting at `start_us` (model clock, µs)."""
    slow = tp - 1 if slow_rank is None else slow_rank
    rng = random.Random(f"{seed}-{rank}")
    pid = pid or os.getpid()
    meta = [("process_name", pid, 0, {"name": "sglang::scheduler"}), ("process_labels", pid, 0, {"labels": "CPU"}),
            ("process_name", rank, 0, {"name": "sglang::scheduler"}),
            ("process_labels", rank, 0, {"labels": f"GPU {rank}"}),
            ("thread_name", rank, STREAM, {"name": f"stream {STREAM} "})]
    events: list[dict[str, Any]] = [{"name": n, "ph": "M", "ts": start_us, "pid": p, "tid": t, "args": a}
                                    for n, p, t, a in meta]
    idle_share = HOST_IDLE_SHARE if shape == "host" else IDLE_SHARE
    t = start_us
    corr = 1000 * (rank + 1)
    for spec in steps:
        kernels = [k for _ in range(LAYERS) for k in _layer_kernels(tp, shape, rank, slow, rng, custom_ar)]
        gpu_us = spec.step_us * (1 - idle_share)
        scale = gpu_us / sum(d for _, d in kernels)
        name = f"step[DECODE bs={spec.batch}]"
        lead = spec.step_us * idle_share * 0.8  # the host prepares the batch and launches the graph
        events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": pid, "tid": pid, "ts": t,
                       "dur": spec.step_us, "args": {"External id": corr}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": pid, "tid": pid,
                       "ts": t + lead - 5.0, "dur": 4.0, "args": {"correlation": corr}})
        k_t = t + lead
        gpu_start = k_t
        for kname, rel in kernels:
            dur = rel * scale
            corr += 1
            events.append({"ph": "X", "cat": "kernel", "name": kname, "pid": rank, "tid": STREAM, "ts": k_t,
                           "dur": round(dur, 3), "args": {"device": rank, "stream": STREAM, "correlation": corr,
                                                          "grid": [132, 1, 1], "block": [256, 1, 1]}})
            k_t += dur
        events.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": rank, "tid": STREAM,
                       "ts": gpu_start, "dur": round(k_t - gpu_start, 3), "args": {"External id": corr}})
        t += spec.step_us * 1.02  # the scheduler's own work between two steps, outside the annotation
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": rank, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85017493504,
                              "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": tp},
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 0,
        "traceEvents": events,
        "traceName": f"/tmp/tmp{rank}.json",
    }


def trace_name(profile_id: str, rank: int, prefix: str | None, by_stage: bool) -> str:
    """profile_utils.py's file name for one rank (no DP/PP/EP parts: the stand-in runs TP only)."""
    return ((f"{prefix}-" if prefix else "") + f"{profile_id}-TP-{rank}" + ("-DECODE" if by_stage else "")
            + ".trace.json.gz")


def write_traces(out_dir: Path, *, profile_id: str, prefix: str | None, by_stage: bool, tp: int,
                 steps: list[StepSpec], shape: str | None, slow_rank: int | None, custom_ar: bool,
                 start_us: float | None = None) -> list[Path]:
    """Write every rank's trace; the seed is the profile id, so two windows differ and one replays."""
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.time() * 1e6 if start_us is None else start_us
    paths = []
    for rank in range(tp):
        doc = rank_trace(rank=rank, tp=tp, steps=steps, shape=shape, slow_rank=slow_rank, seed=_seed(profile_id),
                         start_us=start, custom_ar=custom_ar)
        path = out_dir / trace_name(profile_id, rank, prefix, by_stage)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=5))  # dumps: the C encoder
        os.replace(tmp, path)
        paths.append(path)
    return paths


def _seed(profile_id: str) -> int:
    return sum((i + 1) * ord(c) for i, c in enumerate(profile_id))


#: ProfileReqInput's fields (sglang 0.5.12.post1 io_struct.py) and the JSON types each takes (None always allowed).
_FIELDS: dict[str, tuple[type, ...]] = {
    "output_dir": (str,), "start_step": (int,), "num_steps": (int,), "activities": (list,),
    "profile_by_stage": (bool,), "with_stack": (bool,), "record_shapes": (bool,), "merge_profiles": (bool,),
    "profile_prefix": (str,), "profile_stages": (list,)}


@dataclass(frozen=True)
class ProfileRequest:
    output_dir: str | None = None
    num_steps: int | None = None
    profile_by_stage: bool = False
    profile_prefix: str | None = None


def parse_request(body: dict[str, Any]) -> ProfileRequest | list[dict[str, Any]]:
    """The request, or FastAPI's 422 `detail` list for fields of the wrong type (extra fields are ignored, as
    pydantic ignores them)."""
    detail = []
    for key, types in _FIELDS.items():
        v = body.get(key)
        if v is None:
            continue
        ok = isinstance(v, types) and not (types == (int,) and isinstance(v, bool))
        if not ok:
            detail.append({"type": f"{types[0].__name__}_type", "loc": ["body", key],
                           "msg": f"Input should be a valid {types[0].__name__}", "input": v})
    if detail:
        return detail
    return ProfileRequest(output_dir=body.get("output_dir"), num_steps=body.get("num_steps"),
                          profile_by_stage=bool(body.get("profile_by_stage")),
                          profile_prefix=body.get("profile_prefix"))


class ProfileSession:
    """One profile in progress: collects the decode steps the engine reports until `num_steps` (or a stop)."""

    def __init__(self, req: ProfileRequest, profile_id: str) -> None:
        self.req = req
        self.profile_id = profile_id
        self.steps: list[StepSpec] = []
        self.start_us = time.time() * 1e6

    def on_decode(self, batch: int, steps: int, step_ms: float) -> bool:
        """The engine ran `steps` decode steps of `batch`; True once the session has all it wants."""
        for _ in range(steps):
            if self.req.num_steps is not None and len(self.steps) >= self.req.num_steps:
                break
            self.steps.append(StepSpec(batch=batch, step_us=step_ms * 1000.0))
        return self.req.num_steps is not None and len(self.steps) >= self.req.num_steps

    def output_dir(self) -> Path:
        return Path(self.req.output_dir or os.environ.get("SGLANG_TORCH_PROFILER_DIR") or "/tmp").expanduser()
