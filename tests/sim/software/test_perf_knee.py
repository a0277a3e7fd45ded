"""The stand-in's performance model has a knee that depends on the flags, and seeded noise (README, "The knee")."""

from __future__ import annotations

from typing import Any

from tests.standin_model import perf_module

perf = perf_module()


def model(**flags: Any) -> Any:
    args = {"tp_size": 8, "max_running_requests": 128, "num_continuous_decode_steps": 1, **flags}
    return perf.PerfModel.from_args(args)


def test_ttft_jumps_past_max_running_requests() -> None:
    m = model(max_running_requests=128)
    at, past = perf.latency(m, 128, 32, 48), perf.latency(m, 129, 32, 48)
    assert at.ttft_ms < 500 < 1500 < past.ttft_ms  # a queue for a slot: one request's whole decode
    assert past.tpot_ms == at.tpot_ms  # the batch stays at max-running
    wider = perf.latency(model(max_running_requests=256), 129, 32, 48)
    assert wider.ttft_ms < 500  # the knee moves with the flag


def test_decode_steps_trade_tpot_for_ttft() -> None:
    one, eight = perf.latency(model(), 64, 32, 48), perf.latency(model(num_continuous_decode_steps=8), 64, 32, 48)
    assert eight.tpot_ms < one.tpot_ms
    assert eight.ttft_ms > 2 * one.ttft_ms


def test_tpot_rises_with_the_batch() -> None:
    m = model(max_running_requests=1024)
    tpots = [perf.latency(m, c, 32, 48).tpot_ms for c in (16, 64, 256, 512)]
    assert tpots == sorted(tpots) and tpots[-1] > 2 * tpots[0]


def test_noise_is_seeded_and_off_by_default() -> None:
    assert perf.noise_factor(7, 0.0, 3) == 1.0
    draws = [perf.noise_factor(7, 0.1, p) for p in range(1, 50)]
    assert draws == [perf.noise_factor(7, 0.1, p) for p in range(1, 50)]
    assert draws != [perf.noise_factor(8, 0.1, p) for p in range(1, 50)]
    assert all(0.5 <= d <= 2.0 for d in draws) and 0.95 < sum(draws) / len(draws) < 1.05
