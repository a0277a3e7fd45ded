"""smg's own Prometheus series, read where deploy needs them (drain, status, bench group). Pure.

Names and labels as smg 1.13.0 exports them on its metrics port (default 29000; captured in
tests/fixtures/router/smg-1.13.0/): per worker, labelled `worker="<its URL>"`, `smg_worker_requests_active`
(requests the router has sent and not finished, streams until their last chunk: the drain's "0 active"),
`smg_worker_health` (1/0), `smg_worker_cb_state` (0 closed, 1 open, 2 half-open); and
`smg_router_request_errors_total{error_type}`. A worker's series go away once smg has removed it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ACTIVE = "smg_worker_requests_active"
HEALTH = "smg_worker_health"
CB_STATE = "smg_worker_cb_state"
ERRORS = "smg_router_request_errors_total"
CB_STATES = {0: "closed", 1: "open", 2: "half_open"}
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def samples(text: str, names: tuple[str, ...] | None = None) -> list[Sample]:
    """Every sample line (comments skipped), optionally only those of `names`; a value that is no number is
    skipped rather than guessed."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None or (names is not None and m.group(1) not in names):
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.append(Sample(m.group(1), dict(_LABEL.findall(m.group(2) or "")), value))
    return out


def per_worker(text: str, name: str) -> dict[str, float]:
    """One per-worker series by worker URL (trailing slash dropped, as the adapter compares URLs)."""
    return {s.labels["worker"].rstrip("/"): s.value for s in samples(text, (name,)) if "worker" in s.labels}


def active_requests(text: str, url: str) -> int | None:
    """The router's active requests on `url`; None when smg exports no series for it (removed, or never sent)."""
    value = per_worker(text, ACTIVE).get(url.rstrip("/"))
    return int(value) if value is not None else None


def errors_by_type(text: str) -> dict[str, float]:
    """smg_router_request_errors_total summed by error_type."""
    out: dict[str, float] = {}
    for s in samples(text, (ERRORS,)):
        kind = s.labels.get("error_type", "")
        out[kind] = out.get(kind, 0.0) + s.value
    return out
