"""Resolve "auto"/None server args the way the real server reports them in /server_info.

Real sglang's __post_init__ picks backends and sizes from the hardware and the model config; the simulator
picks fixed, plausible values for GLM-5-NVFP4 on SM120 so that /server_info shows concrete choices.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONTEXT_LEN = 202752
KV_TOKENS = 314304


def model_architecture(model_path: str) -> str:
    try:
        cfg = json.loads((Path(model_path) / "config.json").read_text())
        archs = cfg.get("architectures") or ["LlamaForCausalLM"]
        return str(archs[0])
    except (OSError, ValueError, AttributeError):
        return "LlamaForCausalLM"


def kv_label(args: dict[str, Any]) -> str:
    kv = str(args.get("kv_cache_dtype") or "auto")
    return "bf16" if kv in ("auto", "bfloat16") else kv


def resolve(args: dict[str, Any], version: str, *, hopper: bool = False) -> dict[str, Any]:
    """`hopper`: the defaults real 0.5.12.post1 picked on an H100 (tests/fixtures/sglang/real-h100): FA3 attention
    for an MHA model (`_get_default_attn_backend`), MoE runner `auto` kept, sampling `flashinfer`."""
    r = dict(args)
    model = str(r.get("model_path") or "")
    r["served_model_name"] = r.get("served_model_name") or model
    r["tokenizer_path"] = r.get("tokenizer_path") or model
    tp = int(r.get("tp_size") or r.get("tensor_parallel_size") or 1)
    r["tp_size"] = tp
    if "tensor_parallel_size" in r:
        r["tensor_parallel_size"] = tp
    dsa_model = "Dsa" in model_architecture(model) or "Deepseek" in model_architecture(model)
    prefix = "nsa" if version.startswith("0.5.12") else "dsa"
    if r.get("attention_backend") is None:
        r["attention_backend"] = prefix if dsa_model else ("fa3" if hopper else "flashinfer")
    if "sampling_backend" in r and r["sampling_backend"] is None:
        r["sampling_backend"] = "flashinfer"
    fp8 = kv_label(r).startswith("fp8")
    autos = (("prefill", "trtllm" if fp8 else "flashmla_sparse"), ("decode", "trtllm" if fp8 else "flashmla_kv"))
    for phase, auto in autos:
        key = f"{prefix}_{phase}_backend"
        if key in r and r[key] is None:
            r[key] = auto
    if r.get("moe_runner_backend") in (None, "auto"):
        r["moe_runner_backend"] = "auto" if hopper else "flashinfer_cutlass"
    if r.get("fp4_gemm_runner_backend") in (None, "auto"):
        r["fp4_gemm_runner_backend"] = "flashinfer_cutlass"
    for key in ("cuda_graph_max_bs", "cuda_graph_max_bs_decode"):
        if key in r and r[key] is None:
            r[key] = 256
    if r.get("max_running_requests") is None:
        r["max_running_requests"] = 1024
    if r.get("mem_fraction_static") is None:
        r["mem_fraction_static"] = 0.85
    if r.get("chunked_prefill_size") is None:
        r["chunked_prefill_size"] = 8192
    if r.get("context_length") is None:
        r["context_length"] = CONTEXT_LEN
    return r


def nsa_log_line(r: dict[str, Any], version: str) -> str:
    prefix = "nsa" if version.startswith("0.5.12") else "dsa"
    return (f"Set {prefix.upper()} backends for {kv_label(r)} KV Cache: prefill={r.get(prefix + '_prefill_backend')}, "
            f"decode={r.get(prefix + '_decode_backend')}.")
