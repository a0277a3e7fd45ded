"""When a bench run is a failed bench (docs/bench.md, "Failed requests"): more of its requests failed than its
preset allows (`max_failed_fraction`), or none completed. Pure.

Why: throughput and latency are computed on the requests that completed, so a run that lost most of its requests
can still show fine figures ("493 of 600 requests failed" once exited 0, and a tune could score such a point on
its survivors). One rule for `deploy bench` (exit 1), a fleet bench, and every tune run (a failed run never meets
the SLO).
"""

from __future__ import annotations

from orchestrator.parsers.bench import BenchResult


def failed_bench(result: BenchResult, max_failed_fraction: float) -> str:
    """Why this run is a failed bench, "" when it is not: no request completed, or the failed share of the
    prompts sent is above `max_failed_fraction` (0: any failed request fails the bench)."""
    if result.completed == 0:
        return "no request completed: the server did not answer the benchmark"
    failed = result.failed or 0
    total = result.num_prompts or (result.completed + failed)
    if failed == 0 or total <= 0 or failed / total <= max_failed_fraction:
        return ""
    return (f"{failed} of {total} requests failed ({100.0 * failed / total:.1f} %), more than the preset's "
            f"max_failed_fraction {max_failed_fraction:g} ({100.0 * max_failed_fraction:g} %)")
