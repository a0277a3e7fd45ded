"""Whether two ledger runs measured the same thing, before `deploy compare` prints deltas between them.

Deltas between two different benchmarks are not a result: `quick` (64 prompts, 64/64 tokens) against
`seed-1024x256` showed "+257 % better" for a server that had not changed. Different presets, or different token
lengths or datasets, are refusals (`--force` prints the deltas anyway, under a warning). Differences that leave
the benchmark the same but change what is measured (another host, other GPUs or power limits, a different
concurrency, rate or prompt count from `--set`/`--sweep`) are warnings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.ledger.sqlite import RunRecord

#: BenchResult fields that define the benchmark itself: a difference makes the runs incomparable.
WORKLOAD: tuple[tuple[str, str], ...] = (
    ("dataset_name", "dataset"), ("random_input_len", "input length"), ("random_output_len", "output length"),
    ("random_range_ratio", "random_range_ratio"),
)
#: BenchResult fields that shape the load within one benchmark: a difference is worth a warning.
LOAD: tuple[tuple[str, str], ...] = (
    ("max_concurrency", "max concurrency"), ("request_rate", "request rate"), ("num_prompts", "prompts"),
)


@dataclass(frozen=True)
class Comparability:
    refusals: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def comparable(self) -> bool:
        return not self.refusals


def _bench_field(run: RunRecord, name: str) -> Any:
    return getattr(run.bench, name, None) if run.bench is not None else None


def _differences(a: RunRecord, b: RunRecord, fields: tuple[tuple[str, str], ...]) -> list[str]:
    out = []
    for name, label in fields:
        va, vb = _bench_field(a, name), _bench_field(b, name)
        if va is not None and vb is not None and va != vb:
            out.append(f"{label} {va:g} vs {vb:g}" if isinstance(va, int | float) else f"{label} {va} vs {vb}")
    return out


def _gpus(run: RunRecord) -> tuple[int, tuple[float, ...]] | None:
    """(GPU count, sorted distinct power limits) from the run's telemetry, or None without telemetry."""
    t = run.telemetry
    if t is None or not t.gpus:
        return None
    limits = sorted({g.power_limit_w for g in t.gpus if g.power_limit_w is not None})
    return len(t.gpus), tuple(limits)


def _describe_gpus(g: tuple[int, tuple[float, ...]]) -> str:
    limits = "/".join(f"{w:g}" for w in g[1]) or "?"
    return f"{g[0]} GPUs at {limits} W"


def comparability(a: RunRecord, b: RunRecord) -> Comparability:
    """Refusals (different benchmarks) and warnings (same benchmark, different conditions) for b against a."""
    refusals: list[str] = []
    warnings: list[str] = []
    workload, load = _differences(a, b, WORKLOAD), _differences(a, b, LOAD)
    if a.preset and b.preset and a.preset != b.preset:
        detail = ", ".join(workload + load)
        refusals.append(f"different presets: {a.preset!r} vs {b.preset!r}"
                        + (f" ({detail})" if detail else ""))
    else:
        if workload:
            refusals.append(f"different benchmarks: {', '.join(workload)}")
        if load:
            warnings.append(f"same preset, different load ({', '.join(load)}): --set overrides or sweep points")
        unknown = [r.id for r in (a, b) if not r.preset]
        if unknown:
            warnings.append(f"no preset recorded for {', '.join(unknown)} (imported without --preset): only the "
                            "token lengths could be checked")
    if a.host != b.host:
        warnings.append(f"different hosts: {a.id} ran on {a.host}, {b.id} on {b.host}")
    ga, gb = _gpus(a), _gpus(b)
    if ga is not None and gb is not None and ga != gb:
        warnings.append(f"different GPUs: {_describe_gpus(ga)} vs {_describe_gpus(gb)}")
    return Comparability(tuple(refusals), tuple(warnings))


def _flag(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(_flag(v) for v in value)
    return str(value)


def _flags_text(flags: dict[str, Any]) -> str:
    return " ".join(f"{k}={_flag(v)}" for k, v in sorted(flags.items())) if flags else "not recorded"


def flag_changes(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """b's flags against a's: `key: A → B`, `+key=B` (only in b), `-key` (only in a)."""
    out = []
    for k in sorted(set(a) | set(b)):
        if k not in b:
            out.append(f"-{k}")
        elif k not in a:
            out.append(f"+{k}={_flag(b[k])}")
        elif a[k] != b[k]:
            out.append(f"{k}: {_flag(a[k])} → {_flag(b[k])}")
    return out


def header_lines(a: RunRecord, b: RunRecord) -> list[str]:
    """What each run was: its release and the server flags it ran with (as the ledger recorded them), then what
    changed between them, so a delta is read against the change that made it."""
    lines = []
    for tag, run in (("A", a), ("B", b)):
        lines.append(f"{tag}: {run.id} on {run.host}, release {run.release_id or 'not recorded'}, "
                     f"preset {run.preset or 'not recorded'}, {run.source} run at {run.started_at:%Y-%m-%d %H:%M:%S}")
        lines.append(f"   flags: {_flags_text(run.flags)}")
    if a.flags and b.flags:
        changes = flag_changes(a.flags, b.flags)
        lines.append(f"flag changes A → B: {', '.join(changes)}" if changes else "flags: the same in A and B")
    return lines
