"""Posting events to the webhook the inventory names (`notify:`), Alertmanager's webhook format or plain JSON.

Why from the deploy process, at the end of a run: it is where the event is known first (no scrape or rule
interval), and an operator machine that runs deploy can reach the receiver. A failed post never fails the run; it
is retried (bounded) and then said. A delivery never takes longer than DELIVERY_BUDGET_S, whatever the
inventory's retries and timeout (11 tries of 60 s with their waits were ~1,700 s), and never raises: a post is a
side channel, and `deploy watch` must go on acting on its hosts (issue 50). The watch posts off its own thread
(`Notifier`), so even that budget never delays a cordon. The body is redacted like every output: no key, token
or password in it. The URL itself may hold a token (chat webhooks do), so it is read like any secret (`url: {file:
…}` or `{env: …}`) and never printed: the lines name the receiver by its host only. The posts go through a
`Transport` (remote/http.py): real HTTP unless the caller passes another (a handler in unit tests).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from orchestrator.errors import DeployError
from orchestrator.inventory.models import NotifySpec
from orchestrator.monitoring.events import ALERTS, Event
from orchestrator.redact import redact
from orchestrator.remote.http import HttpTransport, Transport, TransportError, send


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


#: The most one delivery (every try, every wait) may take, in seconds.
DELIVERY_BUDGET_S = 60.0


def receiver(url: str) -> str:
    """The receiver as lines name it: scheme and host, never the path or query (a token may live there)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # out of range: the inventory refuses it, a secret file's URL is read later
        port = None
    return f"{parts.scheme}://{parts.hostname or '?'}" + (f":{port}" if port else "")


def post(url: str, payload: dict[str, Any], *, retries: int, timeout_s: float, say: Callable[[str], None],
         backoff_s: float = 1.0, budget_s: float = DELIVERY_BUDGET_S, http: Transport | None = None) -> bool:
    """POST the payload; a 2xx is delivered. Connection errors and 5xx/429 are retried `retries` times with
    doubling waits; another 4xx is not (the receiver refuses it). Every try and wait fits in `budget_s`. Returns
    whether it was delivered."""
    transport = http or HttpTransport()  # requests loads on the first send: few runs post
    deadline = time.monotonic() + budget_s
    wait = backoff_s
    last = ""
    attempt = 0
    for attempt in range(retries + 1):
        left = deadline - time.monotonic()
        if left <= 0.05:
            last += " (out of time)"
            break
        try:
            resp = send(transport, "POST", url, json=payload, timeout_s=min(timeout_s, left))
        except TransportError as exc:  # named by what the transport saw (requests' ReadTimeout, ConnectionError…)
            last = type(exc.__cause__ or exc).__name__
        else:
            if 200 <= resp.status_code < 300:
                return True
            last = f"HTTP {resp.status_code}"
            if resp.status_code < 500 and resp.status_code != 429:
                break
        if attempt < retries:
            time.sleep(max(0.0, min(wait, deadline - time.monotonic())))
            wait *= 2
    say(f"notify: {receiver(url)} did not take {len(payload.get('alerts') or payload.get('events') or [])} "
        f"event(s): {last} (after {attempt + 1} attempt(s)); the alert rules still fire on the published metrics")
    return False


def deliver(spec: NotifySpec | None, events: Sequence[Event], say: Callable[[str], None], *,
            http: Transport | None = None) -> bool | None:
    """Post a run's events where the inventory says (None: nothing to post or nowhere to post it). Never raises:
    whatever goes wrong is said, and the caller goes on."""
    if spec is None or not events:
        return None
    hook = spec.webhook
    try:
        url = hook.read_url()
        delivered = post(url, body(events, hook.format), retries=hook.retries, timeout_s=hook.timeout_s, say=say,
                         http=http)
    except DeployError as err:
        say(f"notify: {len(events)} event(s) not posted: {err.what}")
        return False
    except Exception as exc:  # a side channel: nothing it does may stop the run or the watch
        say(f"notify: {len(events)} event(s) not posted: {type(exc).__name__}")
        return False
    if delivered:
        say(f"notify: {len(events)} event(s) posted to {receiver(url)}")
    return delivered


class Notifier:
    """Deliveries off the caller's thread, in order (one worker): `deploy watch` submits and goes on with its
    hosts, so a receiver that hangs delays only the next posts, never a cordon. `close` waits for what is queued
    at most `wait_s`, and says what it leaves unposted."""

    def __init__(self, say: Callable[[str], None], *, http: Transport | None = None) -> None:
        self.say = say
        self.http = http
        # SimpleQueue: the caller's put takes no Python-level lock that a SIGTERM landing mid-put could leave held.
        self._queue: queue.SimpleQueue[tuple[NotifySpec | None, list[Event]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="notify", daemon=True)
        self._thread.start()

    def submit(self, spec: NotifySpec | None, events: Sequence[Event]) -> None:
        if spec is not None and events:
            self._queue.put((spec, list(events)))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            deliver(item[0], item[1], self.say, http=self.http)

    def close(self, wait_s: float = DELIVERY_BUDGET_S) -> None:
        self._queue.put(None)
        self._thread.join(timeout=wait_s)
        if self._thread.is_alive():
            left = self._queue.qsize()
            self.say(f"notify: stopped waiting for the receiver after {wait_s:.0f} s; {left} more post(s) not sent")
