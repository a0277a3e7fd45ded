"""Which class a GPU kernel of an sglang decode step belongs to, by its name in a torch-profiler trace.

Every name pattern below was read from a released artifact, not guessed:

- NCCL: `ncclDevKernel_<Coll>_<RedOp>_<ty>_<ALGO>_<PROTO>` (NCCL >= 2.19, `src/device/generate.py` pastes
  "ncclDevKernel" and the function's fields with "_"), `ncclKernel_…` (NCCL <= 2.18), and the symmetric-memory
  kernels `ncclSymkDevKernel_…`.
- sglang custom all-reduce, sglang-kernel 0.4.2.post2 (`sgl_kernel/sm90/common_ops.abi3.so`, demangled):
  `sglang::cross_device_reduce_1stage<…>` and `sglang::cross_device_reduce_2stage<…>`; its mscclpp all-reduce.
- sglang 0.5.12.post1's JIT all-reduce (`jit_kernel/csrc/distributed/custom_all_reduce_pull.cuh`, `…_push.cuh`):
  `all_reduce_one_shot_kernel`, `all_reduce_two_shot_kernel`, `all_reduce_one_shot_push_kernel`.
- MoE: `fused_moe_kernel` (sglang's triton runner, `fused_moe_triton_kernels.py`), sgl-kernel's
  `moe_align_block_size_kernel`, `moe_align_block_size_small_batch_expert_kernel`,
  `count_and_sort_expert_tokens_kernel`, `moe_fused_gate_kernel…`, `moe_sum…`, and `topkGatingSoftmax`
  (all four seen in the real H100 trace, tests/fixtures/profile/).
- Attention: the triton backend's `_fwd_grouped_kernel_stage1`, `_fwd_kernel_stage1`, `_fwd_kernel_stage2`
  (`decode_attention.py`) and `_fwd_kernel` (`extend_attention.py`, `prefill_attention.py`); FlashAttention 3
  (`flash::`, `flash_fwd`), FlashInfer's decode/prefill kernels (`BatchDecode…`, `BatchPrefill…`,
  `PersistentKernel`), MLA kernels.
- Dense GEMM: cuBLAS's `nvjet_sm90_*` (the real trace), `sm90_xmma_gemm…`, `cutlass…gemm`, `gemm` in general
  (after the MoE patterns, so a grouped MoE GEMM stays MoE).

Everything else (norms, rope, activations, copies, memcpy/memset, sampling) is "other".
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import lru_cache


class KernelClass(StrEnum):
    """A decode step's time goes to one of these; `idle` is time no kernel ran on the GPU (the host's gaps)."""

    collective = "collective"
    moe = "moe"
    attention = "attention"
    dense_gemm = "dense_gemm"
    other = "other"
    idle = "idle"


#: The classes in the order their shares are printed.
CLASS_ORDER: tuple[KernelClass, ...] = (KernelClass.collective, KernelClass.moe, KernelClass.attention,
                                        KernelClass.dense_gemm, KernelClass.other, KernelClass.idle)

#: When kernels of two classes overlap in time (two streams), the overlapped time goes to the first class in
#: this order: a collective hidden under compute is not exposed, so compute wins; idle is never overlapped.
OVERLAP_PRIORITY: tuple[KernelClass, ...] = (KernelClass.moe, KernelClass.attention, KernelClass.dense_gemm,
                                             KernelClass.collective, KernelClass.other)

_COLLECTIVE = re.compile(
    r"^(?:void\s+)?(?:ncclDevKernel_|ncclKernel_|ncclSymkDevKernel_)"
    r"|cross_device_reduce_[12]stage"
    r"|all_reduce_(?:one|two)_shot(?:_push)?_kernel"
    r"|mscclpp\w*all_?reduce|allreduce\w*mscclpp")
_MOE = re.compile(
    r"fused_moe_kernel|moe_align_block_size|count_and_sort_expert_tokens|moe_fused_gate|\bmoe_sum"
    r"|topkGatingSoftmax|grouped_topk|cutlass_moe|moe_gemm")
_ATTENTION = re.compile(
    r"^_fwd_(?:grouped_)?kernel(?:_stage[12])?\b|^_fwd_kernel$|flash::|flash_fwd|BatchDecode|BatchPrefill"
    r"|PersistentKernel|fmha|flash_mla|mla_decode|decode_attention|paged_attention")
_DENSE_GEMM = re.compile(r"^nvjet_|xmma_gemm|gemm|Gemm|cublas|cutlass")


@lru_cache(maxsize=4096)
def classify(name: str) -> KernelClass:
    """The class of one GPU event's name (a kernel, a memcpy or a memset)."""
    if _COLLECTIVE.search(name):
        return KernelClass.collective
    if _MOE.search(name):
        return KernelClass.moe
    if _ATTENTION.search(name):
        return KernelClass.attention
    if _DENSE_GEMM.search(name):
        return KernelClass.dense_gemm
    return KernelClass.other


def short_name(name: str, width: int = 60) -> str:
    """A kernel's demangled name without `void`, namespaces' template noise and its argument list, for a table."""
    s = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):
        if ch in "<(":
            if ch == "(" and depth == 0:
                cut = i
                break
            depth += ch == "<"
        elif ch == ">":
            depth -= 1
    s = s[:cut]
    return s if len(s) <= width else s[:width - 1] + "…"
