"""`nvidia-smi dmon -s pucvmet [-o T|D|DT]`: whitespace columns named by a `#` header.

Rules, from the format and not from one capture:
- the first `#` line names the columns, the second gives their units; column order differs between drivers
  (the H200 capture has `... pci rxpci txpci`, older output `rxpci txpci sbecc ...`), so columns are looked up by
  name only;
- dmon repeats the two header lines every few screens: later `#` lines are skipped;
- `-` means not available -> None;
- `-o T` adds `#Time HH:MM:SS`, `-o D` `#Date YYYYMMDD`, `-o DT` both; with Time but no Date the caller may give
  the date (a wrap past midnight advances it);
- a row with the wrong number of columns is the last, half-written line of a killed sampler: it is counted in
  `skipped_rows` rather than failing the whole run's telemetry.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from orchestrator.parsers.gpu_query import Sample, Value, parse_value


class DmonParseError(ValueError):
    """No dmon header, or a header without the `gpu` column."""


@dataclass(frozen=True)
class DmonTable:
    """Column names and units as dmon printed them, the samples, and how many torn rows were dropped."""

    columns: tuple[str, ...]
    units: dict[str, str]
    samples: tuple[Sample, ...]
    skipped_rows: int = 0


def _parse_date(raw: str) -> date | None:
    try:
        return datetime.strptime(raw, "%Y%m%d").date()
    except ValueError:
        return None


def _parse_time(raw: str) -> time | None:
    try:
        return datetime.strptime(raw, "%H:%M:%S").time()
    except ValueError:
        return None


def parse_dmon(text: str, *, day: date | None = None) -> DmonTable:
    """Parse dmon output into samples carrying dmon's own column names (`pwr`, `sm`, `pclk`, `rxpci`, ...).

    `day` is used only when the output has `#Time` without `#Date`; without it such samples get the date
    1970-01-01, which keeps their spacing right (energy integration) but cannot be matched to a wall-clock
    bench window.
    """
    header: list[str] | None = None
    units: list[str] | None = None
    samples: list[Sample] = []
    skipped = 0
    ticks: dict[int, int] = {}
    cur_day = day or date(1970, 1, 1)
    last_dt: datetime | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            cells = line[1:].split()
            if header is None:
                header = cells
            elif units is None:
                units = cells
            continue  # repeated headers mid-stream
        if header is None:
            continue  # noise before the header (warnings on stderr merged into the stream)
        cells = line.split()
        if len(cells) != len(header):
            skipped += 1
            continue
        row = dict(zip(header, cells, strict=True))
        if "gpu" not in row:
            raise DmonParseError(f"dmon header has no 'gpu' column: {' '.join(header)}")
        try:
            gpu = int(row["gpu"])
        except ValueError:
            skipped += 1
            continue
        ts: datetime | None = None
        t = _parse_time(row["Time"]) if "Time" in row else None
        d = _parse_date(row["Date"]) if "Date" in row else None
        if t is not None:
            if d is not None:
                ts = datetime.combine(d, t)
            else:
                ts = datetime.combine(cur_day, t)
                if last_dt is not None and ts < last_dt - timedelta(hours=12):
                    cur_day += timedelta(days=1)
                    ts = datetime.combine(cur_day, t)
            last_dt = ts
        elif d is not None:
            ts = datetime.combine(d, time())
        values: dict[str, Value] = {k: parse_value(v) for k, v in row.items() if k not in ("gpu", "Date", "Time")}
        tick = ticks.get(gpu, 0)
        ticks[gpu] = tick + 1
        samples.append(Sample(ts=ts, gpu=gpu, values=values, source="dmon", tick=tick))
    if header is None:
        raise DmonParseError("no dmon header line (starting with '#') in the output")
    unit_map = dict(zip(header, units, strict=False)) if units else {}
    return DmonTable(columns=tuple(header), units=unit_map, samples=tuple(samples), skipped_rows=skipped)


def dmon_argv(interval_s: int = 1, selectors: str = "pucvmet", timestamps: str = "DT") -> list[str]:
    """`nvidia-smi dmon -s pucvmet -o DT -d 1`. DT rather than T: the date makes samples matchable to the
    bench window even across midnight."""
    if interval_s < 1:
        raise ValueError("dmon interval is in whole seconds, at least 1")
    if not set(selectors) <= set("pucvmet"):
        raise ValueError(f"unknown dmon selector in {selectors!r} (known: pucvmet)")
    if timestamps not in ("", "D", "T", "DT"):
        raise ValueError("timestamps must be '', 'D', 'T' or 'DT'")
    argv = ["nvidia-smi", "dmon", "-s", selectors]
    if timestamps:
        argv += ["-o", timestamps]
    return [*argv, "-d", str(interval_s)]
