"""`sglang.bench_serving` results: the `--output-file` JSONL record, or the printed summary block as a fallback.

Both give the same `BenchResult`, so everything downstream (gate, diagnosis, ledger, reports) ignores where the
numbers came from. Keys and labels churn between sglang versions, so:
- JSONL: the file is opened in append mode, so the LAST record is this run; keys are read through alias lists
  (`total_output_tokens` or `total_output`, ...), and only `completed` and `output_throughput` are required;
- summary: parsed by label, never by line number; rows missing in older versions (P90/P95, Peak concurrent
  requests, Accept length) just stay None; trailing spaces are irrelevant.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class BenchParseError(ValueError):
    """Neither a usable JSONL record nor a summary block; the message says what was missing."""


class BenchValueError(BenchParseError):
    """A figure is there but is none a bench run measures (negative, NaN, infinite, text); the message names the
    field and what it may be."""


class BenchResult(BaseModel):
    """One bench_serving run. Latencies in ms, throughputs in tokens (or requests) per second."""

    # inf request rates serialise as the string "Infinity" (valid JSON, and pydantic reads it back).
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="strings")

    source: Literal["jsonl", "summary"]
    backend: str | None = None
    dataset_name: str | None = None
    tag: str | None = None
    request_rate: float | None = None
    max_concurrency: int | None = None
    random_input_len: int | None = None
    random_output_len: int | None = None
    random_range_ratio: float | None = None

    duration_s: float | None = None
    completed: int
    num_prompts: int | None = None
    failed: int | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    total_output_tokens_retokenized: int | None = None

    request_throughput: float | None = None
    input_throughput: float | None = None
    output_throughput: float
    total_throughput: float | None = None
    peak_output_throughput: float | None = None  # max_output_tokens_per_s
    concurrency: float | None = None  # mean: sum(e2e latency) / duration
    max_concurrent_requests: int | None = None  # peak requests in flight
    accept_length: float | None = None

    mean_ttft_ms: float | None = None
    median_ttft_ms: float | None = None
    p90_ttft_ms: float | None = None
    p95_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    mean_tpot_ms: float | None = None
    median_tpot_ms: float | None = None
    p90_tpot_ms: float | None = None
    p95_tpot_ms: float | None = None
    p99_tpot_ms: float | None = None
    mean_itl_ms: float | None = None
    median_itl_ms: float | None = None
    p90_itl_ms: float | None = None
    p95_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    max_itl_ms: float | None = None
    mean_e2e_latency_ms: float | None = None
    median_e2e_latency_ms: float | None = None
    p90_e2e_latency_ms: float | None = None
    p95_e2e_latency_ms: float | None = None
    p99_e2e_latency_ms: float | None = None

    server_info: dict[str, Any] | None = None


# BenchResult field -> JSONL keys to try, first hit wins. Fields not listed use their own name.
_JSONL_ALIASES: dict[str, tuple[str, ...]] = {
    "duration_s": ("duration",),
    "total_input_tokens": ("total_input_tokens", "total_input"),
    "total_output_tokens": ("total_output_tokens", "total_output"),
    "total_output_tokens_retokenized": ("total_output_tokens_retokenized", "total_output_retokenized"),
    "peak_output_throughput": ("max_output_tokens_per_s", "peak_output_throughput"),
    "max_concurrent_requests": ("max_concurrent_requests", "peak_concurrent_requests"),
    "server_info": ("server_info", "server_args"),
}

_INT_FIELDS = {"max_concurrency", "random_input_len", "random_output_len", "completed", "num_prompts", "failed",
               "total_input_tokens", "total_output_tokens", "total_output_tokens_retokenized",
               "max_concurrent_requests"}
_STR_FIELDS = {"backend", "dataset_name", "tag"}
_REQUIRED = ("completed", "output_throughput")


#: Printed-block values that mean "no figure" (`Max request concurrency: not set`), not a bad one.
_NOT_SET = {"not set", "none", "n/a", "-"}
_WHOLE = "a whole number ≥ 0"
_FINITE = "a finite number ≥ 0"


def _allowed(name: str) -> str:
    """What a figure may be: counts are whole, a request rate may be `inf`, no figure is negative or NaN."""
    if name in _INT_FIELDS:
        return _WHOLE
    return "a number above 0, or inf" if name == "request_rate" else _FINITE


def _shown(v: Any) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, float) and math.isinf(v):
        return f"{'-' if v < 0 else ''}infinite (1e309 or Infinity in the file)"
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, str) else str(v)


def _figure(name: str, v: Any) -> tuple[Any, str | None]:
    """(value, None) for a figure bench_serving can write; (None, None) for none ("not set", an optional NaN);
    (None, why) for a value no run measures (negative, infinite, a fraction of a count, text, a NaN `completed`
    or `output_throughput`): `why` shows it and the rule."""
    if name in _STR_FIELDS:
        return str(v), None
    if name == "server_info":
        return (v if isinstance(v, dict) else None), None
    if isinstance(v, str):
        text = v.strip().lower()
        if text in _NOT_SET:
            return None, None
        try:
            f = math.inf if text in ("inf", "infinity", "+inf") else float(text)
        except ValueError:
            return None, f"is {_shown(v)}; it must be {_allowed(name)}"
    elif isinstance(v, int | float) and not isinstance(v, bool):
        f = float(v)
    else:
        return None, f"is {_shown(v)}; it must be {_allowed(name)}"
    if math.isnan(f) and name not in _REQUIRED:
        return None, None  # bench_serving's mean of no samples (the ITL of one-token outputs): no figure
    finite_ok = math.isfinite(f) or (name == "request_rate" and f == math.inf)
    if not finite_ok or f < 0 or (name == "request_rate" and f == 0) or (name in _INT_FIELDS and not f.is_integer()):
        return None, f"is {_shown(v if not isinstance(v, str) else f)}; it must be {_allowed(name)}"
    return (int(f) if name in _INT_FIELDS else f), None


def _coerce(name: str, v: Any, where: str, strict: bool) -> Any:
    """A figure, or None when it is not one: refused (BenchValueError) when strict (an imported file is
    someone's claim, checked before it is filed) or when it is one of the two figures every result needs; else
    dropped (a run of ours: one odd optional figure from a new sglang version does not lose the run)."""
    val, why = _figure(name, v)
    if why is not None and (strict or name in _REQUIRED):
        raise BenchValueError(f"{where} {why}")
    return val


def bench_result_from_record(record: dict[str, Any], *, num_prompts: int | None = None, strict: bool = False,
                             where: str = "bench JSONL record") -> BenchResult:
    """Build a BenchResult from one decoded JSONL record (the keys of any sglang version seen so far).

    `num_prompts` (from the preset) lets failures be derived as num_prompts - completed; with `--output-details`
    the record's own `input_lens` length (one entry per request, failed included) or `errors` list is used.
    `strict` (an imported file): every figure present must be one a run measures (see `_coerce`).
    """
    data: dict[str, Any] = {"source": "jsonl"}
    for name in BenchResult.model_fields:
        if name == "source":
            continue
        for key in _JSONL_ALIASES.get(name, (name,)):
            if key in record and record[key] is not None:
                val = _coerce(name, record[key], f"{where}: {key!r}", strict)
                if val is not None:
                    data[name] = val
                    break
    if "completed" not in data:
        raise BenchParseError("bench JSONL record has no 'completed' count")
    if "output_throughput" not in data:
        raise BenchParseError("bench JSONL record has no 'output_throughput'")
    if data.get("num_prompts") is None:
        lens = record.get("input_lens")
        if num_prompts is not None:
            data["num_prompts"] = num_prompts
        elif isinstance(lens, list) and lens:
            data["num_prompts"] = len(lens)
    if data.get("failed") is None:
        errors = record.get("errors")
        if isinstance(errors, list) and errors:
            data["failed"] = sum(1 for e in errors if e)
        elif data.get("num_prompts") is not None:
            data["failed"] = max(0, int(data["num_prompts"]) - int(data["completed"]))
    if strict:
        _check_counts(data, where)
    return BenchResult.model_validate(data)


def _check_counts(data: dict[str, Any], where: str) -> None:
    """Counts that contradict each other are no run: more completed (or failed) requests than were sent."""
    sent = data.get("num_prompts")
    for name in ("completed", "failed"):
        if sent is not None and data.get(name) is not None and data[name] > sent:
            raise BenchValueError(f"{where}: {name!r} is {data[name]}, more than the {sent} requests sent "
                                  "(num_prompts)")


def parse_bench_jsonl(text: str, *, num_prompts: int | None = None) -> BenchResult:
    """The LAST non-empty line of a bench_serving `--output-file` (it appends one line per run).

    A torn or non-JSON last line is an error rather than a silent fall back to an older run's record.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise BenchParseError("bench JSONL output is empty: the run wrote no record")
    last = lines[-1]
    try:
        record = json.loads(last)
    except json.JSONDecodeError as exc:
        raise BenchParseError(f"last line of the bench JSONL (line {len(lines)}) is not JSON: {exc.msg}") from exc
    if not isinstance(record, dict):
        raise BenchParseError("last line of the bench JSONL is not a JSON object")
    return bench_result_from_record(record, num_prompts=num_prompts)


def parse_bench_jsonl_all(text: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, record) of every JSON object line of a JSONL file (importing a file of several runs)."""
    out: list[tuple[int, dict[str, Any]]] = []
    for n, ln in enumerate(text.splitlines(), 1):
        if not ln.strip():
            continue
        try:
            rec = json.loads(ln)
        except json.JSONDecodeError as exc:
            raise BenchParseError(f"line {n} of the bench JSONL is not JSON: {exc.msg}") from None
        if not isinstance(rec, dict):
            raise BenchParseError(f"line {n} of the bench JSONL is not a JSON object")
        out.append((n, rec))
    return out


# Summary label (lower case, without the trailing colon) -> BenchResult field.
_SUMMARY_LABELS: dict[str, str] = {
    "backend": "backend",
    "traffic request rate": "request_rate",
    "max request concurrency": "max_concurrency",
    "successful requests": "completed",
    "benchmark duration (s)": "duration_s",
    "total input tokens": "total_input_tokens",
    "total generated tokens": "total_output_tokens",
    "total generated tokens (retokenized)": "total_output_tokens_retokenized",
    "request throughput (req/s)": "request_throughput",
    "input token throughput (tok/s)": "input_throughput",
    "output token throughput (tok/s)": "output_throughput",
    "peak output token throughput (tok/s)": "peak_output_throughput",
    "peak concurrent requests": "max_concurrent_requests",
    "total token throughput (tok/s)": "total_throughput",
    "concurrency": "concurrency",
    "accept length": "accept_length",
    "max itl (ms)": "max_itl_ms",
}
for _stat in ("mean", "median", "p90", "p95", "p99"):
    for _label, _field in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2e latency", "e2e_latency")):
        _SUMMARY_LABELS[f"{_stat} {_label} (ms)"] = f"{_stat}_{_field}_ms"

_BANNER = re.compile(r"^=+\s*Serving Benchmark Result\s*=+\s*$")
_ROW = re.compile(r"^(?P<label>[^:]+?)\s*:\s*(?P<value>.*?)\s*$")


_NAMESPACE_PROMPTS = re.compile(r"^benchmark_args=Namespace\(.*\bnum_prompts=(\d+)\b")


def _summary_blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(banner index, end index) of every printed result block; a block ends at its '=====' ruler or the text."""
    blocks: list[tuple[int, int]] = []
    i = 0
    while i < len(lines):
        if _BANNER.match(lines[i].strip()):
            j = i + 1
            while j < len(lines) and not re.fullmatch(r"=+", lines[j].strip()):
                j += 1
            blocks.append((i, j))
            i = j
        i += 1
    return blocks


def _parse_block(rows: list[str], num_prompts: int | None, *, strict: bool = False,
                 where: str = "bench summary block") -> BenchResult:
    data: dict[str, Any] = {"source": "summary"}
    for ln in rows:
        m = _ROW.match(ln.strip())
        if not m:
            continue  # section rulers like '---Time to First Token---'
        name = _SUMMARY_LABELS.get(m.group("label").strip().lower())
        if name is None:
            continue
        val = _coerce(name, m.group("value"), f"{where}: {m.group('label').strip()!r}", strict)
        if val is not None:
            data[name] = val
    for required, label in (("completed", "Successful requests"),
                            ("output_throughput", "Output token throughput (tok/s)")):
        if required not in data:
            raise BenchParseError(f"bench summary block has no '{label}:' row")
    if num_prompts is not None:
        data["num_prompts"] = num_prompts
        data["failed"] = max(0, num_prompts - int(data["completed"]))
    if strict:
        _check_counts(data, where)
    return BenchResult.model_validate(data)


def _printed_num_prompts(lines: list[str], after: int, before: int) -> int | None:
    """num_prompts from the `benchmark_args=Namespace(...)` line bench_serving prints before its run, if copied."""
    for ln in reversed(lines[after:before]):
        m = _NAMESPACE_PROMPTS.match(ln.strip())
        if m:
            return int(m.group(1))
    return None


def parse_bench_summary(text: str, *, num_prompts: int | None = None) -> BenchResult:
    """The printed `Serving Benchmark Result` block, by label; the last block when a log holds several."""
    lines = text.splitlines()
    blocks = _summary_blocks(lines)
    if not blocks:
        raise BenchParseError("no '== Serving Benchmark Result ==' block in the bench output")
    start, end = blocks[-1]
    return _parse_block(lines[start + 1:end], num_prompts)


BenchFileFormat = Literal["jsonl", "summary"]


def detect_bench_format(text: str) -> BenchFileFormat | None:
    """What a saved bench file holds: bench_serving's `--output-file` JSONL (each line one JSON object), its
    printed result block (anywhere in the text, e.g. a terminal copy), or neither (None)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if lines and lines[0].lstrip().startswith("{"):
        return "jsonl"
    if any(_BANNER.match(ln.strip()) for ln in lines):
        return "summary"
    return None


def parse_bench_import(text: str, *, num_prompts: int | None = None) -> list[BenchResult]:
    """Every run in a saved bench file, whichever of the two formats it is (see `detect_bench_format`).

    `num_prompts` and `failed` come from the file where it has them: a JSONL record written with
    `--output-details` (its per-request lists), or a `benchmark_args=Namespace(... num_prompts=N ...)` line
    copied with a printed block; else from `num_prompts` when given; else they stay None ("unknown").
    Strict about values: a file made elsewhere is filed as evidence, so a negative, infinite or text figure (or
    a NaN completed/output_throughput) is refused (BenchValueError, naming the line or row and what the figure
    may be), not dropped or filed. A NaN latency stays missing: bench_serving writes it for a mean of nothing.
    """
    fmt = detect_bench_format(text)
    if fmt == "jsonl":
        records = parse_bench_jsonl_all(text)
        if not records:
            raise BenchParseError("the JSONL holds no JSON object (one bench_serving record per line)")
        return [bench_result_from_record(rec, num_prompts=num_prompts, strict=True, where=f"line {n}")
                for n, rec in records]
    if fmt == "summary":
        lines = text.splitlines()
        results, prev_end = [], 0
        for start, end in _summary_blocks(lines):
            results.append(_parse_block(lines[start + 1:end],
                                        num_prompts or _printed_num_prompts(lines, prev_end, start),
                                        strict=True, where=f"the result block at line {start + 1}"))
            prev_end = end
        return results
    if not text.strip():
        raise BenchParseError("it holds no bench_serving record (the file is empty)")
    first = next(ln for ln in text.splitlines() if ln.strip()).strip()
    raise BenchParseError(f"neither bench_serving JSONL (lines of JSON objects) nor its printed "
                          f"'============ Serving Benchmark Result ============' block; it starts with "
                          f"{first[:60]!r}")


def parse_bench_output(jsonl_text: str | None, stdout: str | None, *,
                       num_prompts: int | None = None) -> BenchResult:
    """JSONL first (it has every key), the printed block when the JSONL is missing or unreadable."""
    errors: list[str] = []
    if jsonl_text and jsonl_text.strip():
        try:
            return parse_bench_jsonl(jsonl_text, num_prompts=num_prompts)
        except BenchParseError as exc:
            errors.append(f"JSONL: {exc}")
    else:
        errors.append("JSONL: empty or missing")
    if stdout:
        try:
            return parse_bench_summary(stdout, num_prompts=num_prompts)
        except BenchParseError as exc:
            errors.append(f"summary: {exc}")
    else:
        errors.append("summary: no stdout")
    raise BenchParseError("no bench result: " + "; ".join(errors))
