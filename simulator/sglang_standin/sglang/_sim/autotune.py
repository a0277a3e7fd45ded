"""FlashInfer MoE autotune in the simulated server: decided by the (maybe patched) kernel_warmup module of the venv.

At start, after the KV cache is allocated and before CUDA-graph capture (where real sglang runs it), the server asks
`sglang.srt.model_executor.kernel_warmup._should_run_flashinfer_autotune`, as imported from its own venv, whether its
MoE runner backend is autotuned. If so each TP rank prints the real line `Running FlashInfer autotune with cache:
PATH` (PATH keyed as upstream keys it), tunes for AUTOTUNE_S model seconds when its cache file is missing (field
notes: about 9 s) and writes it, then `FlashInfer autotune completed.`.

Throughput: the stand-in models a gain only for `flashinfer_cutlass` (the SM120 NVFP4 MoE default, which upstream
does not autotune: it runs its default tactic). With the tuned tactic a decode step costs 1/AUTOTUNE_STEP_SPEEDUP
of the untuned one (perf.py). 1.15 is the size of the tactic gap flashinfer#3537 measured end to end (a slower
tactic frozen by CUDA graphs cost 14-16 % of throughput); the origin story's 4.25x was the whole fix set, not
this patch alone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AUTOTUNE_S = 9.0  # model seconds per tuning run with no cache (field notes: "about 9 s per profile")
#: SM120: RTX PRO 6000 Blackwell, the simulated GPU.
SM_MAJOR, SM_MINOR = 12, 0
#: The backend whose gain the perf model carries (see the module docstring).
TUNED_BACKEND = "flashinfer_cutlass"


@dataclass(frozen=True)
class Autotune:
    runs: bool  # kernel_warmup says this backend is autotuned
    backend: str
    paths: tuple[Path, ...]  # one cache file per TP rank

    @property
    def faster(self) -> bool:
        """The perf model's autotuned step (flashinfer_cutlass only)."""
        return self.runs and self.backend == TUNED_BACKEND


def flashinfer_version() -> str:
    try:
        import flashinfer  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return "unknown"  # upstream's getattr default, for a venv without flashinfer
    return str(getattr(flashinfer, "__version__", "unknown"))


def plan(args: dict[str, Any], hf_config_class: str) -> Autotune:
    """Read the venv's kernel_warmup (a patch to it takes effect here) and key each rank's cache."""
    from sglang.srt.model_executor import kernel_warmup

    backend = str(args.get("moe_runner_backend") or "")
    if not kernel_warmup._should_run_flashinfer_autotune(args, SM_MAJOR):
        return Autotune(False, backend, ())
    version, arch = flashinfer_version(), f"sm{SM_MAJOR}{SM_MINOR}"
    paths = tuple(kernel_warmup._flashinfer_autotune_cache_path(
        args, tp_rank=rank, arch=arch, flashinfer_version=version, dtype="torch.bfloat16",
        hf_config_class=hf_config_class) for rank in range(int(args.get("tp_size") or 1)))
    return Autotune(True, backend, paths)


def hf_config_class(architecture: str) -> str:
    """`GlmMoeDsaForCausalLM` → `GlmMoeDsaConfig`: the HF config class upstream puts in the key."""
    return architecture.removesuffix("ForCausalLM") + "Config"


async def run(tune: Autotune, log: Callable[..., None], sleep: Callable[[float], Any], scale: float) -> None:
    """Each rank's log line; tune (model time) where its cache file is missing, then write it."""
    if not tune.runs:
        return
    for rank, path in enumerate(tune.paths):
        log(f"Running FlashInfer autotune with cache: {path}", tp=rank)
    cold = [p for p in tune.paths if not p.is_file()]
    if cold:
        await sleep(AUTOTUNE_S / scale)
    for path in cold:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"backend": tune.backend, "tuned_at": round(time.time()),
                                        "sim": "stand-in tactic cache"}) + "\n")
        except OSError:
            pass  # real flashinfer warns and runs untuned-cache; the tune still happened
    for rank in range(len(tune.paths)):
        log("FlashInfer autotune completed.", tp=rank)
