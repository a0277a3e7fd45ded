"""Validated energy (orchestrator/telemetry/energy.py): the integral against the simulated GPUs' analytic power,
and windows the checks must mark invalid."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from orchestrator.parsers.gpu_query import Sample
from orchestrator.telemetry.energy import integrate, validated_energy
from orchestrator.telemetry.summary import summarize
from simulator.gpu.profiles import get_profile
from simulator.gpu.telemetry import GpuLoad, sample

T0 = datetime(2026, 12, 7, 16, 0, 0)
WINDOW_S = 30.0
PERIOD_S = 0.25  # the sampler's -lms 250


def fraction(t: float) -> float:
    """A bench's load: ramp-up over 3 s, steady at 0.6, a heavier phase, ramp-down over the last 2 s."""
    if t < 3:
        return 0.6 * t / 3
    if t > WINDOW_S - 2:
        return 0.6 * (WINDOW_S - t) / 2
    return 0.85 if 12 <= t < 18 else 0.6


def readings(gpu: int, *, skip: tuple[float, float] | None = None) -> list[tuple[datetime, float]]:
    """What the simulated nvidia-smi reads every 250 ms (its own formula and jitter, simulator/gpu/telemetry.py)."""
    profile = get_profile("rtx-pro-6000-x8")
    out = []
    t = 0.1
    while t < WINDOW_S:
        if skip is None or not skip[0] <= t < skip[1]:
            s = sample(profile, profile.gpus[gpu], GpuLoad(power_fraction=fraction(t), util=0.9), 1e6 + t)
            out.append((T0 + timedelta(seconds=t), s.power_w))
        t += PERIOD_S
    return out


def analytic_j(gpu: int) -> float:
    """idle + (0.99 limit - idle) * f(t), integrated finely, without the sampler or the jitter."""
    profile = get_profile("rtx-pro-6000-x8")
    idle, top = profile.gpus[gpu].idle_power_w, 0.99 * profile.power_limit_w
    n = 300_000
    dt = WINDOW_S / n
    return sum((idle + (top - idle) * fraction((i + 0.5) * dt)) * dt for i in range(n))


END = T0 + timedelta(seconds=WINDOW_S)


def test_the_integral_is_within_2_percent_of_the_stand_in_s_analytic_power() -> None:
    e = validated_energy({g: readings(g) for g in range(8)}, T0, END, output_tokens=16_384, input_tokens=16_384,
                         output_throughput=546.1, mean_tpot_ms=40.0)
    assert e.valid and e.problems == ()
    for g in e.gpus:
        assert g.energy_j == pytest.approx(analytic_j(g.gpu), rel=0.02)
        assert g.coverage > 0.98 and g.max_gap_s <= 0.3
    assert e.total_energy_j == pytest.approx(sum(analytic_j(g) for g in range(8)), rel=0.02)
    assert e.j_per_output_token == pytest.approx(e.total_energy_j / 16_384)
    assert e.j_per_total_token == pytest.approx(e.total_energy_j / 32_768)
    assert e.output_tok_s_per_gpu == pytest.approx(546.1 / 8) and e.output_tok_s_per_user == pytest.approx(25.0)


def test_a_gap_in_sampling_marks_the_window_invalid() -> None:
    power = {g: readings(g) for g in range(8)}
    power[3] = readings(3, skip=(10.0, 14.0))  # the sampler stalled for 4 s on GPU 3
    e = validated_energy(power, T0, END)
    assert not e.valid
    assert e.problems == ("GPU 3: a 4.2 s gap between two power readings (> 1 s)",)  # 9.85 s to 14.1 s


def test_readings_that_stop_early_or_a_gpu_without_any_are_invalid() -> None:
    late = readings(0)[:80]  # the last reading 20 s into a 30 s window
    e = validated_energy({0: late}, T0, END, expected_gpus=[0, 1])
    assert not e.valid
    assert any("readings cover 66 % of the window" in p for p in e.problems)
    assert any("last 10.2 s before the end (> 1 s)" in p for p in e.problems)  # 19.85 s
    assert "GPU 1: no power reading inside the window" in e.problems


def test_edges_are_held_at_the_nearest_reading() -> None:
    pts = [(T0 + timedelta(seconds=1), 100.0), (T0 + timedelta(seconds=3), 200.0)]
    # 1 s at 100 W before the first reading, 300 J of trapezoid, 1 s at 200 W after the last
    assert integrate(pts, T0, T0 + timedelta(seconds=4)) == pytest.approx(100 + 300 + 200)


def test_summarize_carries_the_validated_energy_into_the_run() -> None:
    samples = [Sample(source="query", gpu=g, ts=t, values={"power.draw": round(w, 2)})
               for g in range(2) for t, w in readings(g)]
    tel = summarize(samples, window=(T0, END), output_tokens=1000, output_throughput=33.3, input_tokens=3000,
                    mean_tpot_ms=50.0)
    assert tel.energy is not None and tel.energy.valid
    assert tel.j_per_total_token == pytest.approx(tel.energy.total_energy_j / 4000)
    assert tel.output_tok_s_per_gpu == pytest.approx(33.3 / 2) and tel.output_tok_s_per_user == pytest.approx(20.0)
