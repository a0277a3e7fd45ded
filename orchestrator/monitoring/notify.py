"""Posting events to the webhook the inventory names (`notify:`), Alertmanager's webhook format or plain JSON.

Why from the deploy process, at the end of a run: it is where the event is known first (no scrape or rule
interval), and an operator machine that runs deploy can reach the receiver. A failed post never fails the run; it
is retried (bounded) and then said. The body is redacted like every output: no key, token or password in it. The
URL itself may hold a token (chat webhooks do), so it is read like any secret (`url: {file: …}` or `{env: …}`)
and never printed: the lines name the receiver by its host only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from orchestrator.errors import DeployError
from orchestrator.inventory.models import NotifySpec
from orchestrator.monitoring.events import ALERTS, Event
from orchestrator.redact import redact


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def alertmanager_body(events: Sequence[Event]) -> dict[str, Any]:
    """Alertmanager's webhook payload (version 4): one firing alert per event, labels as the shipped rules'."""
    alerts = [{"status": "resolved" if e.resolved else "firing",
               "labels": {"alertname": ALERTS[e.kind], "host": e.host, "severity": e.severity,
                          **({"release": e.release} if e.release else {})},
               "annotations": {"summary": e.summary, "description": e.description, "diagnose": e.diagnose},
               "startsAt": _iso(e.at), "endsAt": _iso(e.at) if e.resolved else "0001-01-01T00:00:00Z",
               "generatorURL": ""} for e in events]
    status = "resolved" if events and all(e.resolved for e in events) else "firing"
    return {"version": "4", "status": status, "receiver": "deploy", "groupKey": "deploy",
            "truncatedAlerts": 0, "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "", "alerts": alerts}


def json_body(events: Sequence[Event]) -> dict[str, Any]:
    return {"source": "deploy", "events": [{"kind": e.kind, "alert": ALERTS[e.kind], "host": e.host,
                                            "release": e.release, "at": _iso(e.at), "severity": e.severity,
                                            "resolved": e.resolved,
                                            "summary": e.summary, "description": e.description,
                                            "diagnose": e.diagnose} for e in events]}


def body(events: Sequence[Event], fmt: str) -> dict[str, Any]:
    """The payload in `fmt` ("alertmanager" or "json"), redacted."""
    return redact(alertmanager_body(events) if fmt == "alertmanager" else json_body(events))


def receiver(url: str) -> str:
    """The receiver as lines name it: scheme and host, never the path or query (a token may live there)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}" + (f":{parts.port}" if parts.port else "")


def post(url: str, payload: dict[str, Any], *, retries: int, timeout_s: float, say: Callable[[str], None],
         backoff_s: float = 1.0) -> bool:
    """POST the payload; a 2xx is delivered. Connection errors and 5xx/429 are retried `retries` times with
    doubling waits; another 4xx is not (the receiver refuses it). Returns whether it was delivered."""
    import requests  # here, not at the top: every run imports this module, few post (~0.06 s of CPU a command)

    wait = backoff_s
    last = ""
    for attempt in range(retries + 1):
        try:
            resp = requests.post(url, json=payload, timeout=timeout_s)
        except requests.RequestException as exc:
            last = type(exc).__name__
        else:
            if 200 <= resp.status_code < 300:
                return True
            last = f"HTTP {resp.status_code}"
            if resp.status_code < 500 and resp.status_code != 429:
                break
        if attempt < retries:
            time.sleep(wait)
            wait *= 2
    say(f"notify: {receiver(url)} did not take {len(payload.get('alerts') or payload.get('events') or [])} "
        f"event(s): {last} (after {attempt + 1} attempt(s)); the alert rules still fire on the published metrics")
    return False


def deliver(spec: NotifySpec | None, events: Sequence[Event], say: Callable[[str], None]) -> bool | None:
    """Post a run's events where the inventory says (None: nothing to post or nowhere to post it)."""
    if spec is None or not events:
        return None
    hook = spec.webhook
    try:
        url = hook.read_url()
    except DeployError as err:
        say(f"notify: {len(events)} event(s) not posted: {err.what}")
        return False
    delivered = post(url, body(events, hook.format), retries=hook.retries, timeout_s=hook.timeout_s, say=say)
    if delivered:
        say(f"notify: {len(events)} event(s) posted to {receiver(url)}")
    return delivered
