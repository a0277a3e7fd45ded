"""sglang.srt.model_executor.runner.flashinfer_autotune (simulated, sglang 0.5.23's shape): the autotune decision.

From 0.5.13 on, sglang autotunes flashinfer_cutlass upstream: real 0.5.23's `should_run_flashinfer_autotune` lists
it in `moe_needs_autotune` (copy of the released file in tests/fixtures/sglang/wheels/0.5.23/), so no stack patch
is needed, and the 0.5.12.post1 example patch does not apply.
"""

from __future__ import annotations

from typing import Any


def should_run_flashinfer_autotune(server_args: dict[str, Any], sm_major: int) -> bool:
    """Check if flashinfer autotune should be run (upstream's MoE list; the FP4 GEMM branch is not modelled)."""
    if server_args.get("disable_flashinfer_autotune"):
        return False
    backend_str = server_args.get("moe_runner_backend")
    if backend_str == "flashinfer_cutedsl" and server_args.get("moe_a2a_backend") == "deepep":
        return False
    moe_needs_autotune = backend_str in [
        "flashinfer_trtllm",
        "flashinfer_trtllm_routed",
        "flashinfer_mxfp4",
        "flashinfer_cutedsl",
        "flashinfer_cutlass",
        "flashinfer_megamoe",
    ]
    if not moe_needs_autotune:
        return False
    return sm_major >= 9
