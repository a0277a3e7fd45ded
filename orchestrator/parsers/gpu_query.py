"""`nvidia-smi --query-gpu` CSV: one-shot queries and the `-lms` sampling loop.

Two shapes reach us:
- with a header (`--format=csv`): field names carry units in brackets (`power.draw [W]`) and so do the values
  (`98.84 W`, `0 %`, `435 MHz`);
- without header and units (`--format=csv,noheader,nounits`): the caller knows the field list because it built
  the command (see `sampler_argv`).

Either way a row becomes a `Sample`: timestamp, GPU index and field -> value, where a value is a float when it reads
as a number, None for `[N/A]` / `[Not Supported]` / any other bracketed placeholder, and the raw string otherwise
(uuid, name, bus id, driver version). The same `Sample` type comes out of the dmon parser, so the telemetry summary
takes either source.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

Value = float | str | None
Source = Literal["query", "dmon"]

# What the benchmark sampler asks for, in this order. It is exactly the column set of the real capture
# `fixtures/nvidia-smi/h200x2-nvlink/query-loop-under-load.csv` (10 columns): that capture is what a real driver
# printed for this list, so the parser is tested on it. `utilization.memory` is not in the loop on purpose: dmon's
# `mem` column carries it at 1 s, which is enough for a diagnosis that only reads the SM side.
SAMPLER_FIELDS: tuple[str, ...] = (
    "timestamp",
    "index",
    "power.draw",
    "power.limit",
    "utilization.gpu",
    "clocks.sm",
    "pcie.link.gen.current",
    "pcie.link.width.current",
    "temperature.gpu",
    "memory.used",
)

# One-shot static facts the summary needs next to the loop (limits and maximum clocks do not change during a run).
STATIC_FIELDS: tuple[str, ...] = (
    "index",
    "name",
    "power.limit",
    "enforced.power.limit",
    "power.max_limit",
    "clocks.max.sm",
    "pcie.link.gen.max",
    "pcie.link.width.max",
)

DEFAULT_INTERVAL_MS = 250
TIMESTAMP_FORMAT = "%Y/%m/%d %H:%M:%S.%f"

_NUMBER_WITH_UNIT = re.compile(r"^([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?:\s*[A-Za-z%/]+)?$")
_HEADER_UNIT = re.compile(r"^(?P<name>[^\[]+?)\s*(?:\[(?P<unit>[^\]]*)\])?$")


class GpuQueryParseError(ValueError):
    """The text is not `--query-gpu` CSV of the expected shape; the message names the line."""


@dataclass(frozen=True)
class Sample:
    """One GPU at one instant, from either `--query-gpu` or `dmon`.

    `tick` is the sample's position among the samples of the same GPU in its stream, so samples without a
    timestamp (dmon without `-o T`) can still be ordered and timed by the caller from the sampling interval.
    `values` keeps the source's own field names (`power.draw` vs `pwr`); telemetry/summary.py maps them.
    """

    ts: datetime | None
    gpu: int
    values: Mapping[str, Value] = field(hash=False)
    source: Source = "query"
    tick: int = 0

    def number(self, name: str) -> float | None:
        """The field as a float, None when absent, N/A or not numeric."""
        v = self.values.get(name)
        return v if isinstance(v, float) else None


def parse_value(raw: str) -> Value:
    """`98.84 W` -> 98.84, `0 %` -> 0.0, `[N/A]` -> None, `GPU-9054…` -> the string."""
    s = raw.strip()
    if not s or (s.startswith("[") and s.endswith("]")) or s in ("N/A", "-"):
        return None
    m = _NUMBER_WITH_UNIT.match(s)
    if m:
        return float(m.group(1))
    return s


def parse_timestamp(raw: str) -> datetime | None:
    """nvidia-smi's `2026/11/30 02:03:55.170` (host local time); None when it does not read as one."""
    s = raw.strip()
    for fmt in (TIMESTAMP_FORMAT, "%Y/%m/%d %H:%M:%S"):
        try:
            return datetime.strptime(s, fmt)
        except ValueError:
            continue
    return None


def parse_header(line: str) -> list[tuple[str, str | None]]:
    """`index, power.draw [W]` -> [("index", None), ("power.draw", "W")]."""
    out: list[tuple[str, str | None]] = []
    for cell in line.split(","):
        m = _HEADER_UNIT.match(cell.strip())
        if not m:
            raise GpuQueryParseError(f"cannot read header cell {cell!r}")
        out.append((m.group("name").strip(), m.group("unit")))
    return out


def _looks_like_header(line: str, fields: Sequence[str] | None) -> bool:
    first = line.split(",", 1)[0].strip()
    first_name = _HEADER_UNIT.match(first)
    name = first_name.group("name").strip() if first_name else first
    if fields:
        return name == fields[0]
    # Data rows start with an index or a timestamp, never with a dotted/lowercase field name.
    return bool(re.fullmatch(r"[a-z][a-z0-9_.]*", name))


def parse_query_gpu(text: str, fields: Sequence[str] | None = None, *,
                    drop_torn_tail: bool = False) -> list[Sample]:
    """Parse one-shot or looped `--query-gpu` CSV into samples.

    `fields=None`: the first non-empty line must be the header. With `fields` given the text may still carry a
    header (it is checked against `fields` and skipped); header lines repeated later are skipped too. A row whose
    column count differs from the field list is an error naming the line, because silently shifting columns
    would put power in the clock column. `drop_torn_tail=True` forgives that on the LAST line only: a sampler
    stopped mid-write leaves a half line there.
    """
    lines = [(n, ln.rstrip("\r\n")) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    names: list[str]
    if fields is None:
        if not lines:
            return []
        hdr_no, hdr = lines[0]
        if not _looks_like_header(hdr, None):
            raise GpuQueryParseError(f"line {hdr_no}: expected a --query-gpu header, got {hdr!r}; "
                                     "pass the field list for noheader output")
        names = [n for n, _ in parse_header(hdr)]
        lines = lines[1:]
    else:
        names = list(fields)
    if "index" not in names:
        raise GpuQueryParseError("the field list has no 'index': samples cannot be attributed to a GPU")
    idx_col = names.index("index")
    ts_col = names.index("timestamp") if "timestamp" in names else None
    ticks: dict[int, int] = {}
    out: list[Sample] = []
    for line_no, line in lines:
        if _looks_like_header(line, names):
            hdr_names = [n for n, _ in parse_header(line)]
            if hdr_names != names:
                raise GpuQueryParseError(f"line {line_no}: header {hdr_names} does not match fields {names}")
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(names) and drop_torn_tail and line_no == lines[-1][0]:
            break
        if len(cells) != len(names):
            raise GpuQueryParseError(f"line {line_no}: {len(cells)} columns, expected {len(names)} "
                                     f"({', '.join(names)}): {line!r}")
        idx_val = parse_value(cells[idx_col])
        if not isinstance(idx_val, float):
            raise GpuQueryParseError(f"line {line_no}: GPU index {cells[idx_col]!r} is not a number")
        gpu = int(idx_val)
        ts = parse_timestamp(cells[ts_col]) if ts_col is not None else None
        if ts_col is not None and ts is None:
            raise GpuQueryParseError(f"line {line_no}: timestamp {cells[ts_col]!r} is not "
                                     "'YYYY/MM/DD HH:MM:SS.mmm'")
        values: dict[str, Value] = {}
        for i, (name, cell) in enumerate(zip(names, cells, strict=True)):
            if i in (ts_col, idx_col):
                continue
            values[name] = parse_value(cell)
        tick = ticks.get(gpu, 0)
        ticks[gpu] = tick + 1
        out.append(Sample(ts=ts, gpu=gpu, values=values, source="query", tick=tick))
    return out


def sampler_argv(interval_ms: int = DEFAULT_INTERVAL_MS, fields: Iterable[str] = SAMPLER_FIELDS) -> list[str]:
    """`nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits -lms <ms>` as an argv (shlex.join it)."""
    if interval_ms < 1:
        raise ValueError("interval_ms must be at least 1")
    names = list(fields)
    for n in names:
        if not re.fullmatch(r"[a-z][a-z0-9_.]*", n):
            raise ValueError(f"not a --query-gpu field name: {n!r}")
    return ["nvidia-smi", f"--query-gpu={','.join(names)}", "--format=csv,noheader,nounits",
            "-lms", str(interval_ms)]


def static_query_argv(fields: Iterable[str] = STATIC_FIELDS) -> list[str]:
    """One-shot query of limits and maximum clocks, parsed with `parse_query_gpu(text, STATIC_FIELDS)`."""
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]


def parse_power_rows(text: str) -> list[dict[str, float | int | None]]:
    """`--query-gpu=index,power.draw,power.limit,utilization.gpu --format=csv,noheader,nounits`: one dict a GPU
    (a figure that does not read as a number, `[N/A]`, is None); lines that are no GPU's row are skipped."""
    def num(x: str) -> float | None:
        try:
            return float(x)
        except ValueError:
            return None

    rows: list[dict[str, float | int | None]] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4 and parts[0].isdigit():
            rows.append({"gpu": int(parts[0]), "power_w": num(parts[1]), "limit_w": num(parts[2]),
                         "util_pct": num(parts[3])})
    return rows
