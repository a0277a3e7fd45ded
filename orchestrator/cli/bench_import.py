"""How `deploy bench import` shows what it recorded.

Neither bench_serving's JSONL nor its printed block carries the number of prompts sent (only `completed`), so
`num_prompts` and `failed` are often not known. They are shown as "unknown", never as null or 0: a 0 would claim
that nothing failed.
"""

from __future__ import annotations

from typing import Any

from orchestrator.ledger.sqlite import RunRecord

UNKNOWN = "unknown"
_COUNTS = ("num_prompts", "failed")


def imported_run_json(run: RunRecord) -> dict[str, Any]:
    """The ledger record for --json, with counts the file did not have written as "unknown"."""
    data = run.model_dump(mode="json")
    bench = data.get("bench")
    if isinstance(bench, dict):
        for key in _COUNTS:
            if bench.get(key) is None:
                bench[key] = UNKNOWN
    return data


def imported_run_line(run: RunRecord) -> str:
    """One line: format, completed of prompts, failed, output throughput."""
    b = run.bench
    if b is None:
        return "no bench result"
    prompts = UNKNOWN if b.num_prompts is None else str(b.num_prompts)
    failed = UNKNOWN if b.failed is None else str(b.failed)
    source = "JSONL record" if b.source == "jsonl" else "printed result block"
    return (f"{source}, {b.completed} completed of {prompts} prompts, failed {failed}, "
            f"output {b.output_throughput:.2f} tok/s")
