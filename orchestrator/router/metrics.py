"""smg's own Prometheus series, read where deploy needs them (drain, status, bench group). Pure.

Names and labels as smg 1.13.0 exports them on its metrics port (default 29000; captured in
tests/fixtures/router/smg-1.13.0/): per worker, labelled `worker="<its URL>"`, `smg_worker_requests_active`
(requests the router has sent and not finished, streams until their last chunk: the drain's "0 active"),
`smg_worker_health` (1/0), `smg_worker_cb_state` (0 closed, 1 open, 2 half-open); and
`smg_router_request_errors_total{error_type}`, `smg_worker_requests_total{worker,model}` (requests sent to a
worker, counted at each send). A worker smg has removed keeps its series at a sentinel, -1, instead of losing
them (issue 50, as reported from smg): every per-worker reader here treats a negative value as no series.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ACTIVE = "smg_worker_requests_active"
HEALTH = "smg_worker_health"
CB_STATE = "smg_worker_cb_state"
ERRORS = "smg_router_request_errors_total"
SENT = "smg_worker_requests_total"
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


def _worker_samples(text: str, name: str) -> list[Sample]:
    """A per-worker series' samples, without the sentinels (< 0) smg leaves for a worker it removed."""
    return [s for s in samples(text, (name,)) if "worker" in s.labels and s.value >= 0]


def per_worker(text: str, name: str) -> dict[str, float]:
    """One per-worker series by worker URL (trailing slash dropped, as the adapter compares URLs)."""
    return {s.labels["worker"].rstrip("/"): s.value for s in _worker_samples(text, name)}


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


def per_worker_sum(text: str, name: str) -> dict[str, float]:
    """A per-worker counter summed over its other labels (smg_worker_requests_total has one series per model)."""
    out: dict[str, float] = {}
    for s in _worker_samples(text, name):
        url = s.labels["worker"].rstrip("/")
        out[url] = out.get(url, 0.0) + s.value
    return out


def _grew(before: float | None, after: float) -> int:
    """A counter's growth; a counter lower than before was reset (smg restarted): all of it is new."""
    if before is None or after < before:
        return int(after)
    return int(after - before)


@dataclass(frozen=True)
class RouterWindow:
    """What smg counted between two reads of its metrics (a fleet bench point): requests it sent to each worker
    (`smg_worker_requests_total` growth; a worker it never sent to before has no series, so none counts 0), its
    request errors by `error_type` (`smg_router_request_errors_total` growth, types that did not grow left out),
    and each worker's circuit breaker at the end (`smg_worker_cb_state`)."""

    sent: dict[str, int]
    errors: dict[str, int]
    circuit: dict[str, str]

    @property
    def error_total(self) -> int:
        return sum(self.errors.values())


def window(before: str, after: str) -> RouterWindow:
    """The RouterWindow between two metrics texts of the same smg."""
    sent_before, sent_after = per_worker_sum(before, SENT), per_worker_sum(after, SENT)
    err_before, err_after = errors_by_type(before), errors_by_type(after)
    errors = {k: _grew(err_before.get(k), v) for k, v in err_after.items()}
    circuit = {url: CB_STATES.get(int(v), f"unknown ({v:g})") for url, v in per_worker(after, CB_STATE).items()}
    return RouterWindow(sent={url: _grew(sent_before.get(url), v) for url, v in sorted(sent_after.items())},
                        errors={k: v for k, v in sorted(errors.items()) if v > 0}, circuit=circuit)


def router_error_failure(errors: int, sent: int, max_failed_fraction: float) -> str:
    """Why a bench fails on the router's own errors, or "" when they are within the preset's threshold (the same
    rule as failed requests: above `max_failed_fraction` of the prompts sent; 0 allows none)."""
    if errors <= 0 or (sent > 0 and errors / sent <= max_failed_fraction):
        return ""
    return (f"the router counted {errors} request error(s) (smg_router_request_errors_total) for {sent} prompt(s), "
            f"above the preset's max_failed_fraction {max_failed_fraction:g} ({100.0 * max_failed_fraction:g} %)")
