"""The tune's power phase, pure part (tune/power.py): the ladder from the maximum down, the choice of the limit
with the lowest J/token holding the SLO (the highest limit within noise of it), and --power-step's refusals."""

from __future__ import annotations

import pytest

from orchestrator.errors import ConfigError
from orchestrator.tune.power import PowerTrial, choose_power, ladder, parse_power_step


def test_the_ladder_runs_from_the_maximum_down_and_ends_at_the_minimum() -> None:
    assert ladder(300.0, 600.0, 100) == (600, 500, 400, 300)
    assert ladder(300.0, 600.0, 125) == (600, 475, 350, 300)
    assert ladder(200.0, 700.0, 1000) == (700, 200)


def test_the_lowest_j_per_token_holding_the_slo_wins() -> None:
    trials = [PowerTrial(600, True, 0.40, 1000.0), PowerTrial(500, True, 0.36, 990.0),
              PowerTrial(400, True, 0.30, 960.0), PowerTrial(300, False, 0.27, 900.0)]
    pick = choose_power(trials, noise_pct=5.0)
    assert pick.watts == 400  # 300 W is cheaper per token but missed the SLO
    assert pick.reason.startswith("400 W: 25.0 % less energy per output token than at 600 W for 4.0 % less")


def test_a_cheaper_limit_within_noise_does_not_win() -> None:
    trials = [PowerTrial(600, True, 0.300, 1000.0), PowerTrial(500, True, 0.290, 999.0),
              PowerTrial(400, True, 0.289, 950.0)]
    assert choose_power(trials, noise_pct=5.0).watts == 600
    assert "no lower limit cut J/token by more than the noise" in choose_power(trials, noise_pct=5.0).reason
    assert choose_power(trials, noise_pct=0.0).watts == 400
    assert choose_power([PowerTrial(600, False, 0.3, 10.0)], 5.0).watts is None
    faster = choose_power([PowerTrial(600, True, 0.4, 900.0), PowerTrial(300, True, 0.3, 930.0)], 5.0)
    assert faster.reason.endswith("at no throughput cost (3.3 % more: within the run-to-run noise), SLO held")


def test_power_step_is_refused_unless_watts() -> None:
    assert parse_power_step("50") == 50 and parse_power_step("50W") == 50 and parse_power_step(None) is None
    for bad in ("fifty", "2"):
        with pytest.raises(ConfigError):
            parse_power_step(bad)
