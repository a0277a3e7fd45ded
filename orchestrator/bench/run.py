"""Run bench_serving in the container with GPU samplers on the host, in ONE SSH round trip, and judge it.

The JSONL goes to a fresh file per run (bench_serving appends), inside the release directory when there is one,
so the evidence lives on the target next to the flags it measured. It is written under a temporary name and
renamed only when bench_serving succeeded; the run sits in its own process group registered under runs/, so a
later run can stop it when ours died (orchestrator/scripts/bench_group.sh.j2, stop_leftovers.sh.j2).
Telemetry is sampled on the host, where nvidia-smi sees every GPU, over exactly the bench window.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from orchestrator.bench.command import bench_command
from orchestrator.bench.failures import failed_bench
from orchestrator.errors import CheckFailed, RemoteError
from orchestrator.hardware.links import (
    LinkLoadVerdict,
    bus_query_argv,
    judge_links_under_load,
    parse_bus_ids,
    samples_from_telemetry,
)
from orchestrator.hardware.state import LOAD_UTIL_PCT
from orchestrator.inventory.models import BenchPreset, Host, ServerProfile
from orchestrator.ledger.sqlite import new_run_id
from orchestrator.parsers.bench import BenchParseError, BenchResult, parse_bench_output
from orchestrator.parsers.boot import BootStart
from orchestrator.parsers.gpu_query import GpuQueryParseError
from orchestrator.profile.capture import ProfileOutcome, probe_command, read_outcome, with_profile
from orchestrator.redact import SECRET_JSON_SED
from orchestrator.remote.container import Container
from orchestrator.scripts import render_script
from orchestrator.telemetry.sampler import (
    SamplerOutputError,
    build_sampled_bench_script,
    parse_sampled_output,
    run_samples,
)
from orchestrator.telemetry.summary import TelemetrySummary, summarize
from orchestrator.verdicts.power import Diagnosis, diagnose

#: Beyond the bench itself: the samplers, bench_serving's start and tokenizer load, reading the files back.
SETUP_S = 120.0


def bench_limit_s(preset: BenchPreset) -> float:
    """How long one sampled bench run of this preset may take, and the bound its wait line names."""
    return preset.limit_s + SETUP_S


@dataclass
class BenchRun:
    run_id: str
    preset: str
    started_at: datetime
    result: BenchResult
    telemetry: TelemetrySummary | None
    diagnosis: list[Diagnosis]
    remote_jsonl: str
    jsonl: str
    overrides: dict[str, str] = field(default_factory=dict)
    #: Why this run is a failed bench (orchestrator/bench/failures.py); "" when it counts.
    failure: str = ""
    #: Each GPU's PCIe link while the bench loaded it (the host's sampler rows; None: no samples).
    links: LinkLoadVerdict | None = None
    #: `--profile N`: the step-time breakdown of N decode steps profiled during the run, and its verdict.
    profile: ProfileOutcome | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "preset": self.preset,
            "overrides": self.overrides,
            "started_at": self.started_at.isoformat(),
            "remote_jsonl": self.remote_jsonl,
            "result": self.result.model_dump(mode="json", exclude={"server_info"}),
            "telemetry": self.telemetry.model_dump(mode="json") if self.telemetry else None,
            "diagnosis": [d.model_dump(mode="json") for d in self.diagnosis],
            "failure": self.failure or None,
            "links": self.links.to_dict() if self.links is not None else None,
            **({"profile": self.profile.payload()} if self.profile is not None else {}),
        }


def flag_int(profile_flags: dict[str, Any], *names: str) -> int | None:
    for n in names:
        v = profile_flags.get(n)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def offered_prompts(preset: BenchPreset, overrides: dict[str, str] | None) -> int:
    """The prompts actually sent: a `--set num-prompts=N` override wins over the preset (else N ≠ preset → failures)."""
    for key, value in (overrides or {}).items():
        if key.strip().lstrip("-").replace("_", "-") == "num-prompts":
            return int(value)  # already validated by bench_argv
    return preset.num_prompts


def partial_name(out_file: str) -> str:
    """Where bench_serving writes until it succeeded: never matched by the baseline reader's `*.jsonl`."""
    return f"{out_file}.partial"


def bench_pidfile(ct: Container, run_id: str) -> str:
    return f"{ct.paths.runs_dir}/bench-{run_id}.pid"


def run_bench(ct: Container, host: Host, profile: ServerProfile, preset_name: str, preset: BenchPreset, *,
              overrides: dict[str, str] | None = None, release_id: str | None = None,
              flags: dict[str, Any] | None = None, nvlink: bool = False,
              boot: BootStart | None = None, profile_steps: int | None = None) -> BenchRun:
    run_id = new_run_id()
    flags = flags or {}
    tp = flag_int(flags, "tensor-parallel-size", "tp-size")
    out_dir = ct.paths.release_dir(release_id) if release_id else ct.paths.bench_dir
    # Plain preset runs are baselines for later rolls; runs with overrides (sweep points) are not.
    kind = "sweep" if overrides else "bench"
    out_file = f"{out_dir}/{kind}-{preset_name}--{run_id}.jsonl"
    tmp_file = partial_name(out_file)
    command = bench_command(preset, profile, tmp_file, overrides)
    sections = []
    if profile_steps:
        # sglang's profiler over N decode steps of this run on every rank, its trimmed traces read back below
        prof_dir, prof_out, done = f"{out_dir}/profile-{run_id}", f"{out_dir}/profile-{run_id}.json", \
            f"{out_dir}/profile-{run_id}.done"
        probe = probe_command(ct.paths.venv_python(profile.venv), f"http://{profile.host}:{profile.port}", prof_dir,
                              profile_steps, run_id, tp or 1, done, preset.limit_s)
        command = with_profile(command, probe, prof_out, done)
        sections.append(("profile", ct.shell_command(f"cat {shlex.quote(prof_out)} 2>/dev/null; rm -rf "
                                                     f"{shlex.quote(prof_out)} {shlex.quote(done)} "
                                                     f"{shlex.quote(prof_dir)}")))
    inner = render_script("bench_group.sh.j2", runs_dir=ct.paths.runs_dir, out_dir=out_dir,
                          pidfile=bench_pidfile(ct, run_id), run_id=run_id, env_path=ct.paths.env_path,
                          out_file=out_file, tmp_file=tmp_file, secret_sed=SECRET_JSON_SED,
                          bench_command=command)
    # The bench runs in the container, framed by samplers on the node: one node script, one round trip. A failed
    # run's temporary JSONL is still read once (its partial figures explain the failure), then removed.
    read_jsonl = (f"cat {shlex.quote(out_file)} 2>/dev/null || "
                  f"{{ cat {shlex.quote(tmp_file)} 2>/dev/null; rm -f {shlex.quote(tmp_file)}; }}")
    sampler = build_sampled_bench_script(ct.shell_command(inner), extra_sections=[
        ("jsonl", ct.shell_command(read_jsonl)), ("buses", shlex.join(bus_query_argv())), *sections])
    res = ct.node.script(sampler.script, check=False, timeout=bench_limit_s(preset), what=f"bench {preset_name}")
    try:
        run = parse_sampled_output(res.stdout, sampler.nonce)
    except SamplerOutputError as exc:
        raise RemoteError(f"bench {preset_name}: {exc}", fix="re-run; check the SSH connection",
                          host=host.name, details={"stderr": res.stderr[-1000:]}) from exc
    bench_out = run.section("bench")
    jsonl = run.section("jsonl")
    try:
        result = parse_bench_output(jsonl, bench_out, num_prompts=offered_prompts(preset, overrides))
    except BenchParseError as exc:
        tail = " | ".join(bench_out.strip().splitlines()[-6:])
        raise CheckFailed(f"bench_serving produced no result (exit {run.bench_rc}): {tail}",
                          fix="is the server healthy (deploy status)? is the preset valid offline "
                              "(random-ids needs no download)?", host=host.name) from exc
    samples, static = run_samples(run, sampler.query_fields)
    telemetry = None
    if samples:
        telemetry = summarize(samples, window=(run.started_at, run.ended_at),
                              output_tokens=result.total_output_tokens,
                              output_throughput=result.output_throughput, static=static,
                              sampling_overhead_pct=run.sampler_overhead_pct,
                              input_tokens=result.total_input_tokens, mean_tpot_ms=result.mean_tpot_ms)
    links = None
    if samples and static:
        try:
            buses = parse_bus_ids(run.section("buses"))
        except GpuQueryParseError:
            buses = {}  # the verdict then names the GPU by its index alone
        links = judge_links_under_load(samples_from_telemetry(samples, static, buses), load="bench_serving",
                                       min_util_pct=LOAD_UTIL_PCT)
    mrr = flag_int(flags, "max-running-requests")
    backend = flags.get("moe-runner-backend")
    diagnosis = diagnose(result, telemetry, tp_size=tp, nvlink=nvlink, max_running_requests=mrr, boot=boot,
                         moe_runner_backend=str(backend) if backend is not None else None,
                         sglang_version=profile.sglang_version)
    outcome = read_outcome(run.section("profile"), list(diagnosis)) if profile_steps else None
    if outcome is not None:
        diagnosis = [*diagnosis, outcome.diagnosis()]
    return BenchRun(run_id, preset_name, run.started_at, result, telemetry, list(diagnosis), out_file, jsonl,
                    dict(overrides or {}), failed_bench(result, preset.max_failed_fraction), links, outcome)
