"""The `--slo "ttft_p99<=2s,tpot_p99<=80ms"` grammar: parsed and refused before any remote change. Pure."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from decimal import Decimal

from orchestrator.errors import ConfigError
from orchestrator.parsers.bench import BenchResult

#: SLO metric names → the BenchResult field in milliseconds.
METRICS: dict[str, str] = {
    f"{m}_{s}": f"{s}_{m}_ms"
    for m in ("ttft", "tpot", "itl", "e2e_latency")
    for s in ("mean", "median", "p90", "p95", "p99")
    if f"{s}_{m}_ms" in BenchResult.model_fields
}
_UNITS = {"ms": Decimal(1), "s": Decimal(1000)}
#: The number as written: digits with at most one decimal point, no exponent; at most MAX_DIGITS digits, so a
#: 300-digit value is refused instead of becoming `inf`.
_TERM = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|<)\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)\s*$")
MAX_DIGITS = 12
#: A bound outside [1 µs, 1 day] is no latency any bench run measures: refused as a typo, not searched for.
MIN_LIMIT_MS, MAX_LIMIT_MS = Decimal("0.001"), Decimal(86_400_000)
SLO_FIX = 'write it as METRIC<=VALUE[ms|s], comma separated, e.g. --slo "ttft_p99<=2s,tpot_p99<=80ms"'


@dataclass(frozen=True)
class Bound:
    """One latency bound: `metric` (a BenchResult field, ms) at most (or below) `limit_ms`."""

    name: str
    field: str
    limit_ms: float
    strict: bool = False
    #: The limit in ms as an exact decimal text (`1000000`, `1234.5678`): what the record stores and the report
    #: prints, and what parses back to the same bound; a float's `:g` made 1000 s into `1e+06ms`.
    exact_ms: str = ""

    def value(self, result: BenchResult) -> float | None:
        v = getattr(result, self.field)
        return float(v) if v is not None else None

    def met(self, value: float) -> bool:
        return value < self.limit_ms if self.strict else value <= self.limit_ms

    def limit_text(self) -> str:
        return self.exact_ms or _plain(Decimal(repr(self.limit_ms)))

    def text(self) -> str:
        return f"{self.name}{'<' if self.strict else '<='}{self.limit_text()}ms"


def _plain(value: Decimal) -> str:
    """`1E+6` → `1000000`, `2.500` → `2.5`: no exponent, no trailing zeros (the grammar reads no exponent)."""
    text = format(value.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


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
                out.append(f"{b.name} {v:.0f} ms > {b.limit_text()} ms")
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
        digits = sum(c.isdigit() for c in number.lstrip("0"))
        if digits > MAX_DIGITS:  # not echoed: a 300-digit number twice is no message
            raise ConfigError(f"--slo term {name}{op}…{unit}: its value has {digits} digits, more than {MAX_DIGITS}",
                              fix=SLO_FIX)
        exact = Decimal(number) * _UNITS[unit]
        if exact <= 0:
            raise ConfigError(f"--slo term {term.strip()!r}: the limit must be above zero", fix=SLO_FIX)
        if not MIN_LIMIT_MS <= exact <= MAX_LIMIT_MS:
            raise ConfigError(f"--slo term {term.strip()!r}: {_plain(exact)} ms is outside 0.001 ms … 1 day, no "
                              "latency a bench run measures", fix=SLO_FIX)
        if any(b.name == name for b in bounds):
            raise ConfigError(f"--slo names {name} twice", fix=SLO_FIX)
        bounds.append(Bound(name, METRICS[name], float(exact), strict=op == "<", exact_ms=_plain(exact)))
    return Slo(tuple(bounds))
