"""The stand-in's FlashInfer MoE autotune (sglang/_sim/autotune.py): decided where each release decides it. 0.5.12.post1
(ModelRunner._should_run_flashinfer_autotune) leaves flashinfer_cutlass out, and the shipped example patch (applied
with GNU patch, as a stack build does) turns it on; 0.5.23 autotunes it upstream, without a patch. The server then
prints the real log line with the cache path keyed as upstream keys it, and only then does the perf model run the
tuned step."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.inventory.example import AUTOTUNE_PATCH
from orchestrator.resources import example_inventory_dir
from simulator.software.wheels import SGLANG_PINS, flashinfer_spec, sglang_spec
from tests.standin_model import perf_module

from .conftest import Server, free_port
from .standins import clean_env

perf = perf_module()
#: The release the example patch is written for, and one that autotunes flashinfer_cutlass upstream.
PATCHED_RELEASE, UPSTREAM_RELEASE = "0.5.12.post1", "0.5.23"


def flashinfer(release: str) -> str:
    """The flashinfer build the release pins: the autotune cache path keys on its `flashinfer.__version__`."""
    return SGLANG_PINS[release][0].split("==")[1]


def standin_tree(tmp_path: Path, *, patched: bool, release: str = PATCHED_RELEASE) -> Path:
    """The files of the stand-in's wheel of `release` and of the flashinfer it pins (simulator/software/wheels.py) as
    pip lays them out in site-packages, patched or not."""
    tree = tmp_path / f"{release}-{'patched' if patched else 'plain'}"
    files = {**sglang_spec(release).files, **flashinfer_spec(flashinfer(release)).files}
    for name, data in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    if patched:
        subprocess.run(["patch", "-p1", "--forward", "--batch", "--fuzz=0", "-d", str(tree), "-i",
                        str(example_inventory_dir() / AUTOTUNE_PATCH)], check=True, capture_output=True)
    return tree


def launch(tmp_path: Path, tree: Path, backend: str, *, tag: str, release: str = PATCHED_RELEASE) -> Server:
    model = tmp_path / "GLM-5-NVFP4"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text('{"architectures": ["GlmMoeDsaForCausalLM"]}')
    (model / "model.safetensors").write_bytes(b"")
    port = free_port()
    env = clean_env()
    env.update(PYTHONPATH=str(tree), SGLANG_SIM_START_S="0.3", SGLANG_SIM_VERSION=release,
               SGLANG_SIM_TIME_SCALE="20", SGLANG_CACHE_DIR=str(tmp_path / "sglang-cache"),
               SGLANG_SIM_CACHE_DIR=str(tmp_path / "kernel-cache"))
    log = tmp_path / f"{tag}.log"
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--tp-size", "8", "--quantization", "modelopt_fp4", "--moe-runner-backend", backend]
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT, text=True)
    return Server(proc, port, log)


def stop(server: Server) -> None:
    server.proc.terminate()
    server.proc.wait(10)


def expected_cache(tmp_path: Path, model: Path, rank: int, release: str = PATCHED_RELEASE) -> Path:
    """Upstream's key: sha256 of model path, dtype, quantization, MoE backend, tp, pp, dp, ep, HF config class."""
    key = "|".join([str(model), "torch.bfloat16", "modelopt_fp4", "flashinfer_cutlass", "8", "1", "1", "1",
                    "GlmMoeDsaConfig"])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return tmp_path / "sglang-cache" / "flashinfer" / "autotune" / flashinfer(release) / "sm120" / digest / \
        f"rank_tp{rank}_pp0_dp0.json"


def test_unpatched_flashinfer_cutlass_is_not_autotuned(tmp_path: Path) -> None:
    server = launch(tmp_path, standin_tree(tmp_path, patched=False), "flashinfer_cutlass", tag="plain")
    try:
        assert server.wait_status(200)[-1] == 200, server.output()
        assert "Running FlashInfer autotune" not in server.output()
        assert not (tmp_path / "sglang-cache").exists()
    finally:
        stop(server)


@pytest.mark.parametrize(("release", "patched"), [(PATCHED_RELEASE, True), (UPSTREAM_RELEASE, False)])
def test_flashinfer_cutlass_is_autotuned_with_upstreams_cache_key(tmp_path: Path, release: str,
                                                                  patched: bool) -> None:
    """0.5.12.post1 with the example patch, and 0.5.23 as released (it autotunes flashinfer_cutlass upstream)."""
    tree = standin_tree(tmp_path, patched=patched, release=release)
    server = launch(tmp_path, tree, "flashinfer_cutlass", tag="tuned", release=release)
    try:
        assert server.wait_status(200, timeout=30)[-1] == 200, server.output()
    finally:
        stop(server)
    out = server.output()
    model = tmp_path / "GLM-5-NVFP4"
    for rank in range(8):
        path = expected_cache(tmp_path, model, rank, release)
        assert f" TP{rank}] Running FlashInfer autotune with cache: {path}\n" in out
        assert path.is_file()
    assert out.count("FlashInfer autotune completed.") == 8
    # in upstream's order: after the KV cache, before CUDA-graph capture (each release words its capture line)
    assert out.index("KV Cache is allocated") < out.index("Running FlashInfer autotune") < out.index("graph begin")


@pytest.mark.parametrize("backend", ["flashinfer_cutlass", "triton"])
def test_only_the_patched_cutlass_backend_runs_the_tuned_step(tmp_path: Path, backend: str) -> None:
    sys.path.insert(0, str(standin_tree(tmp_path, patched=True)))
    try:
        sys.modules.pop("sglang", None)
        for name in [m for m in sys.modules if m.startswith("sglang.")]:
            sys.modules.pop(name)
        from sglang._sim import autotune  # type: ignore[import-not-found]

        tune = autotune.plan({"moe_runner_backend": backend, "tp_size": 8, "model_path": "/m"}, "GlmMoeDsaConfig")
    finally:
        sys.path.pop(0)
        for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
            sys.modules.pop(name)
    assert tune.faster is (backend == "flashinfer_cutlass")


def test_the_tuned_step_is_the_documented_gain() -> None:
    args = {"tp_size": 8, "max_running_requests": 2048, "num_continuous_decode_steps": 8}
    plain = perf.PerfModel.from_args(args)
    tuned = perf.PerfModel(**{**plain.__dict__, "moe_autotuned": True})
    assert tuned.step_ms(256) == pytest.approx(plain.step_ms(256) / 1.15)
    gain = tuned.steady_output_tok_s(1024) / plain.steady_output_tok_s(1024)
    assert 1.10 < gain < 1.15  # the scheduling overhead is not tuned, so end to end a little less than the step
