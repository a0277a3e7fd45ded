"""FlashInfer MoE autotune in the simulated server: decided by the (maybe patched) modules of the venv, where each
release decides it.

At start, after the KV cache is allocated and before CUDA-graph capture (where real sglang runs it), the server asks
its own venv whether its MoE runner backend is autotuned: `sglang.srt.model_executor.runner.flashinfer_autotune`
where the release has it (0.5.23, which autotunes flashinfer_cutlass upstream), else `ModelRunner.
_should_run_flashinfer_autotune` of `sglang.srt.model_executor.model_runner` (0.5.12.post1, which leaves
flashinfer_cutlass out unless a stack patch puts it in). If so each TP rank prints the real line `Running FlashInfer
autotune with cache: PATH` (PATH keyed as upstream keys it), tunes for AUTOTUNE_S model seconds when its cache file
is missing (field notes: about 9 s) and writes it, then `FlashInfer autotune completed.`.

Throughput: the stand-in models a gain only for `flashinfer_cutlass` (the SM120 NVFP4 MoE default, which 0.5.12.post1
does not autotune: it runs its default tactic). With the tuned tactic a decode step costs 1/AUTOTUNE_STEP_SPEEDUP
of the untuned one (perf.py). 1.15 is the size of the tactic gap flashinfer#3537 measured end to end (a slower
tactic frozen by CUDA graphs cost 14-16 % of throughput); the origin story's 4.25x was the whole fix set, not
this patch alone.
"""

from __future__ import annotations

import hashlib
import json
import os
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
    runs: bool  # the release's decision says this backend is autotuned
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


def should_run(args: dict[str, Any]) -> bool:
    """The venv's own decision: the module where its release decides (a patch to it takes effect here)."""
    try:
        from sglang.srt.model_executor.runner import flashinfer_autotune  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        from sglang.srt.model_executor import model_runner

        return bool(model_runner.should_run_flashinfer_autotune(args, SM_MAJOR))
    return bool(flashinfer_autotune.should_run_flashinfer_autotune(args, SM_MAJOR))


def cache_path(args: dict[str, Any], *, tp_rank: int, arch: str, flashinfer_version: str, dtype: str,
               hf_config_class: str) -> Path:
    """One rank's tactic cache, keyed as upstream keys it: sha256 over model path, dtype, quantization, MoE backend,
    tp/pp/dp/ep sizes and the HF config class, first 16 hex digits, under
    $SGLANG_CACHE_DIR/flashinfer/autotune/<flashinfer version>/sm<NN>/."""
    sizes = [args.get(k) or 1 for k in ("tp_size", "pp_size", "dp_size", "ep_size")]
    fields = [str(args.get("model_path")), dtype, str(args.get("quantization")),
              str(args.get("moe_runner_backend")), *map(str, sizes), hf_config_class]
    key = hashlib.sha256("|".join(fields).encode()).hexdigest()[:16]
    root = Path(os.environ.get("SGLANG_CACHE_DIR") or os.path.expanduser("~/.cache/sglang"))
    return root / "flashinfer" / "autotune" / flashinfer_version / arch / key / f"rank_tp{tp_rank}_pp0_dp0.json"


def plan(args: dict[str, Any], hf_config_class: str) -> Autotune:
    """Ask the venv's release whether this backend is autotuned, and key each rank's cache."""
    backend = str(args.get("moe_runner_backend") or "")
    if not should_run(args):
        return Autotune(False, backend, ())
    version, arch = flashinfer_version(), f"sm{SM_MAJOR}{SM_MINOR}"
    paths = tuple(cache_path(args, tp_rank=rank, arch=arch, flashinfer_version=version, dtype="torch.bfloat16",
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
