"""A regressed build published to the index (`deploy sim index publish … --regression KIND`): the knob is inside the
wheel, so the stand-in server of a venv holding that build misbehaves as the real one did, and a venv of good builds
does not (issue 35, simulator item). The tree each server runs is the wheels' files as pip lays them out."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import requests

from simulator.software.index import PublishRefused, check_publish, publish, regression_of
from simulator.software.wheels import flashinfer_spec, sglang_kernel_spec, sglang_spec, torch_spec
from tests.standin_model import perf_module

from .conftest import Server, free_port
from .standins import clean_env

BAD = "0.7.2+cu130"


def venv_tree(tmp_path: Path, regression: str | None, tag: str) -> Path:
    """site-packages of a 0.5.23 stack whose flashinfer is BAD built with `regression` (None: a good build)."""
    tree = tmp_path / tag
    for spec in (sglang_spec("0.5.23"), flashinfer_spec(BAD, regression), sglang_kernel_spec("0.4.10"), torch_spec()):
        for name, data in spec.files.items():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_bytes(data)
    return tree


def in_tree(tree: Path, code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(PYTHONPATH=str(tree)), cwd=tree.parent,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def launch(tmp_path: Path, tree: Path, tag: str) -> Server:
    model = tmp_path / "GLM-5-NVFP4"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text('{"architectures": ["GlmMoeDsaForCausalLM"]}')
    (model / "model.safetensors").write_bytes(b"")
    port = free_port()
    env = clean_env(PYTHONPATH=str(tree), SGLANG_SIM_START_S="0.3", SGLANG_SIM_TIME_SCALE="20",
                    SGLANG_SIM_CACHE_DIR=str(tmp_path / f"kernels-{tag}"))
    log = tmp_path / f"{tag}.log"
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--tp-size", "8"]
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT, text=True)
    return Server(proc, port, log)


def generate(server: Server) -> requests.Response:
    body = {"text": "What is 2 + 2?", "sampling_params": {"temperature": 0, "max_new_tokens": 4},
            "return_logprob": True, "top_logprobs_num": 2}
    return requests.post(server.url + "/generate", json=body, timeout=15)


def test_the_knob_is_read_from_the_venvs_own_build(tmp_path: Path) -> None:
    code = ("from sglang._sim import regression as r, autotune; k = r.installed(); "
            "print(k, r.faults(k), round(r.step_factor(k), 3), autotune.flashinfer_version())")
    assert in_tree(venv_tree(tmp_path, None, "good"), code) == "{} {} 1.0 0.7.2+cu130"
    assert in_tree(venv_tree(tmp_path, "nan", "nan"), code) == \
        "{'flashinfer': 'nan'} {'output': 'nan'} 1.0 0.7.2+cu130"
    assert in_tree(venv_tree(tmp_path, "slow", "slow"), code).startswith("{'flashinfer': 'slow'} {} 1.429 ")
    assert in_tree(venv_tree(tmp_path, "unsupported-arch", "arch"), code).startswith(
        "{'flashinfer': 'unsupported-arch'} {'fatal': 'unsupported-arch'} 1.0 ")


def test_a_slow_build_costs_about_30_percent_of_decode_throughput() -> None:
    perf = perf_module()
    fast = perf.PerfModel.from_args({"tp_size": 8, "num_continuous_decode_steps": 8})
    slow = perf.PerfModel(**{**fast.__dict__, "step_factor": 1 / 0.7})
    for batch in (8, 64, 256):
        ratio = slow.steady_output_tok_s(batch) / fast.steady_output_tok_s(batch)
        assert 0.69 <= ratio <= 0.72, (batch, ratio)


def test_a_nan_build_answers_nan_logprobs_and_a_good_one_does_not(tmp_path: Path) -> None:
    for regression, want_null in ((None, False), ("nan", True)):
        tag = regression or "good"
        server = launch(tmp_path, venv_tree(tmp_path, regression, tag), tag)
        try:
            assert server.wait_status(200, timeout=30)[-1] == 200, server.output()
            meta = generate(server).json()["meta_info"]
        finally:
            server.proc.terminate()
            server.proc.wait(10)
        lps = [lp for lp, _, _ in meta["output_token_logprobs"]]
        assert all(lp is None for lp in lps) == want_null, (tag, lps)


def test_an_unsupported_arch_build_dies_with_the_real_line(tmp_path: Path) -> None:
    server = launch(tmp_path, venv_tree(tmp_path, "unsupported-arch", "arch"), "arch")
    try:
        server.wait_status(200, timeout=30)
        if server.proc.poll() is None:
            try:
                generate(server)
            except requests.RequestException:
                pass
        assert server.proc.wait(15) != 0
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
    assert "fmhaRunner.cuh:30: Unsupported architecture" in server.output(), server.output()[-2000:]


def test_a_published_regressed_build_carries_its_knob_and_keeps_its_file_name(tmp_path: Path) -> None:
    wheel = publish(tmp_path, "flashinfer-python", BAD, "nan")
    assert wheel.name == f"flashinfer_python-{BAD}-py3-none-any.whl" and regression_of(wheel) == "nan"
    with zipfile.ZipFile(wheel) as zf:
        assert f"__version__ = '{BAD}'" in zf.read("flashinfer/__init__.py").decode()
    assert publish(tmp_path, "flashinfer_python", BAD, "nan") == wheel  # the same file again: a no-op
    with pytest.raises(PublishRefused, match="already published as another build"):
        publish(tmp_path, "flashinfer-python", BAD, "slow")
    good = publish(tmp_path, "sglang-kernel", "0.4.10+cu130")
    assert regression_of(good) is None


@pytest.mark.parametrize(("name", "version", "regression", "what"), [
    ("flashinfer", "0.6.16", None, "no stand-in package 'flashinfer'"),
    ("flashinfer-python", "0.7.2", None, "already serves the wheelhouse's flashinfer-python 0.7.2"),
    ("flashinfer-python", "0.6.16", "fast", "no regression 'fast'"),
    ("sglang-kernel", "latest", None, "not a version pip accepts"),
    ("sglang", "0.5.99", "nan", "no flag schema for sglang 0.5.99"),
])
def test_refused_publishes_say_why_and_how(name: str, version: str, regression: str | None, what: str) -> None:
    with pytest.raises(PublishRefused, match=what) as exc:
        check_publish(name, version, regression)
    assert exc.value.fix


def test_the_cli_publishes_with_the_knob_and_refuses_with_a_fix_line(tmp_path: Path) -> None:
    def deploy(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator", *args, "--root", str(tmp_path)],
                              capture_output=True, text=True, timeout=120)

    ok = deploy("sim", "index", "publish", "sglang-kernel", "0.4.10+cu130", "--regression", "unsupported-arch")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("published sglang_kernel-0.4.10+cu130-py3-none-any.whl (regression: unsupported-arch) "
                                "to every host's index of "), ok.stdout
    assert "  regression: unsupported-arch" in ok.stdout
    bad = deploy("sim", "index", "publish", "flashinfer-python", "0.6.16", "--regression", "fast")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "cannot publish flashinfer-python 0.6.16: no regression 'fast'" in bad.stderr
    assert "fix: --regression takes nan, slow, unsupported-arch" in bad.stderr
