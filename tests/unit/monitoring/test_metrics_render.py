"""The tool's state as Prometheus text: carried counters and references, and promtool's verdict on the file."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from orchestrator.monitoring.render import METRICS, NAMES, render
from orchestrator.monitoring.state import MetricsState, Observation, advance
from tests.unit.monitoring.conftest import REASONS, A, B, C, history

SAMPLE = re.compile(r'^(?P<name>[a-z0-9_]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$')


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, line
        labels = frozenset(tuple(p.split("=", 1)) for p in re.findall(r'[a-z_]+="[^"]*"', m["labels"]))
        out[(m["name"], frozenset((k, v.strip('"')) for k, v in labels))] = float(m["value"])
    return out


def value(text: str, name: str, **labels: str) -> float | None:
    for (n, lab), v in samples(text).items():
        if n == name and set(labels.items()) <= set(lab):
            return v
    return None


def test_promtool_accepts_every_family(promtool: str) -> None:
    text = render("gpu-1", history())
    published = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert published == set(NAMES)  # the history exercises every family the renderer knows
    res = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), res.stdout + res.stderr


def test_every_series_names_host_and_release() -> None:
    text = render("gpu-1", history())
    for (_name, labels) in samples(text):
        assert ("host", "gpu-1") in labels and ("release", B) in labels


def test_a_rolled_back_roll_counts_and_leaves_the_current_release_as_it_was() -> None:
    text = render("gpu-1", history())
    assert value(text, "deploy_rollbacks_total", reason="gate") == 1
    assert value(text, "deploy_rollbacks_total", reason="manual") == 0  # every reason published from the start
    assert value(text, "deploy_last_rollback_timestamp_seconds", candidate=C, reason="gate") == 300
    assert value(text, "deploy_release_info", verdict="kept", sglang_version="0.5.12.post1") == 1
    assert value(text, "deploy_gate_passed", gate="throughput") == 1  # B's own gate, not C's failed one
    assert value(text, "deploy_bench_output_throughput_tokens_per_second", preset="gate") == 990
    assert value(text, "deploy_bench_ttft_p99_seconds") == 0.8  # milliseconds stored, seconds published


def test_the_reference_is_the_release_verified_before_the_current_one() -> None:
    text = render("gpu-1", history())
    assert value(text, "deploy_reference_output_throughput_tokens_per_second", reference_release=A) == 1000
    assert value(text, "deploy_reference_output_tokens_per_second_per_watt", reference_release=A) == 2.0


def test_watchdog_restarts_are_counted_once_across_runs() -> None:
    text = render("gpu-1", history())  # the same restart (t=150) was in the state file at two runs
    assert value(text, "deploy_watchdog_restarts_total") == 1
    assert value(text, "deploy_watchdog_state", state="restarted") == 1
    assert value(text, "deploy_watchdog_state", state="ok") == 0


def test_the_carried_state_survives_its_json() -> None:
    state = history()
    assert MetricsState.from_json(state.to_json()) == state
    assert MetricsState.from_json("not json") == MetricsState()
    assert MetricsState.from_json("") == MetricsState()


def test_a_manual_rollback_to_the_reference_drops_the_comparison() -> None:
    back = advance(history(), Observation(at=400, command="rollback", release=A), REASONS)
    text = render("gpu-1", back)
    assert value(text, "deploy_reference_output_throughput_tokens_per_second", reference_release=B) == 990
    assert value(text, "deploy_bench_output_throughput_tokens_per_second") == 1000  # A's figures, carried


def test_label_values_are_escaped() -> None:
    text = render('gpu "1"\\x', history())
    assert 'host="gpu \\"1\\"\\\\x"' in text


def test_metric_names_follow_the_conventions() -> None:
    for spec in METRICS:
        assert re.fullmatch(r"deploy_[a-z0-9_]+", spec.name), spec.name
        assert spec.name.endswith("_total") == (spec.type == "counter"), spec.name
        assert "_ms" not in spec.name and "milli" not in spec.name


def test_the_monitoring_page_lists_every_metric() -> None:
    page = (Path(__file__).resolve().parents[3] / "docs" / "monitoring.md").read_text()
    assert [m.name for m in METRICS if f"`{m.name}`" not in page] == []
