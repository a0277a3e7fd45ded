"""The GPUs' power limit as the server feels it: a round whose draw would pass the cap runs slower, at the cap.

MODELLED, not measured on sglang: the driver holds a capped GPU at its limit by lowering its clocks, so a round
that would draw more than the cap takes longer and draws the cap. The throughput curve is calibrated on the one
real report we have (an RTX PRO 6000 capped at 300 W, half its 600 W, lost 4.6 % of its throughput):
    throughput ratio = x ** EXPONENT with x = cap / the round's uncapped draw, EXPONENT = ln(0.954) / ln(0.5)
down to half the draw (the knee); below it, clocks fall with the voltage floor reached and the ratio falls faster,
0.954 × (x / 0.5) ** 1.5 (no real figure: an assumption, so that energy per token rises again past the knee).
The limits come from simulator/gpu/powercap.py's file (what the simulated `nvidia-smi -pl` set); a tensor-
parallel round waits for its slowest rank, so the tightest cap among the server's GPUs sets the pace.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

KNEE = 0.5
REAL_LOSS_AT_KNEE = 0.046  # 300 W of 600 W on an RTX PRO 6000: 4.6 % less throughput
EXPONENT = math.log(1.0 - REAL_LOSS_AT_KNEE) / math.log(KNEE)
BELOW_KNEE_EXPONENT = 1.5
FILE = "power-limits.json"
REREAD_S = 0.5


def throughput_ratio(x: float) -> float:
    """The throughput a round keeps when the cap is `x` times its uncapped draw (1.0 at or above it)."""
    if x >= 1.0:
        return 1.0
    if x >= KNEE:
        return float(x ** EXPONENT)
    return float((1.0 - REAL_LOSS_AT_KNEE) * (max(x, 0.05) / KNEE) ** BELOW_KNEE_EXPONENT)


class PowerCap:
    """The caps on the server's GPUs (re-read at most every REREAD_S), applied to one round at a time."""

    def __init__(self, folder: Path | None, minors: list[int], draw: Callable[[], float] = lambda: 1.0) -> None:
        self.folder = folder
        self.minors = minors
        self.draw = draw  # the CT's power_draw knob (simulator/config.py): a multiplier on the modelled draw
        self._scale = 1.0
        self._read_at = 0.0
        self._limits: list[tuple[float, float, float]] = []  # (limit, idle, full) watts per capped GPU

    def limits(self) -> list[tuple[float, float, float]]:
        now = time.monotonic()
        if self.folder is not None and now - self._read_at > REREAD_S:
            self._read_at = now
            self._scale = self.draw()
            try:
                data = json.loads((self.folder / FILE).read_text())
                self._limits = [(float(d["limit_w"]), float(d["idle_w"]), float(d["full_w"]))
                                for k, d in data.items() if int(k) in self.minors]
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                self._limits = []
        return self._limits

    def apply(self, ms: float, power_fraction: float) -> tuple[float, float]:
        """(the round's model ms, its power fraction) under the caps."""
        limits = self.limits()
        power_fraction = min(1.0, power_fraction * self._scale)
        ratio, fraction = 1.0, power_fraction
        for limit, idle, full in limits:
            span = max(full - idle, 1e-9)
            watts = idle + span * power_fraction
            if watts > limit:
                ratio = min(ratio, throughput_ratio(limit / watts))
                fraction = min(fraction, max(0.0, (limit - idle) / span))
        return ms / ratio, fraction
