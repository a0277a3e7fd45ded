"""The tune's power phase: the GPUs' power limit searched under the SLO, with energy per output token as the
objective, after the flag points (on the flags the tune ends with, at their SLO limit concurrency).

Why a second phase and not a dimension: the limit does not need a roll (nvidia-smi -pl acts at once on the
running server), and a cap only slows a server; so one concurrency, the flags' own SLO limit, is enough: the
search walks the ladder from the GPUs' maximum down (`--power-step` watts apart, the minimum last) and stops at
the first limit that misses the SLO, as every lower one would miss it too. Each limit is one `probe` of
search.py (repeated while a figure lies within the noise band of its bound). The winner is the limit with the
lowest J per output token among those holding the SLO; a lower limit whose J/token is within the noise of a
higher one's is not worth the throughput it costs, so the highest limit within noise of the best is kept.
J/token is the bench's own telemetry (power integrated over the window, summed over the GPUs, / output tokens).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.errors import ConfigError


def parse_power_step(text: str | None) -> int | None:
    """`--power-step 50` → 50 (watts between two limits tried); refused unless a whole number of watts ≥ 5."""
    if text is None:
        return None
    try:
        step = int(text.strip().removesuffix("W").removesuffix("w").strip())
    except ValueError:
        raise ConfigError(f"--power-step {text!r} is not a number of watts", fix="e.g. --power-step 50") from None
    if step < 5:
        raise ConfigError(f"--power-step {step} W is too small (at least 5 W)", fix="e.g. --power-step 50")
    return step


def ladder(min_w: float, max_w: float, step_w: int) -> tuple[int, ...]:
    """The limits to try, from the maximum down by `step_w`, the minimum last."""
    top, low = int(max_w), int(-(-min_w // 1))
    out = list(range(top, low, -step_w))
    if not out or out[-1] != low:
        out.append(low)
    return tuple(out)


@dataclass(frozen=True)
class PowerTrial:
    """One limit's probe: whether it held the SLO, its J/token and throughput (means over its runs)."""

    watts: int
    holds: bool
    j_per_token: float | None
    output_tok_s: float | None


@dataclass(frozen=True)
class PowerChoice:
    watts: int | None
    reason: str


def mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def choose_power(trials: Sequence[PowerTrial], noise_pct: float) -> PowerChoice:
    held = [t for t in trials if t.holds and t.j_per_token is not None]
    if not held:
        return PowerChoice(None, "no power limit held the SLO with a J/token reading")
    best = min(held, key=lambda t: t.j_per_token or 0.0)
    assert best.j_per_token is not None
    near = [t for t in held if (t.j_per_token or 0.0) <= best.j_per_token * (1 + noise_pct / 100.0)]
    pick = max(near, key=lambda t: t.watts)
    top = max(held, key=lambda t: t.watts)
    saved = ((top.j_per_token or 0.0) - (pick.j_per_token or 0.0)) / (top.j_per_token or 1.0) * 100.0
    lost = (((top.output_tok_s or 0.0) - (pick.output_tok_s or 0.0)) / top.output_tok_s * 100.0
            if top.output_tok_s else 0.0)
    if pick.watts == top.watts:
        why = (f"{pick.watts} W: no lower limit cut J/token by more than the noise ({noise_pct:g} %)"
               if len(held) > 1 else f"{pick.watts} W: the only limit that held the SLO")
    else:
        cost = (f"for {lost:.1f} % less throughput" if lost >= 0 else
                 f"at no throughput cost ({-lost:.1f} % more: within the run-to-run noise)")
        why = (f"{pick.watts} W: {saved:.1f} % less energy per output token than at {top.watts} W {cost}, "
               "SLO held")
    return PowerChoice(pick.watts, why)


__all__ = ["PowerChoice", "PowerTrial", "choose_power", "ladder", "mean", "parse_power_step"]
