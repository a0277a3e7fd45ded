"""sglang.srt.model_executor.model_runner (simulated, sglang 0.5.12.post1's shape): where that release decides which
MoE runner backends get FlashInfer's autotune before CUDA-graph capture.

Real 0.5.12.post1 decides in `ModelRunner._should_run_flashinfer_autotune` (model_runner.py, around line 2512 of the
released wheel; a copy is in tests/fixtures/sglang/wheels/); `flashinfer_cutlass`, the SM120 NVFP4 MoE default, is
commented out of its list with the reason that it "will cause some flashinfer compilation errors". This stand-in
keeps the method's lines byte for byte around that list, so a stack patch written against the real file applies
here too (GNU patch, --fuzz=0, at an offset). The simulated server asks this class at start (sglang/_sim/autotune.py):
what a patch changes here is what it runs. Releases from 0.5.13 on autotune flashinfer_cutlass upstream; the
stand-in's 0.5.23 wheel replaces this file (simulator/sglang_standin/releases/0.5.23/).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class ModelRunner:
    """The slice of upstream's ModelRunner the autotune decision reads."""

    def __init__(self, server_args: dict[str, Any], sm_major: int) -> None:
        args = {"disable_flashinfer_autotune": False, "moe_a2a_backend": "none", "moe_runner_backend": None}
        args.update((k, v) for k, v in server_args.items() if k.isidentifier())
        self.server_args = SimpleNamespace(**args)
        self.sm_major = sm_major

    def _should_run_flashinfer_autotune(self) -> bool:
        """Check if flashinfer autotune should be run."""
        if self.server_args.disable_flashinfer_autotune:
            return False

        if (
            self.server_args.moe_runner_backend == "flashinfer_cutedsl"
            and self.server_args.moe_a2a_backend == "deepep"
        ):
            return False

        backend_str = self.server_args.moe_runner_backend

        # TODO smor- support other cases for flashinfer autotune, such as, mamba backend

        if backend_str not in [
            "flashinfer_trtllm",
            # TODO: Enable for flashinfer_trtllm_routed once flashinfer#2749 is fixed (upstream: its URL).
            # "flashinfer_trtllm_routed",
            "flashinfer_mxfp4",
            "flashinfer_cutedsl",
            # TODO: flashinfer_cutlass will cause some flashinfer compilation errors. To be fixed.
            # "flashinfer_cutlass",
        ]:
            return False

        # Hopper and newer only (upstream: torch.cuda.get_device_capability()).
        return self.sm_major >= 9


def should_run_flashinfer_autotune(server_args: dict[str, Any], sm_major: int) -> bool:
    """The stand-in server's entry point (sglang/_sim/autotune.py): this release's decision."""
    return ModelRunner(server_args, sm_major)._should_run_flashinfer_autotune()
