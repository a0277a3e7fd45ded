"""`python -m sglang.launch_server` (simulated): real flag parsing, sglang-like logs, HTTP API, fake GPUs.

Lifecycle: parse flags (argparse exits 2 like the real one) -> preflight checks against the simulated
container (device nodes, nvidia-uvm, userspace driver version, model dir) -> log the loading milestones -> bind
the HTTP port once the model is loaded, as real sglang starts uvicorn -> "The server is fired up and ready to roll!".
Faults from the container's state.json: crash_on_start, health_never_ok, log_line (fatal at the first decode),
slow_start_s, warm_start_s and cold_start_s (a real server's start: minutes, more on an empty kernel cache),
stall_after and slow_prefill_s (engine.py), fatal=CODE (a real failure line, FATAL_LINES, in the phase where the
real server prints it).

/health is sglang's health_generate: 503 while starting or exiting; else it waits, polling once a (model) second,
until the scheduler hands out any output after the check began, for at most SGLANG_HEALTH_CHECK_TIMEOUT (20 s,
real seconds as on the real server). A check that runs out answers 503 and latches the server UnHealthy: every
later /health is 503 at once. So /health blocks for the length of a running prefill (`slow_prefill_s`) and fails
past the timeout. SIGTERM is tokenizer_manager's sigterm_watchdog: /health answers 503, and the server waits in
5 s steps while requests remain (no bound; a latched UnHealthy server or SGL_FORCE_SHUTDOWN exits at once).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from sglang._sim import autotune, env, profiler, regression, toolchain
from sglang._sim.config_file import merge_config
from sglang._sim.engine import VOCAB, Engine, Req
from sglang._sim.flags import PROG, add_cli_args
from sglang._sim.http_server import App, Guard, HTTPError, Request, Response, Stream, json_response, text_response
from sglang._sim.perf import PerfModel
from sglang._sim.powercap import PowerCap
from sglang._sim.resolve import KV_TOKENS, model_architecture, nsa_log_line, resolve
from sglang._sim.tinymodel import answer, count_tokens, last_user_text, prompt_text, reasoning

DEFAULT_START_S = 2.0  # MODEL seconds in "loading" before ready, like every other time here (plus slow_start_s)

#: The `fatal=CODE` fault: (phase, line). The lines are the real ones in the deploy tool's
#: tests/fixtures/sglang/fatal/ (sources in its README); "capture" strikes after `Capture cuda graph begin`, before
#: the port opens, "decode" at the first generated token. capture-stuck has no line: capture never ends.
FATAL_LINES: dict[str, tuple[str, str]] = {
    "unsupported-arch": ("decode", "RuntimeError: Error in function 'TllmGenFmhaRunner' at /workspace/include/"
                                   "flashinfer/trtllm/fmha/fmhaRunner.cuh:30: Unsupported architecture"),
    "illegal-memory-access": ("decode", "RuntimeError: CUDA error: an illegal memory access was encountered"),
    "nccl-timeout": ("decode", "[rank0]:[E103 21:38:08.812271514 ProcessGroupNCCL.cpp:683] [Rank 0] Watchdog caught "
                               "collective operation timeout: WorkNCCL(SeqNum=16172, OpType=ALLREDUCE, NumelIn=615000, "
                               "NumelOut=615000, Timeout(ms)=600000) ran for 600006 milliseconds before timing out."),
    "cuda-graph-oom": ("capture", "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 "
                                  "MiB. GPU 0 has a total capacity of 94.97 GiB of which 301.56 MiB is free."),
    "capture-stuck": ("capture", ""),
    # An air-gapped site: the first use of a trtllm-gen kernel fetches it from NVIDIA's artifact repository (the
    # lines of flashinfer/jit/cubin_loader.py, the assertion as flashinfer-ai/flashinfer#2941 shows it). The
    # repository is FLASHINFER_CUBINS_REPOSITORY's, as flashinfer reads it (here a name that never resolves).
    "cubin-fetch": ("capture", "AssertionError: BatchedGemmEnums.h not found"),
}
REPORT_EVERY_S = 0.5
HEALTH_POLL_S = 1.0  # model seconds a /health generate takes at least
DRAIN_STEP_S = 5.0  # real seconds between the graceful exit's checks for remaining requests (sigterm_watchdog)


#: Where the real server's lines come from (the logger names matter to a custom logging config).
HTTP_LOGGER = "sglang.srt.entrypoints.http_server"
ENGINE_LOGGER = "sglang.srt.entrypoints.engine"
_custom_logging = False


def configure_logging() -> None:
    """Like sglang's configure_logger: $SGLANG_LOGGING_CONFIG_PATH (JSON dictConfig) replaces the default format."""
    global _custom_logging
    path = os.environ.get("SGLANG_LOGGING_CONFIG_PATH")
    if not path:
        return
    if not os.path.exists(path):
        raise Exception(f"Setting SGLANG_LOGGING_CONFIG_PATH from env with {path} but it does not exist!")
    import logging.config  # here: logging.config (with logging.handlers, socket, pickle) is for this case only

    with open(path, encoding="utf-8") as fh:
        logging.config.dictConfig(json.loads(fh.read()))
    _custom_logging = True


def log(msg: str, tp: int | None = None, logger: str = HTTP_LOGGER) -> None:
    if _custom_logging:
        import logging

        logging.getLogger(logger).info(msg)
        return
    stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    rank = f" TP{tp}" if tp is not None else ""
    sys.stdout.write(f"[{stamp}{rank}] {msg}\n")
    sys.stdout.flush()


def log_raw(fragment: str) -> None:
    """A fragment without a newline (a tqdm progress bar's), which the next line continues, as in the real log."""
    if not _custom_logging:
        sys.stdout.write(fragment)


def crash(exc_line: str, where: str = "model_runner.py") -> NoReturn:
    """Print a traceback-shaped failure and exit 1, the way a real startup crash ends."""
    log("Scheduler hit an exception: Traceback (most recent call last):", tp=0)
    sys.stdout.write(
        f'  File "/usr/local/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 3023, in '
        "run_scheduler_process\n    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, "
        f'pp_rank, dp_rank)\n  File "/usr/local/lib/python3.11/site-packages/sglang/srt/model_executor/{where}", '
        f"line 412, in __init__\n    self.init_torch_distributed()\n{exc_line}\n\n"
    )
    log("Received sigquit from a child process. It usually means the child failed.")
    sys.stdout.flush()
    os._exit(1)


class Sim:
    """Everything the HTTP handlers share."""

    def __init__(self, args: dict[str, Any], version: str) -> None:
        self.args = args
        self.version = version
        self.faults = env.ct_faults()
        match = self.faults.get("match")
        if match and str(match) not in " ".join(sys.argv):
            self.faults = {}  # the faults belong to another flag set
        knobs = regression.installed()  # a regressed build in this venv misbehaves whatever the flag set
        self.faults = {**self.faults, **regression.faults(knobs)}
        self.scale = env.time_scale()
        perf = env.ct_faults()  # a noisy machine is the host's, whatever flag set `match` names
        stall = self.faults.get("stall_after")
        # The venv's (maybe patched) release decides whether the MoE backend is autotuned at start.
        self.autotune = autotune.plan(args, autotune.hf_config_class(model_architecture(str(args["model_path"]))))
        perf_model = replace(PerfModel.from_args(args), moe_autotuned=self.autotune.faster,
                             step_factor=regression.step_factor(knobs))
        self.engine = Engine(perf_model, self.scale, noise=float(perf.get("perf_noise") or 0.0),
                             seed=int(perf.get("perf_seed") or 0),
                             stall_after=None if stall is None else int(stall),
                             slow_prefill_s=float(self.faults.get("slow_prefill_s") or 0))
        self.ready = False
        self.exiting = False  # SIGTERM received: draining (tokenizer_manager.gracefully_exit)
        self.unhealthy = False  # a health check ran out (ServerStatus.UnHealthy): latched
        self.health_timeout_s = env.health_check_timeout_s()
        self.started = time.time()
        self.attention_defaulted = False  # no --attention-backend: the server says which it picked
        self.prometheus_dir: tempfile.TemporaryDirectory[str] | None = None
        self.api_key: str | None = args.get("api_key")
        self.stop = asyncio.Event()
        self.profile: profiler.ProfileSession | None = None
        self.watchdog_t0 = time.monotonic()  # the tokenizer manager's sigterm_watchdog polls every 5 s from here

    @property
    def name(self) -> str:
        return str(self.args["served_model_name"])

    def server_info(self) -> dict[str, Any]:
        """As sglang 0.5.12.post1 answers (tests/fixtures/sglang/server_info-0.5.12.post1.json): the server args at
        the top, and `internal_states` one per DP rank, each the scheduler's whole `vars(server_args)` (its API keys
        and `ssl_keyfile_password` included) plus its own figures."""
        info = {k: v for k, v in self.args.items() if _jsonable(v)}
        rank = {**info, "_mx_config_cache": {}, "use_mla_backend": False, "_quantization_explicitly_unset": False,
                "effective_max_running_requests_per_dp": int(self.args.get("max_running_requests") or 0),
                "last_gen_throughput": round(self.engine.gen_throughput, 2),
                "memory_usage": {"weight": 57.06, "kvcache": 29.32, "token_capacity": KV_TOKENS, "graph": 1.23},
                "grpc_port": int(self.args.get("port") or 30000) + 10000, "enable_grpc": False}
        info.update(
            version=self.version,
            max_total_num_tokens=KV_TOKENS,
            max_req_input_len=int(self.args.get("context_length") or 0) - 5,
            internal_states=[dict(rank) for _ in range(max(1, int(self.args.get("dp_size") or 1)))],
        )
        return info


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


# ------------------------------------------------------------------------------------------------- routes

def _auth_guard(sim: Sim) -> Guard:
    def auth(request: Request) -> Response | None:
        # Like sglang's add_api_key_middleware: probes (/health*, /metrics) and OPTIONS need no key.
        exempt = request.method == "OPTIONS" or request.path.startswith(("/health", "/metrics"))
        if sim.api_key and not exempt and request.header("Authorization") != f"Bearer {sim.api_key}":
            return json_response({"error": "Unauthorized"}, status=401)
        return None

    return auth


def build_app(sim: Sim) -> App:
    app = App(guard=_auth_guard(sim))

    async def health(request: Request) -> Response:
        if sim.exiting:
            log("Health check request received during shutdown. Returning 503.")
            return Response(status=503)
        if not sim.ready or sim.unhealthy:
            return Response(status=503)
        _decode(sim)  # sglang's /health generates one token,
        ok = await health_generate(sim) and not sim.faults.get("health_never_ok")
        return Response(status=200 if ok else 503)

    async def models(request: Request) -> Response:
        return json_response({"object": "list", "data": [{
            "id": sim.name, "object": "model", "created": int(sim.started), "owned_by": "sglang",
            "root": sim.name, "max_model_len": sim.args.get("context_length")}]})

    async def model_info(request: Request) -> Response:
        return json_response({
            "model_path": sim.args["model_path"], "tokenizer_path": sim.args["tokenizer_path"],
            "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
            "has_image_understanding": False, "has_audio_understanding": False,
            "model_type": "glm_moe_dsa", "architectures": [model_architecture(str(sim.args["model_path"]))]})

    async def server_info(request: Request) -> Response:
        return json_response(sim.server_info())

    async def flush_cache(request: Request) -> Response:
        if sim.engine.num_running or sim.engine.num_queued:
            return text_response("Cache not flushed. Please check backend logs for more details. (When there are "
                                 "running or waiting requests, the operation will not be performed.)\n", 400)
        return text_response("Cache flushed.\nPlease check backend logs for more details. (When there are running "
                             "or waiting requests, the operation will not be performed.)\n")

    async def metrics(request: Request) -> Response:
        if not sim.args.get("enable_metrics"):
            # Real sglang mounts /metrics only with --enable-metrics: without it FastAPI's own 404 answers.
            return Response(404, b'{"detail":"Not Found"}', "application/json")
        return text_response(_metrics(sim))

    async def root(request: Request) -> Response:
        return json_response("SGLang is running")  # real 0.5.12.post1: `"SGLang is running"`

    async def get_load(request: Request) -> Response:
        # real 0.5.12.post1 (tests/fixtures/sglang/real-h100/endpoints_get_load.json): one entry per DP rank
        e = sim.engine
        return json_response([{"dp_rank": None, "num_reqs": e.num_running + e.num_queued,
                               "num_waiting_reqs": e.num_queued,
                               "num_tokens": sum(r.input_len + len(r.out) for r in e.in_flight),
                               "num_pending_tokens": 0, "ts_tic": round(time.monotonic(), 9)}])

    for path, handler in (("/", root), ("/get_load", get_load),
                          ("/health", health), ("/health_generate", health), ("/v1/models", models),
                          ("/get_model_info", model_info), ("/model_info", model_info), ("/server_info", server_info),
                          ("/get_server_info", server_info), ("/metrics", metrics)):
        app.route("GET", path, handler)  # HEAD too, as aiohttp's add_get
    app.route("*", "/flush_cache", flush_cache)
    app.route("*", "/start_profile", lambda req: _start_profile(sim, req))
    app.route("*", "/stop_profile", lambda req: _stop_profile(sim))
    app.route("POST", "/generate", lambda req: _generate(sim, req))
    app.route("PUT", "/generate", lambda req: _generate(sim, req))
    app.route("POST", "/v1/chat/completions", lambda req: _chat(sim, req))
    app.route("POST", "/v1/completions", lambda req: _completions(sim, req))
    return app


async def health_generate(sim: Sim) -> bool:
    """http_server.health_generate: poll once a second (`await asyncio.sleep(1)`) until the scheduler has handed
    out anything since the check began (an idle one answers the check's own token at once); past
    SGLANG_HEALTH_CHECK_TIMEOUT the server is UnHealthy from then on. A stalled engine (the `stall_after` fault,
    sglang#22779) still answers: the bug it models is a /health at 200 while generation hangs."""
    e = sim.engine
    tic = time.time()
    while True:
        await asyncio.sleep(HEALTH_POLL_S / env.time_scale())
        if e.stalled or not e.in_flight or e.last_round_wall > tic:
            return True
        if time.time() - tic >= sim.health_timeout_s:
            sim.unhealthy = True
            log(f"Health check failed. Server couldn't get a response from detokenizer for last "
                f"{sim.health_timeout_s:g} seconds. tic start time: {tic:.2f}. last_heartbeat time: "
                f"{e.last_round_wall:.2f}")
            return False


def _metrics(sim: Sim) -> str:
    """Real sglang's /metrics series, names, types and labels (0.5.12.post1 on an H100,
    tests/fixtures/sglang/real-h100/cold.metrics.txt): the scheduler's gauges carry `engine_type`, `model_name`,
    `moe_ep_rank`, `pp_rank` and `tp_rank` (one scheduler reports, rank 0 of the one pipeline stage); the
    tokenizer manager's counters carry `engine_type` and `model_name`."""
    e = sim.engine
    tokenizer = f'engine_type="unified",model_name="{sim.name}"'
    scheduler = f'engine_type="unified",model_name="{sim.name}",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    used = sum(r.input_len + len(r.out) for r in e.running)
    rows = [
        ("num_running_reqs", "gauge", "The number of running requests.", e.num_running, scheduler),
        ("num_queue_reqs", "gauge", "The number of requests in the waiting queue.", e.num_queued, scheduler),
        ("num_used_tokens", "gauge", "The number of used tokens.", used, scheduler),
        ("token_usage", "gauge", "The token usage.", round(used / KV_TOKENS, 4), scheduler),
        ("gen_throughput", "gauge", "The generation throughput (token/s).", round(e.gen_throughput, 2), scheduler),
        ("cache_hit_rate", "gauge", "The prefix cache hit rate.", 0.0, scheduler),
        ("prompt_tokens_total", "counter", "Number of prefill tokens processed.", e.prompt_tokens_total, tokenizer),
        ("generation_tokens_total", "counter", "Number of generation tokens processed.", e.generation_tokens_total,
         tokenizer),
        ("num_requests_total", "counter", "Number of requests processed.", e.requests_total, tokenizer),
    ]
    out = []
    for name, kind, help_, value, labels in rows:
        out += [f"# HELP sglang:{name} {help_}", f"# TYPE sglang:{name} {kind}",
                f"sglang:{name}{{{labels}}} {float(value)}"]
    # The scheduler's live counter (real sglang: "updated on each log interval"), by mode.
    out += ["# HELP sglang:realtime_tokens_total Total number of tokens processed (updated on each log interval). "
            "mode: prefill_compute, prefill_cache, decode.",
            "# TYPE sglang:realtime_tokens_total counter"]
    out += [f'sglang:realtime_tokens_total{{{scheduler},mode="{mode}"}} {float(v)}' for mode, v in e.realtime.items()]
    return "\n".join(out) + "\n"


def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = request.json()
    except ValueError as exc:  # UnicodeDecodeError included
        raise HTTPError(text_response(json.dumps({"error": f"invalid JSON body: {exc}"}), 400,
                                      "application/json")) from None
    if not isinstance(body, dict):
        raise HTTPError(text_response('{"error": "body must be a JSON object"}', 400, "application/json"))
    return body


async def _start_profile(sim: Sim, request: Request) -> Response:
    """sglang's /start_profile (GET or POST, body optional): answers at once; with num_steps the traces are written
    once that many decode steps ran (sglang/_sim/profiler.py)."""
    parsed = profiler.parse_request(_json_body(request) if request.body.strip() else {})
    if isinstance(parsed, list):
        return json_response({"detail": parsed}, 422)
    if sim.profile is not None:  # the scheduler's "Profiling is already in progress" raised in the tokenizer manager
        return text_response("Internal Server Error", 500)
    session = profiler.ProfileSession(parsed, str(time.time()))
    sim.profile = session

    def on_decode(batch: int, steps: int, step_ms: float) -> None:
        if session.on_decode(batch, steps, step_ms):
            _finish_profile(sim)

    sim.engine.on_decode = on_decode
    log(f"Profiling starts. Traces will be saved to: {session.output_dir()} (with profile id: {session.profile_id})",
        tp=0, logger="sglang.srt.managers.scheduler_profiler_mixin")
    return text_response("Start profiling.\n")


async def _stop_profile(sim: Sim) -> Response:
    if sim.profile is None:
        return text_response("Internal Server Error", 500)  # "Profiling is not in progress. Call /start_profile first."
    _finish_profile(sim)
    return text_response("Stop profiling. This will take some time.\n")


def _finish_profile(sim: Sim) -> None:
    """Write every rank's trace of the steps collected, shaped by the container's kernel_shape fault (read now, so
    `deploy sim fault` applies to the next window without a restart)."""
    session, sim.profile, sim.engine.on_decode = sim.profile, None, None
    if session is None:
        return
    faults = env.ct_faults()
    shape = faults.get("kernel_shape") or None
    slow = faults.get("slow_rank")
    paths = profiler.write_traces(
        session.output_dir(), profile_id=session.profile_id, prefix=session.req.profile_prefix,
        by_stage=session.req.profile_by_stage, tp=sim.engine.perf.tp, steps=session.steps,
        shape=str(shape) if shape else None, slow_rank=None if slow is None else int(slow),
        custom_ar=sim.engine.perf.custom_all_reduce, start_us=session.start_us)
    log(f"Profiling done. Traces are saved to: {session.output_dir()} ({len(paths)} files)", tp=0,
        logger="sglang.srt.managers.scheduler_profiler_mixin")


def _decode(sim: Sim) -> None:
    """A decode step: the `log_line` fault (a NaN in the sampler, …) ends the server at its first one, as the real
    crash does, so no client can finish a request before the fatal line is in the journal."""
    if sim.faults.get("log_line"):
        log(str(sim.faults["log_line"]), tp=0)
        crash(f"RuntimeError: {sim.faults['log_line']}")
    line = fatal_fault(sim, "decode")
    if line:
        crash(line)


def fatal_fault(sim: Sim, phase: str) -> str | None:
    """The `fatal=CODE` fault's line when it strikes in `phase` ("" for a capture that never ends), else None."""
    code = str(sim.faults.get("fatal") or "")
    spec = FATAL_LINES.get(code)
    if spec is None or spec[0] != phase:
        return None
    return f"{cubin_fetch_lines()}\n{spec[1]}" if code == "cubin-fetch" else spec[1]


def cubin_fetch_lines() -> str:
    """What flashinfer prints before that assertion: its fetch of a kernel header, which cannot reach the artifact
    repository, retried 4 times."""
    repo = os.environ.get("FLASHINFER_CUBINS_REPOSITORY", "https://cubins.invalid/sw-kernelinferencelibrary/")
    name = "2905357454bd2441a9495d73c42d97117e529d59/batched_gemm/include/BatchedGemmEnums.h"
    url = repo.rstrip("/") + "/" + name
    host = url.split("/")[2] if "://" in url else url
    return "\n".join([f"flashinfer.jit: Fetching {name} from {url}",
                      *(f"flashinfer.jit: Downloading {url}: attempt {n} failed: HTTPSConnectionPool(host='{host}', "
                        "port=443): Max retries exceeded" for n in range(1, 5)),
                      "flashinfer.jit: Max retries reached. Download failed."])


def _not_ready(sim: Sim) -> Response | None:
    if not sim.ready:
        return json_response({"error": {"message": "The server is not ready yet.", "code": 503}}, status=503)
    _decode(sim)
    return None


def _stop_len(max_new: int, seed: int) -> int:
    """Where the model emits EOS when ignore_eos is off: deterministic, within [1, max_new]."""
    return max(1, min(max_new, 16 + (seed * 37) % max(max_new, 1)))


async def _sse(request: Request) -> Stream:
    return await request.stream({"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})


async def _drain(req: Req) -> None:
    while await req.chunks.get() is not None:
        pass


async def _generate(sim: Sim, request: Request) -> Response | Stream:
    if (nr := _not_ready(sim)) is not None:
        return nr
    body = _json_body(request)
    sp = body.get("sampling_params") or {}
    text = body.get("text")
    ids = body.get("input_ids")
    input_len = len(ids) if isinstance(ids, list) else count_tokens(str(text or ""))
    max_new = int(sp.get("max_new_tokens", 128))
    if not sp.get("ignore_eos", False):
        max_new = _stop_len(max_new, input_len)
    t0 = time.time()
    if body.get("return_logprob") and not body.get("stream"):
        return await _generate_logprobs(sim, body, input_len, max_new, t0)
    req = sim.engine.submit(input_len, max_new)

    def meta(done: bool) -> dict[str, Any]:
        reason = ({"type": "length", "length": len(req.out)} if sp.get("ignore_eos") or len(req.out) >= int(
            sp.get("max_new_tokens", 128)) else {"type": "stop", "matched": 151336}) if done else None
        return {"id": req.rid, "finish_reason": reason, "prompt_tokens": req.input_len,
                "completion_tokens": len(req.out), "cached_tokens": 0, "weight_version": "default",
                "e2e_latency": (time.time() - t0) * sim.scale}

    if not body.get("stream"):
        await _drain(req)
        return json_response({"text": "".join(" " + w for w in req.out), "meta_info": meta(True)})
    resp = await _sse(request)
    try:
        while (chunk := await req.chunks.get()) is not None:
            if not chunk:
                continue
            data = {"text": "".join(" " + w for w in req.out), "meta_info": meta(req.finished)}
            await resp.write(f"data: {json.dumps(data)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        sim.engine.abort(req)
        raise
    return resp


async def _generate_logprobs(sim: Sim, body: dict[str, Any], input_len: int, max_new: int,
                             t0: float) -> Response:
    """/generate with return_logprob: a deterministic answer for (model, prompt) with its logprobs (golden.py),
    shaped by the `output=` and `drift=` faults."""
    from sglang._sim import golden  # here: hashlib and the logprob tables, for the correctness gate's requests only

    sp = body.get("sampling_params") or {}
    prompt = str(body.get("text") or body.get("input_ids") or "")
    toks = golden.tokens(str(sim.args["model_path"]), prompt, max_new, str(sim.faults.get("output") or "ok"),
                         float(sim.faults.get("drift") or 0))
    req = sim.engine.submit(input_len, len(toks), words=[t.text for t in toks])
    await _drain(req)
    toks = toks[:len(req.out)]
    top_n = max(0, min(int(body.get("top_logprobs_num") or 0), golden.CANDIDATES))
    limit = int(sp.get("max_new_tokens", 128))
    reason = {"type": "length", "length": len(toks)} if len(toks) >= limit else {"type": "stop", "matched": 151336}
    meta = {"id": req.rid, "finish_reason": reason, "prompt_tokens": req.input_len, "completion_tokens": len(toks),
            "cached_tokens": 0, "weight_version": "default", "e2e_latency": (time.time() - t0) * sim.scale,
            **golden.logprob_fields(toks, top_n, golden.word_id(input_len % len(VOCAB)),
                                    with_text=bool(body.get("return_text_in_logprobs")))}
    return json_response({"text": "".join(t.text for t in toks), "output_ids": [t.id for t in toks],
                              "meta_info": meta})


def _usage(req: Req) -> dict[str, Any]:
    return {"prompt_tokens": req.input_len, "completion_tokens": len(req.out),
            "total_tokens": req.input_len + len(req.out), "prompt_tokens_details": None}


async def _chat(sim: Sim, request: Request) -> Response | Stream:
    if (nr := _not_ready(sim)) is not None:
        return nr
    body = _json_body(request)
    messages = body.get("messages") or []
    if not isinstance(messages, list) or not messages:
        return json_response({"object": "error", "message": "messages must be a non-empty list",
                                  "type": "BadRequestError", "param": None, "code": 400}, status=400)
    question = last_user_text(messages)
    kwargs = body.get("chat_template_kwargs") or {}
    thinking = bool(kwargs.get("enable_thinking", True))
    think_words = reasoning(question).split() if thinking else []
    content_words = answer(question).split()
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    words = think_words + content_words
    if max_tokens:
        words = words[: int(max_tokens)]
    separate = bool(sim.args.get("reasoning_parser"))
    req = sim.engine.submit(count_tokens(prompt_text(messages)), len(words), words=words)
    cid = f"chatcmpl-{req.rid[:24]}"
    created = int(time.time())
    n_think = len(think_words)

    def split(out: list[str], start: int = 0) -> tuple[str | None, str | None]:
        think = " ".join(out[start:n_think]) if start < n_think else ""
        cont = " ".join(out[max(start, n_think):])
        if not separate and thinking:
            return None, ("<think>" + think + "</think>" if think else "") + cont
        return (think or None), (cont or None)

    finish = "length" if max_tokens and len(words) < n_think + len(content_words) else "stop"
    if not body.get("stream"):
        await _drain(req)
        rc, content = split(req.out)
        return json_response({
            "id": cid, "object": "chat.completion", "created": created, "model": body.get("model") or sim.name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content or "",
                                                 "reasoning_content": rc, "tool_calls": None},
                         "logprobs": None, "finish_reason": finish, "matched_stop": None}],
            "usage": _usage(req)})
    resp = await _sse(request)
    sent = 0
    while (chunk := await req.chunks.get()) is not None:
        if not chunk:
            continue
        rc, content = split(req.out, sent)
        sent = len(req.out)
        delta: dict[str, Any] = {"role": "assistant"} if sent == len(chunk) else {}
        if rc:
            delta["reasoning_content"] = rc + " "
        if content:
            delta["content"] = content + " "
        data = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": sim.name,
                "choices": [{"index": 0, "delta": delta, "logprobs": None,
                             "finish_reason": finish if req.finished else None}], "usage": None}
        await resp.write(f"data: {json.dumps(data)}\n\n".encode())
    if (body.get("stream_options") or {}).get("include_usage"):
        data = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": sim.name,
                "choices": [], "usage": _usage(req)}
        await resp.write(f"data: {json.dumps(data)}\n\n".encode())
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def _completions(sim: Sim, request: Request) -> Response | Stream:
    if (nr := _not_ready(sim)) is not None:
        return nr
    body = _json_body(request)
    prompt = body.get("prompt") or ""
    input_len = len(prompt) if isinstance(prompt, list) else count_tokens(str(prompt))
    max_new = int(body.get("max_tokens") or 16)
    if not body.get("ignore_eos", False):
        max_new = _stop_len(max_new, input_len)
    req = sim.engine.submit(input_len, max_new)
    cid = f"cmpl-{req.rid[:24]}"
    created = int(time.time())
    if not body.get("stream"):
        await _drain(req)
        return json_response({"id": cid, "object": "text_completion", "created": created, "model": sim.name,
                                  "choices": [{"index": 0, "text": "".join(" " + w for w in req.out),
                                               "logprobs": None, "finish_reason": "length"}],
                                  "usage": _usage(req)})
    resp = await _sse(request)
    while (chunk := await req.chunks.get()) is not None:
        if not chunk:
            continue
        data = {"id": cid, "object": "text_completion", "created": created, "model": sim.name,
                "choices": [{"index": 0, "text": "".join(" " + w for w in chunk), "logprobs": None,
                             "finish_reason": "length" if req.finished else None}],
                "usage": _usage(req) if req.finished else None}
        await resp.write(f"data: {json.dumps(data)}\n\n".encode())
    await resp.write(b"data: [DONE]\n\n")
    return resp


# ------------------------------------------------------------------------------------------------- GPUs

def visible_minors(tp: int) -> list[int]:
    """Minor numbers of the GPUs this server drives (the first `tp` the container can see)."""
    if env.vmid() is None:
        return list(range(tp))
    minors = sorted(int(p.name[6:]) for p in env.dev_dir().glob("nvidia[0-9]*") if p.name[6:].isdigit())
    return minors[:tp]


def preflight(args: dict[str, Any]) -> None:
    """Fail like CUDA/torch would when the container is not set up right."""
    tp = int(args["tp_size"])
    if env.vmid() is not None:
        dev = env.dev_dir()
        if not (dev / "nvidiactl").exists() or not visible_minors(tp):
            crash("RuntimeError: No CUDA GPUs are available")
        if not (dev / "nvidia-uvm").exists():
            crash("RuntimeError: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. "
                  "changing env variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices "
                  "to be zero.")
        user_v = env.userspace_version()
        if user_v is None:
            crash("RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU "
                  "and installed a driver from http://www.nvidia.com/Download/index.aspx")
        driver = str(env.host_config().get("driver_version") or "")
        if user_v and driver and user_v != driver:
            crash("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before "
                  "calling NumCudaDevices() that might have already set an error? Error 803: system has unsupported "
                  "display driver / cuda driver combination")
        if len(visible_minors(tp)) < tp:
            crash("torch.distributed.DistBackendError: NCCL error: invalid usage; CUDA error: invalid device ordinal "
                  f"(tp_size={tp} but only {len(visible_minors(tp))} GPUs are visible)")
    model = str(args["model_path"])
    if not Path(model).exists():
        if model.startswith(("/", ".")):
            crash(f"OSError: {model} does not appear to have a file named config.json. Checkout "
                  f"'https://huggingface.co/{model}/tree/main' for available files.", where="model_config.py")
        crash(f"OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in "
              f"the cached files. Check your internet connection or see how to run the library in offline mode at "
              f"'https://huggingface.co/docs/transformers/installation#offline-mode'. ({model})",
              where="model_config.py")
    folder = Path(model)
    if folder.is_dir():
        # the model loader's _prepare_weights: the *.safetensors in the folder (those the index names, when there is
        # one); none at all is its RuntimeError. (Some missing shards load silently in real sglang: not modelled.)
        shards = {p.name for p in folder.glob("*.safetensors")}
        index = folder / "model.safetensors.index.json"
        if index.is_file():
            try:
                shards &= set(json.loads(index.read_text()).get("weight_map", {}).values())
            except ValueError:
                pass
        if not shards:
            crash(f"RuntimeError: Cannot find any model weights with `{model}`")


def load_file() -> Path | None:
    folder = env.gpu_dir()
    return folder / f"load-{env.vmid() or 0}.json" if folder else None


async def report_load(sim: Sim, minors: list[int]) -> None:
    """Tell the simulated nvidia-smi how busy our GPUs are (see simulator/gpu/telemetry.py)."""
    path = load_file()
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    mem = float(sim.args.get("mem_fraction_static") or 0.85)
    while True:
        e = sim.engine
        active = (time.time() - e.last_round_wall) < 1.0
        pf = e.power_fraction if active else 0.0
        data = {"vmid": env.vmid(), "pid": os.getpid(), "updated": time.time(), "minors": minors,
                "power_fraction": round(pf, 4), "util": round(e.busy_fraction if active else 0.0, 4),
                "mem_fraction": mem if sim.ready else mem * 0.6, "pcie_rx_mb_s": round(30 + 420 * pf),
                "pcie_tx_mb_s": round(25 + 380 * pf)}
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)
        await asyncio.sleep(REPORT_EVERY_S)


def remove_load_file() -> None:
    path = load_file()
    if path is not None:
        path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------- startup

def prometheus_multiproc_dir() -> tempfile.TemporaryDirectory[str]:
    """sglang's `set_prometheus_multiproc_dir` (0.5.12.post1, utils/common.py): a temporary directory inside
    PROMETHEUS_MULTIPROC_DIR when set, else in /tmp. Its SIGKILL at exit never removes it: each start leaves one
    (the unit points the variable at its RuntimeDirectory, which systemd removes at stop)."""
    parent = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return tempfile.TemporaryDirectory(dir=parent) if parent else tempfile.TemporaryDirectory()


#: The time real sglang 0.5.12.post1 spends on imports before its first line, as a share of its start (15 of 122 s
#: cold on an H100, tests/fixtures/sglang/real-h100/cold.server.log).
IMPORTS_SHARE = 0.5  # of one of the start's six steps


async def startup(sim: Sim, bind: Callable[[], Awaitable[None]]) -> None:
    """The start's lines and phases as real sglang prints them (tests/fixtures/sglang/real-h100): imports (no line),
    weights, decode-graph capture, piecewise capture (0.5.12, on unless disabled), warmup; 0.5.23 captures its
    prefill graphs before the decode graphs, in its own words (tests/fixtures/sglang/lines). A cold kernel cache
    adds its time to capture, as the real JIT's does (58 s cold, 1.7 s warm); on 0.5.23 flashinfer 0.7.2 prints
    its `Building JIT module` line, 0.5.12.post1's flashinfer prints none."""
    a, tp = sim.args, int(sim.args["tp_size"])
    # slow_start_s is real seconds: a test that injects a slow start means a wall-clock window it can act in.
    warm = sim.faults.get("warm_start_s")
    base_s = (float(warm) / sim.scale if warm is not None
              else float(os.environ.get("SGLANG_SIM_START_S", DEFAULT_START_S / sim.scale)))
    start_s = base_s + float(sim.faults.get("slow_start_s") or 0)
    step = start_s / 6
    cold_s = float(sim.faults.get("cold_start_s") or 0) / sim.scale
    # The JIT's results: a start that finds none compiles (for cold_s model seconds, the fault's cost) and writes
    # them, as flashinfer's and triton's JIT write their caches whatever the compile took.
    marker = env.kernel_cache_dir() / f"compiled-{sim.version}"
    empty = not marker.exists()
    cold = cold_s > 0 and empty
    await asyncio.sleep(step * IMPORTS_SHARE)
    if sim.attention_defaulted:
        log(f"Attention backend not specified. Use {a['attention_backend']} backend by default.")
    log(nsa_log_line(a, sim.version))
    if not env.hopper():
        log(f"Use {a.get('moe_runner_backend')} as MoE runner backend on SM120")
    for rank in range(tp):
        log("Init torch distributed begin.", tp=rank)
    await asyncio.sleep(step * (1 - IMPORTS_SHARE))
    if sim.faults.get("crash_on_start"):
        crash("RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
              "asynchronously reported at some other API call, so the stacktrace below might be incorrect.")
    log("Load weight begin. avail mem=94.12 GB", tp=0)
    await asyncio.sleep(step * 2)
    arch = model_architecture(str(a["model_path"]))
    log(f"Load weight end. type={arch}, dtype=torch.bfloat16, avail mem=37.06 GB, mem usage=57.06 GB.", tp=0)
    log(f"KV Cache is allocated. #tokens: {KV_TOKENS}, KV size: 29.32 GB", tp=0)
    if env.real_container():  # Triton's first kernel launch compiles its driver module (sglang/_sim/toolchain.py)
        missing = toolchain.missing_line(os.path.join(tempfile.gettempdir(), "tmp" + os.urandom(4).hex()))
        if missing is not None:
            crash(missing, where="cuda_graph_runner.py")
    await autotune.run(sim.autotune, log, asyncio.sleep, sim.scale)
    cgbs = a.get("cuda_graph_max_bs") or a.get("cuda_graph_max_bs_decode") or 256
    new_lines = not sim.version.startswith("0.5.12")  # 0.5.23's capture lines (tests/fixtures/sglang/lines)
    if new_lines and prefill_graphs(a):  # 0.5.23 captures the prefill graphs first
        log("Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[4, 8, 16, 32, 64, 128, 256, "
            "512], avail mem=7.51 GB", tp=0)
        await asyncio.sleep(step * 0.5)
        log("Capture target prefill CUDA graph end. elapsed=4.79 s, mem usage=0.09 GB, avail mem=7.42 GB.", tp=0)
    if new_lines:
        log(f"Capture target decode CUDA graph begin. backend={a.get('cuda_graph_backend_decode') or 'full'}, "
            "num_tokens_per_req=1, avail mem=7.42 GB", tp=0)
    else:
        log("Capture cuda graph begin. This can take up to several minutes. avail mem=7.51 GB", tp=0)
    stuck = fatal_fault(sim, "capture")
    if sim.faults.get("health_never_ok") or stuck == "":
        return  # stuck "capturing" forever: the port never opens
    if stuck:
        crash(stuck, where="cuda_graph_runner.py")
    if "Moe" in arch and str(a.get("moe_runner_backend")) in ("auto", "triton"):
        # mid-line after the capture's progress fragment, as the real server prints it
        log_raw(f"Capturing batches (bs={cgbs} avail_mem=7.51 GB):   0%|          | 0/36 [00:00<?, ?it/s]")
        log("Using default MoE kernel config. Performance might be sub-optimal! Config file not found at "
            f"{moe_config_path()}, you can create them with https://github.com/sgl-project/sglang/tree/main/"
            "benchmark/kernels/fused_moe_triton", tp=0)
    if cold:
        if new_lines:  # flashinfer 0.7.2 says so when it compiles a module (0.6.11.post1 says nothing)
            jit_line("Building JIT module fused_moe_120; this can take several minutes on first use.")
        await asyncio.sleep(cold_s)  # the JIT compiles while the graphs are captured
    await asyncio.sleep(step * 1.5)
    took = 60 + 0.58 * int(cgbs) + (cold_s * sim.scale if cold else 0)
    if new_lines:
        log(f"Capture target decode CUDA graph end. bs={capture_bs(int(cgbs))}, elapsed={took:.2f} s, "
            "mem usage=1.23 GB, avail mem=6.19 GB.", tp=0)
    else:
        log(f"Capture cuda graph end. Time elapsed: {took:.2f} s. mem usage=1.23 GB. avail mem=6.28 GB.", tp=0)
    if piecewise(a, sim.version):
        log("Capture piecewise CUDA graph begin. avail mem=6.28 GB", tp=0)
        await asyncio.sleep(step * 0.5)
        log("Capture piecewise CUDA graph end. Time elapsed: 4.79 s. mem usage=0.09 GB. avail mem=6.19 GB.", tp=0)
    log(f"max_total_num_tokens={KV_TOKENS}, chunked_prefill_size={a.get('chunked_prefill_size')}, "
        f"max_prefill_tokens={a.get('max_prefill_tokens')}, max_running_requests={a.get('max_running_requests')}, "
        f"context_len={a.get('context_length')}, available_gpu_mem=6.28 GB", tp=0)
    await bind()
    log(f"Uvicorn running on http://{a['host']}:{a['port']} (Press CTRL+C to quit)")
    await asyncio.sleep(step)
    sim.ready = True
    if empty:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(f"{time.time():.0f}\n")
        except OSError as exc:  # a read-only or foreign cache: real JIT warns and compiles again next time
            log(f"sim: could not write the kernel cache {marker.parent}: {exc}", tp=0)
    log("The server is fired up and ready to roll!")


def prefill_graphs(a: dict[str, Any]) -> bool:
    """0.5.23's prefill graphs: on by default on CUDA (`breakable`), off with --cuda-graph-backend-prefill disabled."""
    return not a.get("disable_cuda_graph") and a.get("cuda_graph_backend_prefill") != "disabled"


def capture_bs(max_bs: int) -> list[int]:
    """The decode batch sizes the end line lists, up to `max_bs` (the stand-in's own list, not sglang's rule)."""
    return [b for b in [1, 2, 4, *range(8, max(max_bs, 8) + 1, 8)] if b <= max_bs]


def jit_line(msg: str) -> None:
    """A line of flashinfer's `flashinfer.jit` logger, in its own format (flashinfer 0.7.2, jit/core.py)."""
    now = dt.datetime.now()
    sys.stdout.write(f"{now.strftime('%Y-%m-%d %H:%M:%S')},{now.microsecond // 1000:03d} - INFO - core.py:594 - "
                     f"flashinfer.jit: {msg}\n")
    sys.stdout.flush()


def piecewise(a: dict[str, Any], version: str) -> bool:
    """0.5.12's piecewise CUDA graphs: on by default, off with --disable-piecewise-cuda-graph or no CUDA graphs."""
    return (version.startswith("0.5.12") and not a.get("disable_piecewise_cuda_graph")
            and not a.get("disable_cuda_graph"))


def moe_config_path() -> str:
    """Where 0.5.12.post1 looks for a tuned fused-MoE config: keyed by Triton's version and the exact device name."""
    device = "NVIDIA_H200" if env.hopper() else "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition"
    return ("/opt/sglang/lib/python3.12/site-packages/sglang/srt/layers/moe/moe_runner/triton_utils/configs/"
            f"triton_3_6_0/E=8,N=128,device_name={device}.json")


def bind_host(requested: str) -> str:
    """A container has its own network namespace, so there the requested address is used as given. Outside one
    (tests run from the repo) loopback only (simulator network rule): anything else binds 127.0.0.1 and says so."""
    if env.real_container():
        return requested
    import ipaddress

    try:
        if requested == "localhost" or ipaddress.ip_address(requested).is_loopback:
            return requested
    except ValueError:
        pass
    log(f"sim: --host {requested} is not loopback; binding 127.0.0.1 instead (the simulator never leaves 127/8)")
    return "127.0.0.1"


async def serve(sim: Sim) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, sim.stop.set)
    app = build_app(sim)
    host = bind_host(str(sim.args["host"]))

    async def bind() -> None:
        try:
            await app.start(host, int(sim.args["port"]))
        except OSError as exc:
            log(f"ERROR: [Errno {exc.errno}] error while attempting to bind on address ('{host}', "
                f"{sim.args['port']}): address already in use")
            os._exit(1)

    # Real sglang starts uvicorn only once the schedulers report the model loaded: the port is closed until then.
    minors = visible_minors(int(sim.args["tp_size"]))
    # The GPUs' power limits slow its rounds, and the CT's power_draw knob scales its draw (powercap.py).
    sim.engine.cap = PowerCap(env.gpu_dir(), minors, lambda: float(env.ct_faults().get("power_draw") or 1.0))
    tasks = [asyncio.create_task(sim.engine.run()), asyncio.create_task(startup(sim, bind)),
             asyncio.create_task(report_load(sim, minors))]
    await sim.stop.wait()
    log("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
    await graceful_exit(sim)
    for t in tasks:
        t.cancel()
    remove_load_file()
    # Real sglang ends its drain with kill_process_tree(os.getpid(), include_parent=True): a SIGKILL of its own
    # process tree, itself included (rc -9 after a clean drain, tests/fixtures/sglang/real-h100/cold.shutdown.json).
    # Open connections end with it; its Prometheus directory stays behind.
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


async def graceful_exit(sim: Sim) -> None:
    """tokenizer_manager.sigterm_watchdog: /health answers 503 from now on; the watchdog looks at the SIGTERM flag
    every 5 s from the start (so the drain begins up to 5 s after the signal: the real one exited 4.7-6.9 s after
    it with its streams done), then waits in 5 s steps while requests remain (no bound: systemd's TimeoutStopSec
    ends it), unless the server is UnHealthy or SGL_FORCE_SHUTDOWN is set."""
    sim.exiting = True
    since = time.monotonic() - sim.watchdog_t0
    await asyncio.sleep(DRAIN_STEP_S - since % DRAIN_STEP_S)
    e = sim.engine
    while True:
        remaining = [r.rid for r in e.in_flight]
        if sim.unhealthy:
            log("Signal SIGTERM received while health check failed. Force exiting.")
            return
        if os.environ.get("SGL_FORCE_SHUTDOWN", "").lower() in ("1", "true", "yes", "on"):
            log("Signal SIGTERM received while force shutdown flag set. Force exiting.")
            return
        log(f"Gracefully exiting... Remaining number of requests {len(remaining)}. Remaining requests "
            f"remaining_rids={remaining}.")
        if not remaining or e.stalled:  # a stalled engine: its requests would never finish
            return
        await asyncio.sleep(DRAIN_STEP_S)


def main(argv: list[str] | None = None) -> None:
    version = env.installed_version()
    parser = argparse.ArgumentParser(prog=PROG)
    add_cli_args(parser, version)
    # Like prepare_server_args: a YAML --config file is merged into argv first (the command line wins).
    ns = parser.parse_args(merge_config(sys.argv[1:] if argv is None else argv, parser, version))
    args = resolve(vars(ns), version, hopper=env.hopper())
    attention_defaulted = vars(ns).get("attention_backend") is None
    configure_logging()
    # Both real releases log every argument at INFO, the API key in clear (0.5.23 as a dict).
    if version == "0.5.23":
        log(f"server_args={dict(sorted(args.items()))!r}", logger=ENGINE_LOGGER)
    else:
        log(f"server_args=ServerArgs({', '.join(f'{k}={v!r}' for k, v in sorted(args.items()))})",
            logger=ENGINE_LOGGER)
    preflight(args)
    sim = Sim(args, version)
    sim.attention_defaulted = attention_defaulted
    sim.prometheus_dir = prometheus_multiproc_dir()
    try:
        asyncio.run(serve(sim))
    finally:
        remove_load_file()
