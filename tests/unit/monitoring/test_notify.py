"""Run events posted to the inventory's webhook (monitoring/events.py, notify.py), against a receiver passed as the
HTTP transport (remote/http.py, no socket): what is posted, in which format, retried how, and that no secret is in
it or in the lines. Posts that time out on a real socket are test_watch.py's (`Hanging`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from orchestrator.inventory.models import NotifySpec
from orchestrator.monitoring.events import events_of
from orchestrator.monitoring.notify import deliver
from orchestrator.monitoring.state import MetricsState, Observation, Rollback, Watchdog
from orchestrator.redact import forget_secrets, register_secret
from orchestrator.remote.http import HandlerTransport, Request, Response, Transport
from tests.unit.fleet.test_router_safety import Net

from .conftest import B, C, history


class Receiver:
    """A webhook receiver on `net` (its own unless given): each body and path it got; answers `answers` in turn."""

    def __init__(self, answers: list[int], net: Net | None = None) -> None:
        self.answers = answers  # status per request, the last one repeats
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.net = net or Net()
        self.base = self.net.place(self)

    def __call__(self, req: Request) -> Response:
        assert req.method == "POST"
        self.bodies.append(req.body())
        self.paths.append(urlsplit(req.url).path)
        return Response(self.answers[min(len(self.bodies), len(self.answers)) - 1])

    @property
    def url(self) -> str:
        return f"{self.base}/hook/SECRET-path-token-123"

    @property
    def http(self) -> Transport:
        return HandlerTransport(self.net)


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Receiver:
    return Receiver(getattr(request, "param", [200]))


def _rolled_back(key: str = "") -> Observation:
    return Observation(at=300, command="roll", release=B, rollbacks=(
        Rollback(at=300, reason="throughput", candidate=C, to=B),), watchdog=Watchdog("ok", 0, 3, 299.0))


def test_a_rollback_is_one_event_and_an_exhausted_watchdog_is_one_event_once() -> None:
    prev = history()
    (rb,) = events_of("gpu-1", prev, _rolled_back())
    assert rb.kind == "rollback" and C in rb.summary and B in rb.summary and "throughput" in rb.summary
    assert rb.diagnose == "deploy history host gpu-1"
    gave_up = Observation(at=400, command="up", release=B, watchdog=Watchdog("exhausted", 3, 3, 399.0))
    (wd,) = events_of("gpu-1", prev, gave_up)
    assert wd.kind == "watchdog_exhausted" and wd.severity == "critical"
    again = MetricsState(**{**prev.__dict__, "watchdog": Watchdog("exhausted", 3, 3, 399.0)})
    assert events_of("gpu-1", again, gave_up) == []  # still exhausted: said once, not on every run
    assert events_of("gpu-1", prev, Observation(at=500, command="up", release=B)) == []


def test_alertmanager_payload_reaches_the_receiver_with_no_secret(receiver: Receiver, tmp_path: Path) -> None:
    secret = tmp_path / "hook"
    secret.write_text(receiver.url + "\n")
    secret.chmod(0o600)
    spec = NotifySpec.model_validate({"webhook": {"url": {"file": str(secret)}}})
    register_secret("sk-live-apikey-0123456789")
    try:
        events = events_of("gpu-1", history(), _rolled_back())
        ev = events[0]
        object.__setattr__(ev, "description", ev.description + " key sk-live-apikey-0123456789 --api-key sk-x12345")
        said: list[str] = []
        assert deliver(spec, events, said.append, http=receiver.http) is True
    finally:
        forget_secrets()
    (body,) = receiver.bodies
    assert body["version"] == "4" and body["status"] == "firing"
    (alert,) = body["alerts"]
    assert alert["labels"] == {"alertname": "DeployReleaseRolledBack", "host": "gpu-1", "severity": "warning",
                               "release": B}
    assert alert["annotations"]["diagnose"] == "deploy history host gpu-1"
    assert alert["startsAt"].endswith("Z")
    text = json.dumps(body)
    assert "sk-live-apikey-0123456789" not in text and "sk-x12345" not in text and "<redacted>" in text
    assert receiver.paths == ["/hook/SECRET-path-token-123"]
    assert said and all("SECRET-path-token" not in s for s in said)  # the URL's path is never printed


@pytest.mark.parametrize("receiver", [[503, 503, 200]], indirect=True)
def test_a_receiver_that_fails_twice_is_retried(receiver: Receiver) -> None:
    spec = NotifySpec.model_validate({"webhook": {"url": receiver.url, "format": "json", "retries": 3}})
    assert deliver(spec, events_of("gpu-1", history(), _rolled_back()), lambda _s: None, http=receiver.http) is True
    assert len(receiver.bodies) == 3 and receiver.bodies[-1]["events"][0]["alert"] == "DeployReleaseRolledBack"


@pytest.mark.parametrize("receiver", [[400]], indirect=True)
def test_a_refusing_receiver_is_said_not_retried_and_the_run_goes_on(receiver: Receiver) -> None:
    spec = NotifySpec.model_validate({"webhook": {"url": receiver.url, "retries": 3}})
    said: list[str] = []
    assert deliver(spec, events_of("gpu-1", history(), _rolled_back()), said.append, http=receiver.http) is False
    assert len(receiver.bodies) == 1
    assert "did not take 1 event(s): HTTP 400" in said[0] and "SECRET-path-token" not in said[0]


def test_nothing_to_post_posts_nothing_and_a_bad_url_is_refused_by_the_inventory() -> None:
    assert deliver(None, events_of("gpu-1", history(), _rolled_back()), lambda _s: None) is None
    with pytest.raises(ValueError, match="not an http"):
        NotifySpec.model_validate({"webhook": {"url": "ftp://x"}})
