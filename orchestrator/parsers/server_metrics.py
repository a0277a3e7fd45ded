"""Counters from a server's Prometheus `/metrics` text (sglang with --enable-metrics), pure.

Used to attribute a fleet bench's output tokens to each host: the difference of `sglang:generation_tokens_total`
before and after the run is what that host's server produced, whichever way the router spread the requests.
"""

from __future__ import annotations

import re

GENERATION_TOKENS = "sglang:generation_tokens_total"
REQUESTS = "sglang:num_requests_total"

_LINE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


def counter(text: str, name: str) -> float | None:
    """The sum of a counter over all its label sets; None when the text has no sample of it."""
    total: float | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = _LINE.match(line.strip())
        if m is None or m.group("name") != name:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        total = value if total is None else total + value
    return total


def delta(before: str, after: str, name: str) -> float | None:
    """after - before of a counter; None when either side lacks it or it went down (the server restarted)."""
    a, b = counter(before, name), counter(after, name)
    if a is None or b is None or b < a:
        return None
    return b - a
