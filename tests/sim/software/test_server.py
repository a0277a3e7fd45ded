"""The simulated SGLang server: real flag parsing, health lifecycle, API shapes, fault knobs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from orchestrator.verdicts.server_log import CapturePhase, find_fatal
from simulator.config import FATAL_FAULTS

from .conftest import STANDIN, Server
from .standins import CtRoot, make_ct_root, with_userspace

REPO = Path(__file__).resolve().parents[3]


def _launch(*flags: str, version: str = "0.5.12.post1") -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(STANDIN), "SGLANG_SIM_VERSION": version, "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "sglang.launch_server", "--model-path", "/nonexistent", *flags],
                          env=env, capture_output=True, text=True, timeout=20)


def test_unknown_flag_exits_2_like_argparse() -> None:
    r = _launch("--no-such-flag")
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == "sglang serve: error: unrecognized arguments: --no-such-flag"


def test_bad_choice_exits_2() -> None:
    r = _launch("--nsa-decode-backend", "x")
    assert r.returncode == 2
    assert "argument --nsa-decode-backend: invalid choice: 'x' (choose from 'flashmla_sparse'" in r.stderr


def test_release_specific_flags() -> None:
    r = _launch("--nsa-decode-backend", "trtllm", version="0.5.23")
    assert r.returncode == 2 and "unrecognized arguments: --nsa-decode-backend trtllm" in r.stderr
    r = _launch("--cuda-graph-max-bs", "8", version="0.5.23")
    assert r.returncode == 2 and "ambiguous option: --cuda-graph-max-bs" in r.stderr


def test_programmatic_validation_api() -> None:
    code = ("import argparse; from sglang.srt.server_args import ServerArgs; p = argparse.ArgumentParser(); "
            "ServerArgs.add_cli_args(p); ns = p.parse_args(['--model-path', 'm', '--tp', '8']); "
            "print(ns.tensor_parallel_size, p._option_string_actions['--tp-size'].dest)")
    r = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(STANDIN)}, capture_output=True, text=True)
    assert r.stdout.split() == ["8", "tensor_parallel_size"]


def test_health_lifecycle_and_api(start_server: Callable[..., Server]) -> None:
    srv = start_server(None, "--served-model-name", "glm-5", "--tp", "8", "--enable-metrics", start_s=1.5)
    seen = srv.wait_status(200)
    # like real sglang, the port opens only after the model load: refused (None) first, never 200 before
    assert seen[0] is None and seen[-1] == 200, seen
    assert "The server is fired up and ready to roll!" in srv.output()
    assert "Load weight end." in srv.output() and "Set NSA backends for bf16 KV Cache" in srv.output()
    models = requests.get(srv.url + "/v1/models", timeout=5).json()
    assert models["data"][0]["id"] == "glm-5"
    body = {"model": "glm-5", "messages": [{"role": "user", "content": "What is 17 + 25?"}],
            "chat_template_kwargs": {"enable_thinking": False}}
    chat = requests.post(srv.url + "/v1/chat/completions", json=body, timeout=10).json()
    assert "42" in chat["choices"][0]["message"]["content"]
    assert chat["choices"][0]["message"]["reasoning_content"] is None
    assert chat["usage"]["total_tokens"] == chat["usage"]["prompt_tokens"] + chat["usage"]["completion_tokens"]
    body["chat_template_kwargs"] = {"enable_thinking": True}
    think = requests.post(srv.url + "/v1/chat/completions", json=body, timeout=10).json()
    assert think["choices"][0]["message"]["content"].startswith("<think>")
    gen = requests.post(srv.url + "/generate", json={"text": "hello", "sampling_params": {
        "max_new_tokens": 4, "ignore_eos": True}}, timeout=10).json()
    assert gen["meta_info"]["completion_tokens"] == 4 and len(gen["text"].split()) == 4
    with requests.post(srv.url + "/generate", json={"text": "hi", "stream": True, "sampling_params": {
            "max_new_tokens": 3, "ignore_eos": True}}, stream=True, timeout=10) as resp:
        events = [ln for ln in resp.iter_lines(decode_unicode=True) if ln]
    assert events[-1] == "data: [DONE]" and len(events) == 4
    info = requests.get(srv.url + "/server_info", timeout=5).json()
    assert info["version"] == "0.5.12.post1" and info["tp_size"] == 8 and info["nsa_decode_backend"]
    assert "internal_states" in info and info["max_running_requests"] == 1024
    metrics = requests.get(srv.url + "/metrics", timeout=5).text
    # the tokenizer's and the scheduler's series as real sglang 0.5.12.post1 labels them (real-h100/cold.metrics.txt)
    assert 'sglang:generation_tokens_total{engine_type="unified",model_name="glm-5"}' in metrics
    assert ('sglang:num_running_reqs{engine_type="unified",model_name="glm-5",moe_ep_rank="0",pp_rank="0",'
            'tp_rank="0"}') in metrics
    assert requests.post(srv.url + "/flush_cache", timeout=5).text.startswith("Cache flushed.")


def test_api_key_required(start_server: Callable[..., Server]) -> None:
    srv = start_server(None, "--api-key", "s3cret", start_s=0.2)
    assert srv.wait_status(200)[-1] == 200  # /health needs no key (sglang's probes are exempt): ready
    assert requests.get(srv.url + "/v1/models", timeout=5).status_code == 401
    ok = requests.get(srv.url + "/v1/models", headers={"Authorization": "Bearer s3cret"}, timeout=5)
    assert ok.status_code == 200
    # Without --enable-metrics real sglang mounts no /metrics: FastAPI's own 404 answers, in JSON.
    metrics = requests.get(srv.url + "/metrics", timeout=5)
    assert metrics.status_code == 404 and metrics.json() == {"detail": "Not Found"}
    assert metrics.text == '{"detail":"Not Found"}' and metrics.headers["Content-Type"] == "application/json"
    # As the real 0.5.12.post1 (tests/fixtures/sglang/server_info-0.5.12.post1.json): each DP rank's internal state
    # is the whole vars(server_args), the key included, plus the scheduler's own figures.
    info = requests.get(srv.url + "/server_info", headers={"Authorization": "Bearer s3cret"}, timeout=5).json()
    real = json.loads((REPO / "tests/fixtures/sglang/server_info-0.5.12.post1.json").read_text())
    rank = info["internal_states"][0]
    assert rank["api_key"] == "s3cret" and {"admin_api_key", "ssl_keyfile_password"} <= set(rank)
    extras = set(real["internal_states"][0]) - set(real)
    assert extras <= set(rank) - set(info), sorted(extras - set(rank))


@pytest.fixture
def ct(tmp_path: Path) -> CtRoot:
    """A container with all GPUs passed in and the host's userspace installed."""
    return with_userspace(make_ct_root(tmp_path / "ct"))


def test_fault_crash_on_start(ct: CtRoot, start_server: Callable[..., Server]) -> None:
    ct.set_state(crash_on_start=True)
    srv = start_server(ct, "--tp", "8", start_s=0.3)
    assert srv.proc.wait(15) == 1
    assert "Traceback (most recent call last):" in srv.output()


def test_fault_health_never_ok_and_slow_start(ct: CtRoot, start_server: Callable[..., Server]) -> None:
    ct.set_state(health_never_ok=True)
    never = start_server(ct, "--tp", "8", start_s=0.3)
    deadline = time.time() + 15  # faults are read at startup; only then change them
    while "Capture cuda graph begin" not in never.output() and time.time() < deadline:
        time.sleep(0.05)
    assert "Capture cuda graph begin" in never.output()
    ct.set_state(slow_start_s=2.0)
    slow = start_server(ct, "--tp", "8", start_s=0.3)
    time.sleep(1.0)
    assert slow.wait_status(200, timeout=0.2)[-1] != 200  # a normal start (0.3 s) would be ready by now
    assert slow.wait_status(200, timeout=10)[-1] == 200
    assert never.wait_status(200, timeout=0.5) == [None]  # stuck in graph capture: the port never opened
    assert never.proc.poll() is None and "ready to roll" not in never.output()


def test_fault_log_line(ct: CtRoot, start_server: Callable[..., Server]) -> None:
    line = "Assertion 'probability tensor contains either 'inf', 'nan' or element < 0' failed"
    ct.set_state(log_line=line)
    srv = start_server(ct, "--tp", "8", start_s=0.2)
    # Like the real NaN crash it strikes at the first decode: /health (one generated token) never answers 200.
    codes = srv.wait_status(200)
    assert 200 not in codes
    assert srv.proc.wait(15) == 1
    out = srv.output()
    assert "ready to roll" in out and line in out


def test_container_without_uvm_or_gpus_crashes(ct: CtRoot, start_server: Callable[..., Server]) -> None:
    for name in ("nvidia-uvm", "nvidia-uvm-tools"):
        (ct.root / "dev" / name).unlink()
    srv = start_server(ct, "--tp", "8", start_s=0.2)
    assert srv.proc.wait(15) == 1 and "CUDA unknown error" in srv.output()


@pytest.mark.parametrize("code", [c for c in FATAL_FAULTS if c != "capture-stuck"])
def test_fault_fatal_prints_the_real_line_the_tool_classifies(ct: CtRoot, start_server: Callable[..., Server],
                                                              code: str) -> None:
    ct.set_state(fatal=code)
    srv = start_server(ct, "--tp", "8", start_s=0.2)
    codes = srv.wait_status(200, timeout=5)
    assert 200 not in codes
    assert srv.proc.wait(15) == 1
    out = srv.output()
    hit = find_fatal(out.splitlines(), CapturePhase())
    assert hit is not None and hit.code == code, out
    # decode faults strike after "ready" (at the first generated token); an OOM in capture, before the port opens
    assert ("ready to roll" in out) == (code not in ("cuda-graph-oom", "cubin-fetch"))


def test_fault_fatal_capture_stuck_never_ends_capture(ct: CtRoot, start_server: Callable[..., Server]) -> None:
    ct.set_state(fatal="capture-stuck")
    srv = start_server(ct, "--tp", "8", start_s=0.2)
    deadline = time.time() + 15
    while "Capture cuda graph begin" not in srv.output() and time.time() < deadline:
        time.sleep(0.05)
    assert set(srv.wait_status(200, timeout=1.0)) == {None} and srv.proc.poll() is None  # the port never opens
    phase = CapturePhase()
    assert find_fatal(srv.output().splitlines(), phase) is None
    stuck = phase.stuck()
    assert stuck is not None and stuck.code == "capture-stuck"


def _generate_in_background(srv: Server, max_new: int = 4) -> tuple[threading.Thread, list[int]]:
    codes: list[int] = []

    def post() -> None:
        resp = requests.post(srv.url + "/generate", json={"text": "a long prompt", "sampling_params": {
            "max_new_tokens": max_new, "ignore_eos": True}}, timeout=60)
        codes.append(resp.status_code)

    thread = threading.Thread(target=post)
    thread.start()
    return thread, codes


def _until(check: Callable[[], bool], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _in_prefill(srv: Server) -> bool:
    """The background request is in its prefill (a fixed sleep for it was too short on a loaded machine: the check
    then ran before the prefill and answered at once). /get_load counts its tokens (every request not finished)
    but not the request: num_reqs is the running batch and the queue, not the prefill of the current round."""
    load = requests.get(srv.url + "/get_load", timeout=5).json()[0]
    return load["num_tokens"] > 0 and load["num_reqs"] == 0


def _draining(srv: Server) -> bool:
    """The server handled the SIGTERM (it logs this line and turns /health to 503 in one step of its loop)."""
    return "SIGTERM received." in srv.output()


def _timed_health(srv: Server) -> tuple[int, float]:
    t0 = time.monotonic()
    code = requests.get(srv.url + "/health", timeout=60).status_code
    return code, time.monotonic() - t0


def test_health_blocks_for_a_running_prefill_then_latches_unhealthy(ct: CtRoot,
                                                                  start_server: Callable[..., Server]) -> None:
    """sglang's health_generate waits for the scheduler's next output: a long prefill holds /health for its length
    (here 2 s, under the 20 s SGLANG_HEALTH_CHECK_TIMEOUT) and it answers 200; past the timeout it answers 503 and
    the server stays UnHealthy."""
    ct.set_state(slow_prefill_s=2.0)
    srv = start_server(ct, "--tp", "8", start_s=0.3)
    assert srv.wait_status(200)[-1] == 200
    thread, codes = _generate_in_background(srv)
    assert _until(lambda: _in_prefill(srv), 10)
    code, took = _timed_health(srv)
    thread.join()
    assert code == 200 and took >= 1.2, (code, took)  # held by the prefill, not the 0.25 s of an idle check
    assert codes == [200]

    ct.set_state(slow_prefill_s=4.0)
    short = start_server(ct, "--tp", "8", start_s=0.3, env_extra={"SGLANG_HEALTH_CHECK_TIMEOUT": "1"})
    assert short.wait_status(200)[-1] == 200
    thread, codes = _generate_in_background(short)
    assert _until(lambda: _in_prefill(short), 10)
    code, took = _timed_health(short)
    assert code == 503 and 1.0 <= took < 3.0, (code, took)
    assert "Health check failed. Server couldn't get a response from detokenizer for last 1 seconds" \
        in short.output()
    thread.join()
    code, took = _timed_health(short)  # latched: the prefill is over, the server still reads unhealthy
    assert codes == [200] and code == 503 and took < 0.5


def test_sigterm_answers_503_and_drains_in_flight_requests(ct: CtRoot, start_server: Callable[..., Server]) -> None:
    """The real sigterm_watchdog looks at the SIGTERM flag every 5 s, then drains in 5 s steps: a request longer than
    that first look is reported remaining, then finishes; then the server SIGKILLs itself (rc -9)."""
    ct.set_state(slow_prefill_s=6.0)
    srv = start_server(ct, "--tp", "8", start_s=0.3)
    assert srv.wait_status(200)[-1] == 200
    thread, codes = _generate_in_background(srv)
    assert _until(lambda: _in_prefill(srv), 10)  # in flight when the signal comes
    srv.proc.send_signal(signal.SIGTERM)
    assert _until(lambda: _draining(srv), 10)
    assert requests.get(srv.url + "/health", timeout=5).status_code == 503
    assert srv.proc.poll() is None  # still draining
    thread.join()
    assert codes == [200]  # the in-flight request finished, not cut
    assert srv.proc.wait(15) == -signal.SIGKILL  # real sglang SIGKILLs its own tree after the drain: rc -9
    out = srv.output()
    assert "SIGTERM received. signum=None frame=None. Draining requests and shutting down..." in out
    assert "Health check request received during shutdown. Returning 503." in out
    assert "Gracefully exiting... Remaining number of requests 1." in out
    assert "Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[]." in out


def test_cold_first_start_once_per_kernel_cache_then_warm_starts(ct: CtRoot,
                                                                 start_server: Callable[..., Server]) -> None:
    ct.set_state(warm_start_s=4.0, cold_start_s=8.0)  # model seconds, time scale 4: 1 s warm, +2 s the first time

    def start_time() -> float:
        t0 = time.monotonic()
        srv = start_server(ct, "--tp", "8")
        assert srv.wait_status(200, timeout=20)[-1] == 200
        took = time.monotonic() - t0
        srv.proc.send_signal(signal.SIGTERM)
        srv.proc.wait(10)
        return took

    cold, warm = start_time(), start_time()
    assert cold >= 2.8 and warm < cold - 1.5, (cold, warm)


# ------------------------------------------------ as the real server did (tests/fixtures/sglang/real-h100)

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "real-h100"
#: The lines the tool keys on (boot ledger, fatal verdicts, health wait, drain), each in the real start's log.
KEYED = ("Load weight begin.", "Load weight end.", "Capture cuda graph begin.", "Capture cuda graph end.",
         "Capture piecewise CUDA graph begin.", "Capture piecewise CUDA graph end.", "max_total_num_tokens=",
         "Uvicorn running on http://", "The server is fired up and ready to roll!",
         "SIGTERM received. signum=None frame=None. Draining requests and shutting down...",
         "Health check request received during shutdown. Returning 503.",
         "Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[].")


def test_the_lines_the_tool_keys_on_are_in_the_real_log_and_the_standins(
        start_server: Callable[..., Server]) -> None:
    real = (REAL / "cold.server.log").read_text()
    srv = start_server(None, "--enable-metrics", start_s=0.6, arch="LlamaForCausalLM",
                       env_extra={"SGLANG_SIM_GPU": "hopper"})
    assert srv.wait_status(200)[-1] == 200
    srv.proc.send_signal(signal.SIGTERM)
    assert _until(lambda: _draining(srv), 10)
    assert requests.get(srv.url + "/health", timeout=5).status_code == 503
    assert srv.proc.wait(10) == -signal.SIGKILL
    out = srv.output()
    for text in KEYED:
        assert text in real, text
        assert text in out, text
    assert "JIT-compiling" not in out  # the real server prints no JIT line


def test_hopper_defaults_as_the_real_server_resolves_them(start_server: Callable[..., Server]) -> None:
    """0.5.12.post1 on an H100: `Attention backend not specified. Use fa3 backend by default.` (moe.server.log),
    sampling flashinfer, MoE runner auto (cold.server.log's server_args)."""
    real = (REAL / "moe.server.log").read_text()
    line = "Attention backend not specified. Use fa3 backend by default."
    assert line in real
    srv = start_server(None, start_s=0.3, arch="LlamaForCausalLM", env_extra={"SGLANG_SIM_GPU": "hopper"})
    assert srv.wait_status(200)[-1] == 200
    assert line in srv.output() and "on SM120" not in srv.output()
    info = requests.get(srv.url + "/server_info", timeout=5).json()
    assert (info["attention_backend"], info["sampling_backend"], info["moe_runner_backend"]) == \
        ("fa3", "flashinfer", "auto")
    for name in ("sampling_backend='flashinfer'", "moe_runner_backend='auto'"):
        assert name in real
    given = start_server(None, "--attention-backend", "triton", start_s=0.3, arch="LlamaForCausalLM",
                         env_extra={"SGLANG_SIM_GPU": "hopper"})
    assert given.wait_status(200)[-1] == 200
    assert "Attention backend not specified" not in given.output()  # said only when it picked one
    sm120 = start_server(None, start_s=0.3, arch="LlamaForCausalLM")
    assert sm120.wait_status(200)[-1] == 200
    assert "Use flashinfer backend by default." in sm120.output()


def test_the_moe_warning_mid_line_and_no_piecewise_when_disabled(start_server: Callable[..., Server]) -> None:
    srv = start_server(None, "--disable-piecewise-cuda-graph", start_s=0.3, arch="Qwen3MoeForCausalLM",
                       env_extra={"SGLANG_SIM_GPU": "hopper"})
    assert srv.wait_status(200)[-1] == 200
    out = srv.output()
    (line,) = [ln for ln in out.splitlines() if "Using default MoE kernel config" in ln]
    assert line.startswith("Capturing batches (bs=")  # after the progress fragment, as in the real log
    assert "Capture piecewise CUDA graph begin" not in out


def test_get_load_and_root_answer_as_the_real_server(start_server: Callable[..., Server]) -> None:
    import json

    real = json.loads((REAL / "cold.endpoints.json").read_text()) if (REAL / "cold.endpoints.json").exists() else None
    srv = start_server(None, start_s=0.3)
    assert srv.wait_status(200)[-1] == 200
    root = requests.get(srv.url + "/", timeout=5)
    assert root.status_code == 200 and root.json() == "SGLang is running"
    load = requests.get(srv.url + "/get_load", timeout=5)
    assert load.status_code == 200
    (entry,) = load.json()
    assert set(entry) == {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens", "num_pending_tokens", "ts_tic"}
    assert entry["num_reqs"] == 0
    if real is not None:
        assert set(json.loads(real["GET /get_load"]["body"])[0]) == set(entry)


def test_metrics_names_and_labels_are_the_real_ones(start_server: Callable[..., Server]) -> None:
    import re

    def series(text: str) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for m in re.finditer(r"^(sglang:\w+)\{([^}]*)\}", text, re.M):
            out.setdefault(m[1], set()).add(",".join(sorted(kv.split("=")[0] for kv in m[2].split(","))))
        return out

    real = series((REAL / "cold.metrics.txt").read_text())
    srv = start_server(None, "--enable-metrics", start_s=0.3)
    assert srv.wait_status(200)[-1] == 200
    mine = series(requests.get(srv.url + "/metrics", timeout=5).text)
    assert mine
    for name, labels in mine.items():
        assert name in real, name
        assert labels <= real[name], (name, labels, real[name])


def test_each_start_leaves_its_prometheus_directory_as_the_real_one(
        tmp_path: Path, start_server: Callable[..., Server]) -> None:
    prom = tmp_path / "prom"
    prom.mkdir()
    for _ in range(2):
        srv = start_server(None, start_s=0.2, env_extra={"PROMETHEUS_MULTIPROC_DIR": str(prom)})
        assert srv.wait_status(200)[-1] == 200
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(10) == -signal.SIGKILL
    assert len(list(prom.iterdir())) == 2  # its SIGKILL never cleans up: the unit's RuntimeDirectory does


# ------------------------------------------------ each release's own lines (tests/fixtures/sglang/lines)

LINES = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "lines"
FATAL = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "fatal"


def test_the_0_5_23_stand_in_prints_0_5_23_s_capture_and_jit_lines(ct: CtRoot,
                                                                   start_server: Callable[..., Server]) -> None:
    """0.5.23 says `Capture target prefill …` then `Capture target decode CUDA graph begin. backend=…`, never
    `Capture cuda graph begin`; flashinfer 0.7.2 prints `Building JIT module …` when it compiles (a cold cache)."""
    real = (LINES / "0.5.23.log").read_text()
    ct.set_state(cold_start_s=2.0)
    srv = start_server(ct, start_s=0.3, version="0.5.23", arch="LlamaForCausalLM")
    assert srv.wait_status(200, timeout=20)[-1] == 200
    out = srv.output()
    for text in ("Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[",
                 "Capture target prefill CUDA graph end. elapsed=",
                 "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=",
                 "Capture target decode CUDA graph end. bs=[",
                 " - INFO - core.py:594 - flashinfer.jit: Building JIT module fused_moe_120; this can take several "
                 "minutes on first use.",
                 "The server is fired up and ready to roll!"):
        assert text in real, text
        assert text in out, text
    assert "Capture cuda graph" not in out and "Capture piecewise" not in out
    assert out.index("Capture target prefill") < out.index("Capture target decode")
    warm = start_server(ct, start_s=0.3, version="0.5.23", arch="LlamaForCausalLM")
    assert warm.wait_status(200, timeout=20)[-1] == 200
    assert "Building JIT module" not in warm.output()  # the module's library exists now


def test_the_0_5_23_stand_in_stuck_in_decode_capture_never_opens(ct: CtRoot,
                                                                  start_server: Callable[..., Server]) -> None:
    ct.set_state(health_never_ok=True)
    srv = start_server(ct, "--cuda-graph-backend-prefill", "disabled", start_s=0.3, version="0.5.23")
    deadline = time.time() + 15
    while "Capture target decode CUDA graph begin" not in srv.output() and time.time() < deadline:
        time.sleep(0.1)
    out = srv.output()
    assert "Capture target decode CUDA graph begin" in out and "Capture target prefill" not in out
    assert "CUDA graph end" not in out


def test_the_stand_in_dies_as_triton_does_without_a_c_compiler(ct: CtRoot,
                                                               start_server: Callable[..., Server]) -> None:
    """Triton 3.6.0's first kernel launch needs $CC, gcc or clang (tests/fixtures/sglang/fatal/no-c-compiler.log):
    a container without one never opens the port, and the journal carries the real line the verdict names."""
    real = (FATAL / "no-c-compiler.log").read_text().splitlines()[0]
    srv = start_server(ct, start_s=0.3, env_extra={"PATH": "/nonexistent"})
    assert srv.proc.wait(20) == 1
    out = srv.output()
    assert real in out
    hit = find_fatal(out.splitlines())
    assert hit is not None and hit.code == "no-c-compiler"
    assert "Capture" not in out  # it dies at the first kernel launch, before capture
    ok = start_server(ct, start_s=0.3, env_extra={"PATH": "/nonexistent", "CC": "/usr/bin/gcc"})
    assert ok.wait_status(200, timeout=20)[-1] == 200  # CC is where Triton looks first
