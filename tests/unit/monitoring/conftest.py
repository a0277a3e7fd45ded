"""Shared values for the monitoring tests: a host's state after an up, a kept roll and a rolled-back one."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from orchestrator.monitoring.state import (
    BenchFigures,
    GateRun,
    GpuFault,
    Hardware,
    MetricsState,
    Observation,
    ReleaseRecord,
    Rollback,
    Watchdog,
    advance,
)
from orchestrator.steps import gate_registry

#: The gates published and the reasons a rollback counts under, as the steps declare them.
GATES = gate_registry()
REASONS = GATES.rollback_reasons

#: up's host checks read the sensors: GPU 2 has an Xid 79 (off the bus), GPU 5 a clock slowdown.
HARDWARE = Hardware(at=100.0, gpus=8, states={"ok": 6, "warn": 1, "fail": 1},
                    faults=(GpuFault("2", "00000000:75:00.0", "xid", "reboot_host", "fail"),
                            GpuFault("5", "00000000:A5:00.0", "slowdown", "none", "warn")))
A, B, C = "20260101T000000-aaaaaaaa", "20260102T000000-bbbbbbbb", "20260103T000000-cccccccc"


def figures(tok_s: float, per_w: float) -> BenchFigures:
    return BenchFigures(preset="gate", output_tokens_per_s=tok_s, ttft_p99_s=0.8, tpot_p99_s=0.04,
                        tokens_per_s_per_w=per_w, j_per_output_token=1 / per_w, at=100.0)


def gates(at: float, failed: str = "") -> dict[str, GateRun]:
    return {g: GateRun(passed=g != failed, at=at) for g in GATES.gates}


def history() -> MetricsState:
    """up converges A; a roll keeps B (lower tok/s per W); a roll to C fails its throughput gate → back on B."""
    s = advance(MetricsState(), Observation(at=100, command="up", release=A, judged={A: gates(100)},
                                            record=ReleaseRecord("kept", "0.5.12.post1", figures(1000, 2.0)),
                                            watchdog=Watchdog("ok", 0, 3, 99.0), hardware=HARDWARE),
                REASONS)
    s = advance(s, Observation(at=200, command="roll", release=B, judged={B: gates(200)},
                               record=ReleaseRecord("kept", "0.5.12.post1", figures(990, 1.5)),
                               watchdog=Watchdog("restarted", 1, 3, 199.0), restart_times=(150.0,)), REASONS)
    return advance(s, Observation(at=300, command="roll", release=B, judged={C: gates(300, failed="throughput")},
                                  record=ReleaseRecord(),
                                  rollbacks=(Rollback(at=300, reason="gate", candidate=C, to=B),),
                                  watchdog=Watchdog("restarted", 1, 3, 299.0), restart_times=(150.0,)),
                   REASONS)


@pytest.fixture
def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is missing: scripts/install.sh installs Debian's prometheus package"
    return path


_FUNCS = {"sum", "max", "min", "by", "rate", "increase", "changes", "time", "unless", "offset", "on",
          "group_left", "count_over_time", "or", "and"}


def metric_names(expr: str) -> set[str]:
    """The metric names an expression reads (label matchers, label names in by(), functions and durations
    left out)."""
    bare = re.sub(r"\{[^}]*\}", "", expr)
    bare = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
    bare = re.sub(r"\[[^\]]*\]", "", bare)
    return {t for t in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare) if t not in _FUNCS and not t.isdigit()
            and (t.startswith(("deploy_", "sglang:", "smg_")))}


#: The real smg 1.13.0's /metrics, captured with two workers (one draining): the router series deploy may name.
SMG_METRICS = Path(__file__).resolve().parents[2] / "fixtures" / "router" / "smg-1.13.0" / "metrics-draining.txt"


def smg_names() -> set[str]:
    return set(re.findall(r"^# TYPE (smg_[a-z0-9_]+) ", SMG_METRICS.read_text(), re.MULTILINE))
