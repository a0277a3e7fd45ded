"""Prometheus text format (exposition format 0.0.4) of a host's MetricsState, pure.

Every series carries `host` (the inventory name) and `release` (the release current when it was published), so a
dashboard overlays rollouts and an alert names both. Names follow Prometheus' conventions: `deploy_` prefix, snake
case, base units (`_seconds`, `_joules`), `_total` for counters. `METRICS` is the one list of what is published:
the dashboard's test and docs/monitoring.md are checked against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.monitoring.state import HEALTH_STATES, WATCHDOG_STATES, MetricsState


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: str  # gauge or counter
    help: str
    labels: tuple[str, ...] = ()  # beyond host and release


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("deploy_release_info", "gauge", "The release current on the host (always 1), with its sglang version "
               "and verdict (kept, rolled-back, abandoned, unverified).", ("sglang_version", "verdict")),
    MetricSpec("deploy_release_verified", "gauge", "1 when the current release's verdict is kept (it passed its "
               "gates), else 0."),
    MetricSpec("deploy_gate_passed", "gauge", "The last result of each gate on the current release: 1 passed, "
               "0 failed.", ("gate",)),
    MetricSpec("deploy_gate_last_run_timestamp_seconds", "gauge", "When each gate last ran on the current release "
               "(unix time).", ("gate",)),
    MetricSpec("deploy_rollbacks_total", "counter", "Releases left by a rollback on this host, by reason: the "
               "failed gate of a roll's automatic rollback, an interrupted roll restored, or deploy rollback.",
               ("reason",)),
    MetricSpec("deploy_last_rollback_timestamp_seconds", "gauge", "When the last rollback on this host happened "
               "(unix time), from which release (candidate) and why.", ("candidate", "reason")),
    MetricSpec("deploy_bench_output_throughput_tokens_per_second", "gauge", "Output token throughput of the "
               "current release's last bench (the one its verdict records).", ("preset",)),
    MetricSpec("deploy_bench_ttft_p99_seconds", "gauge", "p99 time to first token of that bench.", ("preset",)),
    MetricSpec("deploy_bench_tpot_p99_seconds", "gauge", "p99 time per output token of that bench.", ("preset",)),
    MetricSpec("deploy_bench_output_tokens_per_second_per_watt", "gauge", "Output tokens per second per watt of "
               "GPU power during that bench.", ("preset",)),
    MetricSpec("deploy_bench_energy_per_output_token_joules", "gauge", "GPU energy per output token during that "
               "bench.", ("preset",)),
    MetricSpec("deploy_bench_timestamp_seconds", "gauge", "When that bench was recorded (unix time).", ("preset",)),
    MetricSpec("deploy_reference_output_throughput_tokens_per_second", "gauge", "Output token throughput of the "
               "last verified release before the current one (reference_release).", ("reference_release", "preset")),
    MetricSpec("deploy_reference_output_tokens_per_second_per_watt", "gauge", "Output tokens per second per watt "
               "of the last verified release before the current one.", ("reference_release", "preset")),
    MetricSpec("deploy_watchdog_state", "gauge", "The in-container watchdog's state as the last deploy run read "
               "it: 1 for the current state, 0 for the others.", ("state",)),
    MetricSpec("deploy_watchdog_exhausted", "gauge", "1 when the watchdog spent its restart budget and gave up."),
    MetricSpec("deploy_watchdog_restarts_total", "counter", "sglang restarts by the watchdog that deploy runs have "
               "seen in its state file."),
    MetricSpec("deploy_watchdog_restarts_in_window", "gauge", "Watchdog restarts within its budget window."),
    MetricSpec("deploy_watchdog_restart_budget", "gauge", "The watchdog's restart budget per window."),
    MetricSpec("deploy_gpus", "gauge", "GPUs the host's sensors named at the last deploy run that read them, by "
               "health state (ok, warn, fail: a fault whose action is fatal).", ("state",)),
    MetricSpec("deploy_gpu_fault", "gauge", "1 for each hardware fault of a GPU (Xid, lost, ECC, row remap, "
               "slowdown, link under load) with the catalog's action.", ("gpu", "bus_id", "kind", "action",
                                                                        "severity")),
    MetricSpec("deploy_gpu_health_timestamp_seconds", "gauge", "When the GPUs' sensors were last read (unix "
               "time)."),
    MetricSpec("deploy_last_publish_timestamp_seconds", "gauge", "When a deploy command last wrote these metrics "
               "(unix time), and which command.", ("command",)),
)
NAMES = frozenset(m.name for m in METRICS)


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return str(int(v)) if float(v).is_integer() and abs(v) < 2**53 else repr(float(v))


def render(host: str, state: MetricsState) -> str:
    """The `.prom` file of one host: HELP and TYPE for each published family, its samples below them."""
    release = state.current or "unknown"
    samples: dict[str, list[tuple[dict[str, str], float]]] = {m.name: [] for m in METRICS}

    def add(name: str, value: float | None, **labels: str) -> None:
        if value is not None:
            samples[name].append((labels, float(value)))

    rec = state.releases.get(state.current or "")
    if state.current is not None:
        verdict = (rec.verdict if rec else None) or "unverified"
        add("deploy_release_info", 1, sglang_version=(rec.sglang_version if rec else None) or "unknown",
            verdict=verdict)
        add("deploy_release_verified", 1 if verdict == "kept" else 0)
    for gate, run in (rec.gates if rec else {}).items():  # the gates judged, each under its published name
        add("deploy_gate_passed", 1 if run.passed else 0, gate=gate)
        add("deploy_gate_last_run_timestamp_seconds", run.at, gate=gate)
    for reason, count in state.rollbacks.items():  # every reason `advance` counts, at 0 until it happens
        add("deploy_rollbacks_total", count, reason=reason)
    if state.last_rollback is not None:
        rb = state.last_rollback
        add("deploy_last_rollback_timestamp_seconds", rb.at, candidate=rb.candidate, reason=rb.reason)
    fig = rec.figures if rec else None
    if fig is not None:
        add("deploy_bench_output_throughput_tokens_per_second", fig.output_tokens_per_s, preset=fig.preset)
        add("deploy_bench_ttft_p99_seconds", fig.ttft_p99_s, preset=fig.preset)
        add("deploy_bench_tpot_p99_seconds", fig.tpot_p99_s, preset=fig.preset)
        add("deploy_bench_output_tokens_per_second_per_watt", fig.tokens_per_s_per_w, preset=fig.preset)
        add("deploy_bench_energy_per_output_token_joules", fig.j_per_output_token, preset=fig.preset)
        add("deploy_bench_timestamp_seconds", fig.at, preset=fig.preset)
    ref = state.releases.get(state.reference or "")
    if state.reference is not None and ref is not None and ref.figures is not None:
        add("deploy_reference_output_throughput_tokens_per_second", ref.figures.output_tokens_per_s,
            reference_release=state.reference, preset=ref.figures.preset)
        add("deploy_reference_output_tokens_per_second_per_watt", ref.figures.tokens_per_s_per_w,
            reference_release=state.reference, preset=ref.figures.preset)
    wd = state.watchdog
    if wd is not None:
        for name in WATCHDOG_STATES:
            add("deploy_watchdog_state", 1 if wd.state == name else 0, state=name)
        add("deploy_watchdog_exhausted", 1 if wd.state == "exhausted" else 0)
        add("deploy_watchdog_restarts_total", state.watchdog_restarts)
        add("deploy_watchdog_restarts_in_window", wd.restarts_in_window)
        add("deploy_watchdog_restart_budget", wd.budget)
    hw = state.hardware
    if hw is not None:
        for name in HEALTH_STATES:
            add("deploy_gpus", hw.states.get(name, 0), state=name)
        for f in hw.faults:
            add("deploy_gpu_fault", 1, gpu=f.gpu, bus_id=f.bus_id, kind=f.kind, action=f.action, severity=f.severity)
        add("deploy_gpu_health_timestamp_seconds", hw.at)
    add("deploy_last_publish_timestamp_seconds", state.published_at, command=state.command or "unknown")

    lines: list[str] = []
    for spec in METRICS:
        rows = samples[spec.name]
        if not rows:
            continue
        lines.append(f"# HELP {spec.name} {_escape_help(spec.help)}")
        lines.append(f"# TYPE {spec.name} {spec.type}")
        for labels, value in rows:
            every = {"host": host, "release": release, **labels}
            text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in every.items())
            lines.append(f"{spec.name}{{{text}}} {_value(value)}")
    return "\n".join(lines) + "\n"
