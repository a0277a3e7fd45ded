"""sglang.srt.model_executor.kernel_warmup (simulated): which MoE runner backends get FlashInfer's autotune before
CUDA-graph capture, and where each rank's tactic cache lives.

Upstream's module (python/sglang/srt/model_executor/kernel_warmup.py, read at sgl-project/sglang 2d71730) decides
from a list of MoE runner backends; `flashinfer_cutlass`, the SM120 NVFP4 MoE default, is left out of it, commented
with the reason that it "will cause some flashinfer compilation errors". This stand-in keeps that shape (the list
and its commented-out entry), so a stack patch that enables it upstream applies here too. The simulated server
imports this module from its venv at start (sglang/_sim/autotune.py): what a patch changes here is what it runs.
The cache key is upstream's: sha256 over model path, dtype, quantization, MoE backend, tp/pp/dp/ep sizes and the
HF config class, first 16 hex digits, under $SGLANG_CACHE_DIR/flashinfer/autotune/<flashinfer version>/sm<NN>/.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any


def _should_run_flashinfer_autotune(server_args: dict[str, Any], sm_major: int) -> bool:
    """True when this server's MoE runner backend is one FlashInfer's autotune is run for."""
    if server_args.get("disable_flashinfer_autotune"):
        return False
    backend_str = server_args.get("moe_runner_backend")
    if backend_str not in [
        "flashinfer_trtllm",
        "flashinfer_mxfp4",
        "flashinfer_cutedsl",
        # TODO: flashinfer_cutlass will cause some flashinfer compilation errors. To be fixed.
        # "flashinfer_cutlass",
    ]:
        return False
    # Hopper and newer only.
    return sm_major >= 9


def _flashinfer_autotune_cache_path(server_args: dict[str, Any], *, tp_rank: int, arch: str,
                                    flashinfer_version: str, dtype: str, hf_config_class: str) -> Path:
    """One rank's tactic cache: keyed by everything that changes which tactic is fastest."""
    sizes = [server_args.get(k) or 1 for k in ("tp_size", "pp_size", "dp_size", "ep_size")]
    fields = [str(server_args.get("model_path")), dtype, str(server_args.get("quantization")),
              str(server_args.get("moe_runner_backend")), *map(str, sizes), hf_config_class]
    key = hashlib.sha256("|".join(fields).encode()).hexdigest()[:16]
    root = Path(os.environ.get("SGLANG_CACHE_DIR") or os.path.expanduser("~/.cache/sglang"))
    return root / "flashinfer" / "autotune" / flashinfer_version / arch / key / f"rank_tp{tp_rank}_pp0_dp0.json"
