"""The tool's server-side code against the real sglang 0.5.12.post1 on a lent GPU machine (issue 49, part B).

Run on the device by tests/gpu/run_real_server.sh (docs/development.md, "The GPU suite"): it starts the real server
with the argv, unit environment, secrets file and kernel-cache variables the tool renders for a profile, on a tiny
random-weight model built there, and runs the tool's own code on what the server does:

- the health wait's pure parts: `health_code_command` polled, every new log line through `find_fatal` and
  `CapturePhase`, then the boot ledger (`parse_boot` with the unit's start time, `judged` with the kernel-cache
  check the tool runs before a start: `check_shell` / `parse_check`), a cold start and then a warm start on the same
  cache directory;
- the smoke probe and the correctness gate's golden probe (`judge`: its detectors on a random-weight model; the
  warm start with a flag that must not change the answers compared against the cold start's record, and one that
  must change them when time is left);
- `bench_serving` from the real install, through `bench_command` and the telemetry sampler script
  (`build_sampled_bench_script`), then once without the sampler; `parse_bench_output`, `summarize`, `diagnose`;
- the `/metrics` readers (`in_flight`, `metric_sum`) idle and under load;
- the profiler endpoint (`POST /start_profile`);
- SIGTERM with streams in flight: `/health` during the drain, the exit code, the time to exit.

Each check prints one `CHECK name: what it measured` line; everything lands in $OUT (report.json and a tar of the
captures). Standard library + the carried site + the tool's package (PYTHONPATH).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.bench.command import bench_command
from orchestrator.facts.container import health_code_command
from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.gates.correctness import Record, Thresholds, judge, parse_answer
from orchestrator.inventory.models import BenchPreset, ServerProfile
from orchestrator.parsers.bench import parse_bench_output
from orchestrator.parsers.boot import BootStart, parse_boot
from orchestrator.render.service import (
    ENV_PATH,
    LOGGING_PATH,
    SECRETS_PATH,
    launch_argv,
    render_env,
    render_logging,
    render_secrets,
)
from orchestrator.resources import probe_text
from orchestrator.router.drain import in_flight
from orchestrator.stacks.kernel_caches import CacheShape, cache_dir, cache_key, check_shell, manifest, parse_check
from orchestrator.telemetry.sampler import build_sampled_bench_script, parse_sampled_output, run_samples
from orchestrator.telemetry.summary import summarize
from orchestrator.verdicts.power import diagnose
from orchestrator.verdicts.server_log import CapturePhase, FatalLine, find_fatal
from orchestrator.watchdog.probe import PROGRESS_COUNTERS, metric_sum

OUT = Path(os.environ.get("OUT", "/tmp/gpu-out"))
HOME = Path(os.environ.get("SUITE_HOME", "/root"))  # the captures, the key file and the tiny model live here
CAP = HOME / "gpucap"
BUDGET_S = float(os.environ.get("SUITE_BUDGET_S", "520"))
T0 = time.monotonic()
VENV = os.environ.get("SUITE_VENV", "/opt/torch/.venv")  # the device image's python: torch 2.11.0+cu130
MODEL = str(HOME / "tiny")
KEY_FILE = str(HOME / "api.key")
STACK_SHA = "real0512post1"  # the carried stack has no lock sha here; the key only has to be stable across starts
REPORT: dict[str, Any] = {"checks": {}}


def attempt(name: str, fn: Any, *args: Any, **kw: Any) -> Any:
    """One check that may fail without ending the suite: its error is its measurement."""
    try:
        return fn(*args, **kw)
    except Exception as exc:
        check(name, error=f"{type(exc).__name__}: {str(exc)[:300]}")
        return None


def check(name: str, **measured: Any) -> None:
    """One check's measurements: printed as a line, kept in the report."""
    REPORT["checks"][name] = measured
    print(f"CHECK {name}: " + ", ".join(f"{k}={v}" for k, v in measured.items()), flush=True)


def left() -> float:
    return BUDGET_S - (time.monotonic() - T0)


def profile(**flags: Any) -> ServerProfile:
    return ServerProfile.model_validate({
        "model_path": MODEL, "served_model_name": "tiny", "sglang_version": "0.5.12.post1", "venv": VENV,
        "host": "127.0.0.1", "port": 30000, "api_key": {"file": KEY_FILE},
        "flags": {"tp": 1, "attention-backend": "triton", "enable-metrics": True, **flags}})


def http(method: str, path: str, body: Any = None, timeout: float = 10.0, key: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request("http://127.0.0.1:30000" + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, f"{type(exc).__name__}: {exc}"


@dataclass
class Server:
    """One start of the real server, as the unit would run it: the tool's argv, its env file, PYTHONUNBUFFERED."""

    name: str
    prof: ServerProfile
    env: dict[str, str]
    proc: subprocess.Popen[str] | None = None
    lines: list[str] = field(default_factory=list)
    launched_at: datetime | None = None
    first_200_s: float | None = None
    fatal: FatalLine | None = None

    def start(self) -> None:
        flags = canonicalize(self.prof.flags, FlagSchema.load("0.5.12.post1"))
        argv = launch_argv(self.prof, flags)
        (CAP / f"{self.name}.argv.json").write_text(json.dumps(argv))
        log = open(CAP / f"{self.name}.server.log", "w")  # noqa: SIM115 (open while the server runs)
        self.launched_at = datetime.now()
        self.t_launch = time.monotonic()
        self.proc = subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                log.write(line)
                log.flush()
            log.close()

        threading.Thread(target=pump, daemon=True).start()

    def wait_healthy(self, timeout_s: float) -> bool:
        """The health wait's pure parts: the tool's /health probe command, every new line through the fatal
        verdicts and the capture state, until 200, a fatal line, an exit or the timeout."""
        phase = CapturePhase()
        seen = 0
        cmd = health_code_command(self.prof)
        curl = shutil.which("curl") is not None  # the container has it; the GPU image may not
        codes: list[tuple[float, str]] = []
        while time.monotonic() - self.t_launch < timeout_s:
            if curl:
                code = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True).stdout.strip() or "000"
            else:
                code = f"{http('GET', '/health', timeout=self.prof.health_probe_timeout_s)[0]:03d}"
            if not codes or codes[-1][1] != code:
                codes.append((round(time.monotonic() - self.t_launch, 2), code))
            new, seen = self.lines[seen:], len(self.lines)
            self.fatal = find_fatal(new, phase)
            if self.fatal is not None:
                break
            if code == "200":
                self.first_200_s = time.monotonic() - self.t_launch
                break
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.5)
        stuck = phase.stuck()
        check(f"{self.name}.health_wait", probe="curl" if curl else "urllib",
              first_200_s=round(self.first_200_s or -1, 1), codes=codes,
              fatal=self.fatal.code if self.fatal else None, capture_open=stuck.line if stuck else None)
        return self.first_200_s is not None

    def boot(self, check_: Any, earlier: list[BootStart]) -> BootStart | None:
        start = parse_boot(self.lines, healthy=True, launched_at=self.launched_at)
        return start.judged(check_, earlier) if start is not None else None

    def sigterm(self, streams: list[threading.Thread] | None = None) -> dict[str, Any]:
        assert self.proc is not None
        t = time.monotonic()
        os.kill(self.proc.pid, signal.SIGTERM)
        time.sleep(0.3)
        during, _ = http("GET", "/health", timeout=5)
        try:
            rc = self.proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait(10)
        exit_s = time.monotonic() - t
        for th in streams or []:
            th.join(30)
        port, _ = http("GET", "/health", timeout=2)
        return {"rc": rc, "exit_after_sigterm_s": round(exit_s, 2), "health_during_drain": during,
                "port_after": port}


def sh(cmd: str, timeout: float = 600) -> tuple[int, str]:
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=timeout)
    return res.returncode, res.stdout + res.stderr


def unit_env(prof: ServerProfile, directory: str, api_key: str) -> dict[str, str]:
    """The environment systemd gives the server: the unit's Environment= lines, the rendered env file (the cache
    variables included) and the secrets file sglang reads with --config, written to the tool's own paths."""
    flags = canonicalize(prof.flags, FlagSchema.load("0.5.12.post1"))
    env_file = render_env(prof, api_key, flags, cache_dir=directory)
    secrets = render_secrets(prof, api_key, flags)
    Path(ENV_PATH).parent.mkdir(parents=True, exist_ok=True)
    Path(ENV_PATH).write_text(env_file.content)
    os.chmod(ENV_PATH, 0o600)
    if secrets is not None:
        Path(SECRETS_PATH).write_text(secrets.content)
        os.chmod(SECRETS_PATH, 0o600)
    logging_cfg = render_logging(prof, flags)  # keeps sglang's argument dump (the key in clear) out of the log
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LD_LIBRARY_PATH", "PYTHONPATH",
                                                          "CUDA_HOME", "LANG", "TERM")}
    for line in env_file.content.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            env[k] = v.strip().strip('"')
    Path("/run/sglang").mkdir(parents=True, exist_ok=True)  # the unit's RuntimeDirectory
    env.update(PYTHONUNBUFFERED="1", PROMETHEUS_MULTIPROC_DIR="/run/sglang")
    if logging_cfg is not None:  # the unit's Environment=SGLANG_LOGGING_CONFIG_PATH (has_secrets)
        Path(LOGGING_PATH).write_text(logging_cfg.content)
        env["SGLANG_LOGGING_CONFIG_PATH"] = LOGGING_PATH
    (CAP / "env_names.txt").write_text("\n".join(sorted(env)) + "\n")  # names only: never a secret value
    return env


def cache_check(directory: str, key: str, shape: CacheShape) -> Any:
    """The check the tool runs in the container before each start (caches.CHECK_PROGRAM), on a meta.json."""
    meta = CAP / "meta.json"
    meta.write_text(json.dumps({"cache": {"dir": directory, "key": key,
                                          "manifest": manifest(key, STACK_SHA, VENV, shape)}}))
    _, out = sh(check_shell(str(meta)))
    return parse_check(out)


def golden(api_key: str) -> dict[str, Any]:
    import yaml

    from orchestrator.resources import golden_prompts_file

    # the shipped prompts but the long-context one (13 000 words: past the tiny model's 4096 positions)
    prompts = [q for q in yaml.safe_load(golden_prompts_file().read_text()) if not q.get("context")]
    args = {"base": "http://127.0.0.1:30000", "timeout": 60, "release": "gpu", "max_new_tokens": 24,
            "top_logprobs": 5, "prompts": prompts, "record_path": "", "reference_dir": ""}
    res = subprocess.run([f"{VENV}/bin/python", "-", json.dumps(args)], input=probe_text("golden_probe.py"),
                         capture_output=True, text=True, timeout=300, env={**os.environ})
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def record_of(data: dict[str, Any], release: str) -> Record:
    """The probe's answers as the correctness step reads them (steps/correctness.py)."""
    return Record(release, tuple(parse_answer(a) for a in data.get("answers") or [] if isinstance(a, dict)))


def streams(n: int, max_tokens: int, key: str) -> tuple[list[threading.Thread], list[dict[str, Any]]]:
    results: list[dict[str, Any]] = []

    def one(i: int) -> None:
        body = {"model": "tiny", "messages": [{"role": "user", "content": f"count {i}"}], "max_tokens": max_tokens,
                "stream": True, "ignore_eos": True, "temperature": 0}
        req = urllib.request.Request("http://127.0.0.1:30000/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        chunks, end = 0, "?"
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                for raw in resp:
                    if raw.startswith(b"data: "):
                        chunks += 1
                        if raw.strip() == b"data: [DONE]":
                            end = "done"
        except Exception as exc:
            end = f"{type(exc).__name__}"
        results.append({"client": i, "chunks": chunks, "end": end})

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for th in threads:
        th.start()
    return threads, results


def bench(prof: ServerProfile, key: str, tag: str, sampled: bool, num_prompts: int = 200) -> dict[str, Any]:
    preset = BenchPreset(random_input_len=128, random_output_len=64, random_range_ratio=1.0, num_prompts=num_prompts,
                         max_concurrency=32)
    out_file = str(CAP / f"bench_{tag}.jsonl")
    cmd = f"export OPENAI_API_KEY={shlex.quote(key)}; " + bench_command(
        preset, prof, out_file, python=f"{VENV}/bin/python")
    t = time.monotonic()
    if sampled:
        sampler = build_sampled_bench_script(cmd, extra_sections=(("jsonl", f"cat {shlex.quote(out_file)}"),))
        _, text = sh(sampler.script, 300)
        run = parse_sampled_output(text, sampler.nonce)
        samples, static = run_samples(run, sampler.query_fields)
        result = parse_bench_output(run.section("jsonl"), run.section("bench"), num_prompts=preset.num_prompts)
        summary = summarize(samples, window=(run.started_at, run.ended_at), static=static,
                            output_tokens=result.total_output_tokens, output_throughput=result.output_throughput)
        (CAP / f"sampled_{tag}.txt").write_text(text)
        diag = [d.code for d in diagnose(result, summary, tp_size=1)]
        extra = {"samples": len(samples), "gpu_power_w": [g.mean_power_w for g in summary.gpus],
                 "gpu_util_pct": [getattr(g, "mean_util_pct", None) for g in summary.gpus], "diagnosis": diag}
    else:
        _, text = sh(cmd, 300)
        (CAP / f"bench_{tag}.stdout.txt").write_text(text)
        result = parse_bench_output(Path(out_file).read_text() if Path(out_file).exists() else None, text,
                                    num_prompts=preset.num_prompts)
        extra = {"diagnosis": [d.code for d in diagnose(result, None)]}
    return {"output_tok_s": round(result.output_throughput or 0, 1), "completed": result.completed,
            "failed": result.failed, "concurrency_mean": result.concurrency,
            "peak_1s_buckets": result.max_concurrent_requests, "wall_s": round(time.monotonic() - t, 1), **extra}


def smoke_check() -> None:
    res = subprocess.run([f"{VENV}/bin/python", "-", json.dumps({
        "base": "http://127.0.0.1:30000", "model": "tiny", "prompt": "What is 17 + 25?", "max_tokens": 16,
        "timeout": 60, "server_info_path": str(CAP / "server_info.json")})], input=probe_text("smoke_probe.py"),
        capture_output=True, text=True, timeout=120)
    data = json.loads(res.stdout.strip().splitlines()[-1]) if res.stdout.strip() else {"error": res.stderr[-300:]}
    check("smoke", models=data.get("models"), answer=str(data.get("answer"))[:60], latency_s=data.get("latency_s"),
          error=data.get("error"))


def endpoints_check(key: str) -> None:
    code, body = http("GET", "/", key=key)
    lcode, load = http("GET", "/get_load", key=key)
    check("endpoints", root=(code, body.strip()), get_load=(lcode, load.strip()[:160]))


def metrics_check(key: str) -> None:
    idle = http("GET", "/metrics")[1]
    (CAP / "metrics_idle.txt").write_text(idle)
    check("metrics.idle", in_flight=in_flight(idle), progress=metric_sum(idle, PROGRESS_COUNTERS))
    threads, _ = streams(8, 600, key)
    time.sleep(1.0)
    busy = http("GET", "/metrics")[1]
    (CAP / "metrics_load.txt").write_text(busy)
    check("metrics.load", in_flight=in_flight(busy), progress=metric_sum(busy, PROGRESS_COUNTERS))
    for th in threads:
        th.join(60)


def bench_checks(prof: ServerProfile, key: str) -> None:
    on = attempt("bench.sampler_on", bench, prof, key, "sampled", sampled=True)
    if on:
        check("bench.sampler_on", **on)
    off = attempt("bench.sampler_off", bench, prof, key, "plain", sampled=False)
    if off:
        check("bench.sampler_off", **off)
    if on and off and on["output_tok_s"] and off["output_tok_s"]:
        check("bench.sampler_cost", pct=round((off["output_tok_s"] - on["output_tok_s"]) / off["output_tok_s"] * 100,
                                              1))


def profiler_check(key: str) -> None:
    pdir = CAP / "profile"
    pdir.mkdir(exist_ok=True)
    threads, _ = streams(4, 400, key)
    time.sleep(0.5)
    code, body = http("POST", "/start_profile", {"output_dir": str(pdir), "num_steps": 5, "activities": ["GPU"]},
                      timeout=60, key=key)
    for th in threads:
        th.join(60)
    deadline = time.monotonic() + 20  # the trace is written when the steps are done, after the requests
    while time.monotonic() < deadline and not any(p.is_file() for p in pdir.rglob("*.gz")):
        time.sleep(1)
    traces = sorted((str(p.relative_to(pdir)), p.stat().st_size) for p in pdir.rglob("*") if p.is_file())
    check("profiler", status=code, body=body.strip()[:160], traces=traces[:4])


def answers_check(name: str, flag: str, key: str, reference: Record | None) -> None:
    if reference is None:
        check(name, skipped="no reference answers")
        return
    cand = record_of(golden(key), name)
    v = judge(cand, reference, Thresholds())
    check(name, flag=flag, passed=v.passed, answers=len(cand.answers), findings=[f.line() for f in v.findings][:4])


def sampler_main() -> int:
    """SUITE_MODE=sampler: the sampler's cost alone, on runs long enough to tell (2000 prompts, about 15 s of load
    each), alternating off and on so that neither order nor warm-up favours one; then the profiler and a drain."""
    CAP.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    key = os.urandom(16).hex()
    Path(KEY_FILE).write_text(key)
    os.chmod(KEY_FILE, 0o600)
    if not Path(f"{VENV}/bin/python").exists():
        os.symlink(f"{VENV}/bin/python3", f"{VENV}/bin/python")
    prof = profile()
    shape = CacheShape.from_flags(MODEL, prof.flags)
    ckey = cache_key(STACK_SHA, VENV, shape)
    directory = cache_dir(ckey)
    try:
        env = unit_env(prof, directory, key)
        first = cache_check(directory, ckey, shape)
        srv = Server("sampler", prof, env)
        srv.start()
        ok = srv.wait_healthy(300)
        b = srv.boot(first, [])
        check("sampler.boot_ledger", state=first.state if first else None, summary=b.summary() if b else None,
              phases={p.name: p.seconds for p in b.phases} if b else None)
        if not ok:
            return 1
        runs: dict[str, list[float]] = {"off": [], "on": []}
        for i, mode in enumerate(("off", "on", "off", "on")):
            if left() < 110:
                check(f"bench.{i}.{mode}", skipped=f"{left():.0f} s of the budget left")
                continue
            got = attempt(f"bench.{i}.{mode}", bench, prof, key, f"{i}_{mode}", sampled=mode == "on",
                          num_prompts=2000)
            if got:
                check(f"bench.{i}.{mode}", **got)
                runs[mode].append(got["output_tok_s"])
        if runs["off"] and runs["on"]:
            off, on = sum(runs["off"]) / len(runs["off"]), sum(runs["on"]) / len(runs["on"])
            check("bench.sampler_cost", off_tok_s=runs["off"], on_tok_s=runs["on"],
                  pct=round((off - on) / off * 100, 1))
        attempt("profiler", profiler_check, key)
        threads, results = streams(6, 3000, key)
        time.sleep(1.5)
        check("drain", **srv.sigterm(threads), streams=results)
    finally:
        REPORT["elapsed_s"] = round(time.monotonic() - T0, 1)
        (OUT / "report.json").write_text(json.dumps(REPORT, indent=1, default=str))
        with tarfile.open(OUT / "captures.tar.gz", "w:gz") as tar:
            for p in sorted(CAP.rglob("*")):
                if p.is_file() and p.stat().st_size < 8_000_000:
                    tar.add(p, arcname=str(p.relative_to(CAP)))
    return 0


def main() -> int:
    CAP.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    key = os.urandom(16).hex()
    Path(KEY_FILE).write_text(key)
    os.chmod(KEY_FILE, 0o600)
    if not Path(f"{VENV}/bin/python").exists():
        os.symlink(f"{VENV}/bin/python3", f"{VENV}/bin/python")
    prof = profile()
    shape = CacheShape.from_flags(MODEL, prof.flags)
    ckey = cache_key(STACK_SHA, VENV, shape)
    directory = cache_dir(ckey)
    boots: list[BootStart] = []
    try:
        # ---------------------------------------------------------------- cold start on a fresh cache
        env = unit_env(prof, directory, key)
        first = cache_check(directory, ckey, shape)
        cold = Server("cold", prof, env)
        cold.start()
        ok = cold.wait_healthy(300)
        b = cold.boot(first, boots)
        check("cold.boot_ledger", state=first.state if first else None, summary=b.summary() if b else None,
              phases={p.name: p.seconds for p in b.phases} if b else None, cold=b.cold if b else None)
        if b:
            boots.append(b)
        if not ok:
            REPORT["stopped"] = "cold start not healthy"
            if cold.proc is not None and cold.proc.poll() is None:
                cold.sigterm()
            return 1
        attempt("endpoints", endpoints_check, key)
        attempt("smoke", smoke_check)
        ref_data = attempt("correctness.probe", golden, key) or {}
        reference = record_of(ref_data, "cold") if ref_data.get("answers") else None
        check("correctness.probe", answers=len(ref_data.get("answers") or []), error=ref_data.get("error"),
              seconds=ref_data.get("seconds"), texts=[a.get("text", "")[:40] for a in ref_data.get("answers") or []])
        if reference is not None:
            v = judge(reference, None, Thresholds())
            check("correctness.detectors", passed=v.passed, findings=[f.line() for f in v.findings][:6])
        attempt("metrics", metrics_check, key)
        bench_checks(prof, key)
        attempt("profiler", profiler_check, key)
        # ---------------------------------------------------------------- SIGTERM with six long streams in flight
        threads, results = streams(6, 3000, key)
        time.sleep(1.5)
        down = cold.sigterm(threads)
        check("drain", **down, streams=results)
        (CAP / "cold.shutdown.json").write_text(json.dumps({**down, "streams": results}, indent=1))
        # ---------------------------------------------------------------- warm start, same cache directory
        warm_prof = profile(**{"stream-interval": 2})  # a flag that must not change the answers
        warm_env = unit_env(warm_prof, directory, key)
        second = cache_check(directory, ckey, CacheShape.from_flags(MODEL, warm_prof.flags))
        warm = Server("warm", warm_prof, warm_env)
        warm.start()
        ok = warm.wait_healthy(240)
        wb = warm.boot(second, boots)
        check("warm.boot_ledger", state=second.state if second else None, summary=wb.summary() if wb else None,
              phases={p.name: p.seconds for p in wb.phases} if wb else None, cold=wb.cold if wb else None)
        if wb:
            boots.append(wb)
        if cold.first_200_s and warm.first_200_s:
            check("warm_cold_ratio", cold_s=round(cold.first_200_s, 1), warm_s=round(warm.first_200_s, 1),
                  ratio=round(warm.first_200_s / cold.first_200_s, 2))
        unmanaged = [b.judged(None, boots[:i]) for i, b in enumerate(boots)]
        check("cold_warm_without_check", kinds=[u.cold for u in unmanaged], basis=[u.cold_basis for u in unmanaged])
        if ok:
            attempt("correctness.same_answers_flag", answers_check, "correctness.same_answers_flag",
                    "stream-interval=2", key, reference)
        check("warm.drain_idle", **warm.sigterm())
        _, du = sh(f"du -sh {directory}/* {directory}/.cache/* /root/.cache/* /root/.triton /root/.nv "
                   "/tmp/torchinductor_* /tmp/tmp* /dev/shm/* /run/sglang/* 2>/dev/null")
        (CAP / "du_caches.txt").write_text(du)
        check("caches", outside_managed=[ln for ln in du.splitlines() if directory not in ln][:12])
        # ---------------------------------------------------------------- a flag that must change the answers
        if left() > 150 and reference is not None:
            f16 = profile(dtype="float16")
            third = Server("float16", f16, unit_env(f16, directory, key))
            third.start()
            if third.wait_healthy(min(150, left() - 20)):
                attempt("correctness.changed_answers_flag", answers_check, "correctness.changed_answers_flag",
                        "dtype=float16", key, reference)
            third.sigterm()
        else:
            check("correctness.changed_answers_flag", skipped=f"{left():.0f} s of the budget left")
    finally:
        REPORT["elapsed_s"] = round(time.monotonic() - T0, 1)
        (OUT / "report.json").write_text(json.dumps(REPORT, indent=1, default=str))
        with tarfile.open(OUT / "captures.tar.gz", "w:gz") as tar:
            for p in sorted(CAP.rglob("*")):
                if p.is_file() and p.stat().st_size < 8_000_000:
                    tar.add(p, arcname=str(p.relative_to(CAP)))
    return 0


if __name__ == "__main__":
    raise SystemExit(sampler_main() if os.environ.get("SUITE_MODE") == "sampler" else main())
