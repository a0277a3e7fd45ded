"""The `--slo "ttft_p99<=2s,tpot_p99<=80ms"` grammar: parsed and refused before any remote change. Pure."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from orchestrator.errors import ConfigError
from orchestrator.parsers.bench import BenchResult

#: SLO metric names → the BenchResult field in milliseconds.
METRICS: dict[str, str] = {
    f"{m}_{s}": f"{s}_{m}_ms"
    for m in ("ttft", "tpot", "itl", "e2e_latency")
    for s in ("mean", "median", "p90", "p95", "p99")
    if f"{s}_{m}_ms" in BenchResult.model_fields
}
_UNITS = {"ms": 1.0, "s": 1000.0}
_TERM = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|<)\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)\s*$")
SLO_FIX = 'write it as METRIC<=VALUE[ms|s], comma separated, e.g. --slo "ttft_p99<=2s,tpot_p99<=80ms"'


@dataclass(frozen=True)
class Bound:
    """One latency bound: `metric` (a BenchResult field, ms) at most (or below) `limit_ms`."""

    name: str
    field: str
    limit_ms: float
    strict: bool = False

    def value(self, result: BenchResult) -> float | None:
        v = getattr(result, self.field)
        return float(v) if v is not None else None

    def met(self, value: float) -> bool:
        return value < self.limit_ms if self.strict else value <= self.limit_ms

    def text(self) -> str:
        return f"{self.name}{'<' if self.strict else '<='}{self.limit_ms:g}ms"


@dataclass(frozen=True)
class Slo:
    bounds: tuple[Bound, ...]

    def text(self) -> str:
        return ",".join(b.text() for b in self.bounds)

    def misses(self, values: dict[str, float | None]) -> list[str]:
        """Which bounds the figures (by bound name) break; a missing figure breaks its bound."""
        out = []
        for b in self.bounds:
            v = values.get(b.name)
            if v is None:
                out.append(f"{b.name} not measured")
            elif not b.met(v):
                out.append(f"{b.name} {v:.0f} ms > {b.limit_ms:g} ms")
        return out

    def figures(self, result: BenchResult) -> dict[str, float | None]:
        return {b.name: b.value(result) for b in self.bounds}


def parse_slo(text: str) -> Slo:
    """`ttft_p99<=2s,tpot_p99<=80ms` → Slo; ConfigError (exit 2) on any term that is not of that form."""
    terms = [t for t in (text or "").split(",") if t.strip()]
    if not terms:
        raise ConfigError("--slo is empty", fix=SLO_FIX)
    bounds: list[Bound] = []
    for term in terms:
        m = _TERM.match(term.lower())
        if m is None:
            raise ConfigError(f"--slo term {term.strip()!r} is not METRIC<=VALUE with a unit", fix=SLO_FIX)
        name, op, number, unit = m.groups()
        if name not in METRICS:
            close = difflib.get_close_matches(name, list(METRICS), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ConfigError(f"--slo: unknown metric {name!r}",
                              fix=f"{hint}known: {', '.join(sorted(METRICS))}")
        if unit not in _UNITS:
            raise ConfigError(f"--slo term {term.strip()!r}: the unit must be ms or s, not {unit or 'missing'!r}",
                              fix=SLO_FIX)
        limit = float(number) * _UNITS[unit]
        if limit <= 0:
            raise ConfigError(f"--slo term {term.strip()!r}: the limit must be above zero", fix=SLO_FIX)
        if any(b.name == name for b in bounds):
            raise ConfigError(f"--slo names {name} twice", fix=SLO_FIX)
        bounds.append(Bound(name, METRICS[name], limit, strict=op == "<"))
    return Slo(tuple(bounds))
