"""Checks that a worker really serves before and after the router sends it traffic (issue 22 §3, issue 25 item 1).

Why these signals, all of which a real sglang server offers:
- "answers": a real generation (`POST /generate`, a few tokens at temperature 0) sent to the worker itself with
  the profile's API key. `/health` can say 200 while generation is stuck (sglang#22779, #6624).
- "reached through the router": sglang's own counter `sglang:num_requests_total` on the worker's `/metrics`
  (exempt from the API key; the profile's `enable-metrics` turns it on). Requests are sent through the router
  until that counter advances: with round_robin that takes at most one request per healthy worker; other
  policies may take a few more, so the tries are bounded by a multiple of the worker count.

Every request goes through the caller's `Transport` (remote/http.py): the real one, or a handler in unit tests.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.remote.http import TimedOut, TlsFailed, Transport, TransportError, Unreachable, bearer, send

REQUESTS_COUNTER = "sglang:num_requests_total"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+([-+0-9.eEinfaINF]+)")
_SEQ = itertools.count()


def _generate_body() -> dict[str, Any]:
    # A distinct prompt per call, so a cache-aware policy does not pin every try to one worker.
    n = next(_SEQ)
    return {"text": f"deploy router check {n}: what is {n} + 1? Answer with the number only.",
            "sampling_params": {"temperature": 0.0, "max_new_tokens": 4}}


def requests_counter(metrics_text: str) -> float | None:
    """`sglang:num_requests_total` summed over its label sets; None when the server does not export it. Pure."""
    total, seen = 0.0, False
    for line in metrics_text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == REQUESTS_COUNTER:
            total += float(m.group(2))
            seen = True
    return total if seen else None


def generate_error(http: Transport, base: str, key: str | None, *, timeout_s: float = 60.0) -> str | None:
    """None when `POST BASE/generate` answers 200 with generated text; else what came back, in words."""
    try:
        resp = send(http, "POST", f"{base.rstrip('/')}/generate", json=_generate_body(), headers=bearer(key),
                    timeout_s=timeout_s)
    except TransportError as exc:
        return f"POST /generate failed: {exc.what}"
    if resp.status_code != 200:
        return f"POST /generate answered {resp.status_code}: {' '.join(resp.text[:200].split())}"
    try:
        data = resp.json()
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("text"), str) or not data["text"].strip():
        return f"POST /generate answered 200 without generated text: {' '.join(resp.text[:200].split())}"
    return None


def health_error(http: Transport, base: str, key: str | None, *, timeout_s: float) -> str | None:
    """None when the worker's own `GET BASE/health` answers 200; else what came back, in words. Current sglang
    answers it with a 1-token generation and gives up after SGLANG_HEALTH_CHECK_TIMEOUT (20 s), so the caller's
    timeout is above that: a slow answer under load is not read as down."""
    try:
        resp = send(http, "GET", f"{base.rstrip('/')}/health", headers=bearer(key), timeout_s=timeout_s)
    except TimedOut:
        return f"GET /health failed: no answer within {timeout_s:.0f} s"
    except (Unreachable, TlsFailed):  # a TLS failure is a connection error to requests: said as before
        return "GET /health failed: ConnectionError (refused or unreachable: is its server running?)"
    except TransportError as exc:
        return f"GET /health failed: {' '.join(exc.what[:200].split())}"
    if resp.status_code != 200:
        return f"GET /health answered {resp.status_code}: {' '.join(resp.text[:200].split()) or '(empty body)'}"
    return None


def served_count(http: Transport, url: str) -> float | None:
    """The worker's request counter, or None when /metrics is off or unreachable."""
    try:
        resp = send(http, "GET", f"{url.rstrip('/')}/metrics", timeout_s=5)
    except TransportError:
        return None
    return requests_counter(resp.text) if resp.status_code == 200 else None


def no_counter_note(url: str) -> str:
    """Why a worker without the request counter cannot be put in the router (the add-back's and the live
    reconcile's one rule)."""
    return (f"{url}/metrics gives no {REQUESTS_COUNTER} (enable-metrics off?): cannot tell whether the router "
            "reaches this worker")


def add_check_error(http: Transport, url: str, key: str | None) -> str | None:
    """None when a worker may be put in the router: it answers a generation with its key and exports the request
    counter the add-back checks the router's reach with (`deploy up`'s live reconcile and a drain's add-back judge
    a worker alike: before, `up group` re-added a worker without /metrics that the add-back had refused)."""
    error = generate_error(http, url, key)
    if error is None and served_count(http, url) is None:
        return no_counter_note(url)
    return error


@dataclass(frozen=True)
class Reach:
    """Whether requests sent through the router reached one worker, and how many it took."""

    reached: bool
    tries: int
    note: str
    answered: bool = False  # every request through the router was answered (by some worker)


def reach_through_router(http: Transport, router: str, router_key: str | None, url: str, *, workers: int) -> Reach:
    """Send requests through the router until the worker's request counter advances (at most 2 per worker + 2)."""
    before = served_count(http, url)
    if before is None:
        return Reach(False, 0, no_counter_note(url))
    tries = 2 * max(1, workers) + 2
    for n in range(1, tries + 1):
        error = generate_error(http, router, router_key)
        if error is not None:
            return Reach(False, n, f"a request through the router failed: {error}")
        after = served_count(http, url)
        if after is not None and after > before:
            return Reach(True, n, f"a request through the router reached it ({n} tried)")
    return Reach(False, tries, f"{tries} requests through the router answered, none reached {url} "
                               f"({REQUESTS_COUNTER} stayed at {before:g})", answered=True)
