"""What a `deploy tune` will do, parsed and refused before any remote change (exit 2). Pure.

`--over FLAG=V1,V2` per server flag (names checked against the profile's sglang flag schema, with a did-you-mean),
their product as the flag points, `--range LO:HI[:STEP]` as the concurrency grid, `--budget 30m`.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from orchestrator.errors import ConfigError
from orchestrator.flags.flagset import refuse_secret_dimension
from orchestrator.flags.schema import FlagSchema, ResolveError
from orchestrator.tune.search import concurrency_grid, grid_size, max_search_runs

MAX_POINTS = 64
MAX_GRID = 4096
#: A budget longer than this is a typo, not a plan (and a 400-digit one was an OverflowError).
MAX_BUDGET_S = 30 * 86400


@dataclass(frozen=True)
class FlagPoint:
    """One combination of the swept server flags (canonical names, in --over order)."""

    values: tuple[tuple[str, str], ...]

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.values)

    @property
    def sets(self) -> tuple[str, ...]:
        return tuple(f"{k}={v}" for k, v in self.values)


@dataclass(frozen=True)
class TunePlan:
    flags: tuple[str, ...]
    points: tuple[FlagPoint, ...]
    grid: tuple[int, ...]
    budget_s: float | None

    @property
    def max_runs_per_point(self) -> int:
        return max_search_runs(len(self.grid))


def _canonical(schema: FlagSchema, name: str) -> str:
    bare = name.strip().lstrip("-")
    try:
        resolved = schema.resolve(bare)
    except ResolveError as err:
        options = [o[2:] for o in schema.option_strings if o.startswith("--")]
        close = err.candidates[:3] if err.kind == "ambiguous" else difflib.get_close_matches(bare, options, n=3)
        hint = f"did you mean {' or '.join('--' + c.lstrip('-') for c in close)}? " if close else ""
        raise ConfigError(f"--over: {err.kind} server flag --{bare} for sglang {schema.version}",
                          fix=f"{hint}`deploy render flags` lists the flags this sglang knows") from None
    if not resolved.exact:
        raise ConfigError(f"--over: --{bare} is only a prefix of {resolved.option}",
                          fix=f"write the whole name: --over {resolved.option[2:]}=…")
    return resolved.option[2:]


def parse_over(items: tuple[str, ...], schema: FlagSchema, secret_flags: Iterable[str] = (),
               power_only: bool = False) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not items and power_only:  # `--power-step` alone: the current flags, then the power phase
        return ()
    if not items:
        raise ConfigError("deploy tune needs at least one --over FLAG=V1,V2",
                          fix="e.g. --over num-continuous-decode-steps=4,8,16")
    out: list[tuple[str, tuple[str, ...]]] = []
    for item in items:
        key, sep, values = item.partition("=")
        if key.strip():
            refuse_secret_dimension("--over", key, schema, secret_flags)  # before its values are even looked at
        vals = tuple(v.strip() for v in values.split(",") if v.strip())
        if not sep or not key.strip() or not vals:
            raise ConfigError(f"--over {item!r} must be FLAG=V1,V2[,…]",
                              fix="e.g. --over max-running-requests=512,1024,2048")
        if len(set(vals)) != len(vals):
            raise ConfigError(f"--over {item!r} names a value twice", fix="give each value once")
        for v in vals:
            if not re.fullmatch(r"[A-Za-z0-9._:/+-]+", v):
                raise ConfigError(f"--over {item!r}: value {v!r} is not a plain flag value",
                                  fix="letters, digits and . _ : / + - only")
        name = _canonical(schema, key)
        if any(name == n for n, _ in out):
            raise ConfigError(f"--over names {name} twice", fix="give all of a flag's values in one --over")
        out.append((name, vals))
    return tuple(out)


def parse_range(text: str) -> tuple[int, ...]:
    """`LO:HI[:STEP]` → the concurrency grid (STEP defaults to LO)."""
    parts = text.split(":")
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        nums = []
    if len(nums) not in (2, 3) or min(nums) < 1 or nums[0] >= nums[1]:
        raise ConfigError(f"--range {text!r} must be LO:HI[:STEP], whole numbers with 1 ≤ LO < HI",
                          fix="e.g. --range 8:512:8 (concurrency 8, 16, …, 512)")
    low, high = nums[0], nums[1]
    step = nums[2] if len(nums) == 3 else low
    count = grid_size(low, high, step)  # counted, not built: `1:999999999999` is a number, not a list
    if count > MAX_GRID:
        raise ConfigError(f"--range {text!r} has {count} values, more than {MAX_GRID}", fix="take a larger STEP")
    return concurrency_grid(low, high, step)


def parse_budget(text: str | None) -> float | None:
    """`30m`, `90s`, `1h`, `1h30m` → seconds."""
    if not text:
        return None
    m = re.fullmatch(r"\s*(?:(\d+)h)?\s*(?:(\d+)m)?\s*(?:(\d+)s)?\s*", text)
    if m is None or not any(m.groups()):
        raise ConfigError(f"--budget {text!r} is not a duration", fix="e.g. --budget 30m, 90s, 1h30m")
    # Each part's digits are counted before int(): a 5000-digit part is beyond Python's int parsing, a 400-digit
    # one beyond a float (both were internal errors).
    h, mi, s = (int(g) if g and len(g) <= 9 else (MAX_BUDGET_S + 1 if g else 0) for g in m.groups())
    total = h * 3600 + mi * 60 + s
    if total <= 0:
        raise ConfigError("--budget must be above zero", fix="e.g. --budget 30m")
    if total > MAX_BUDGET_S:
        raise ConfigError(f"--budget {text[:40]!r} is more than {MAX_BUDGET_S // 86400} days",
                          fix="a tune's budget is minutes or hours, e.g. --budget 2h; leave it out for no limit")
    return float(total)


def make_plan(over: tuple[str, ...], range_text: str, budget: str | None, schema: FlagSchema,
              secret_flags: Iterable[str] = (), power_only: bool = False) -> TunePlan:
    flags = parse_over(over, schema, secret_flags, power_only)
    count = math.prod(len(vals) for _, vals in flags)  # counted, not built: 300×300×300 values took 9 GB and 83 s
    if count > MAX_POINTS:
        raise ConfigError(f"--over gives {count} flag points, more than {MAX_POINTS}",
                          fix="sweep fewer values, or tune in stages")
    points = tuple(FlagPoint(tuple(zip([n for n, _ in flags], combo, strict=True)))
                   for combo in itertools.product(*(vals for _, vals in flags))) if flags else ()
    return TunePlan(tuple(n for n, _ in flags), points, parse_range(range_text), parse_budget(budget))
