"""Draining a host through the real router before its restart, and adding it back once healthy.

Why these signals (sglang-router 0.3.2 and smg 1.13.0, see docs/fleet.md "The router"):
- removal is `DELETE /workers/{id}` (through RouterClient.remove_worker); after it the router sends the worker no
  new request, but requests it already forwarded keep running on the server. smg keeps the worker listed as
  `draining` and counts them (`smg_worker_requests_active{worker}`): the drain waits for that count to reach 0;
  smg drops the worker from its list after about 5 s even while requests run (they still complete), so from
  then on the server's own gauges below decide. The time from the removal to both reading 0 is reported as
  "out of selection to 0 active". smg's `PATCH {"priority": 0}` does not do this: the worker keeps its share
  of requests (seen on 1.13.0), so removal is the one way out of selection;
- once removed, the router no longer lists the worker, so its `load` cannot say when those finish. The server's
  own Prometheus gauges can: `sglang:num_running_reqs` and `sglang:num_queue_reqs` on `/metrics` (sglang exempts
  `/metrics` from the API key; the profile's `enable-metrics` turns it on). The drain waits until both read 0
  twice in a row, so a request the router had picked just before the removal is counted too;
- adding back is `POST /workers` (202, queued); the worker joins only after the router's own health check, so the
  drain waits until `GET /workers` lists it healthy before the roll moves on. Whatever state smg left it in is
  undone first: a worker still draining is waited out, one listed `not_ready` or `failed` is removed and added
  again (a fresh registration instead of waiting for smg's next health checks).

Safety (issue 22 §3, checks.py says why these signals): the last healthy worker is never drained (the drain waits
a bounded time for another one, then refuses with the reason); another listed worker that does not serve stops
the drain (a wave must not take a second worker out while one is sick). "Healthy" and "serves" are asked of each
worker itself (its own /health at its container address, router/serving.py), never read from the router's cached
`is_healthy` alone (issue 37 item 1: it stayed true for minutes after a server stopped); before a worker is added
back a real generation is answered by it with the key, and after it is listed healthy one request through the
router must reach it (its own request counter advances).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from orchestrator.errors import CheckFailed, RemoteError
from orchestrator.remote.http import HttpTransport, Transport, TransportError, send
from orchestrator.router.checks import Reach, add_check_error, reach_through_router
from orchestrator.router.client import RouterClient, RouterWorker
from orchestrator.router.serving import HEALTH_TIMEOUT_S, Removal, ask, judge
from orchestrator.watchdog.probe import IN_FLIGHT_GAUGES, metric_sum


def in_flight(metrics_text: str) -> int | None:
    """Running + queued requests from sglang's /metrics text; None when neither gauge is there. Pure: the
    watchdog's own reading (it runs in the container, standard library only), so both count the same requests."""
    total = metric_sum(metrics_text, IN_FLIGHT_GAUGES)
    return int(total) if total is not None else None


@dataclass
class DrainResult:
    removed: bool  # the router listed the worker and removed it
    waited_s: float
    in_flight_at_removal: int | None
    note: str
    #: Seconds from "out of selection" (the DELETE) to 0 active requests on it, by the router's count and then the
    #: server's (smg); None when the router counts none (sglang-router drops the worker at once).
    router_drain_s: float | None = None

#: How long an add-back waits for the router to list the worker healthy, unless the command says.
JOIN_TIMEOUT_S = 180.0

#: smg's words for a listed worker that does not serve and is registered again on restore.
REREGISTER = ("not_ready", "failed", "pending")


class Drainer:
    """One router, many workers: drain (remove + wait for in-flight) and restore (add + wait until healthy)."""

    def __init__(self, client: RouterClient, *, drain_timeout_s: float = 120.0, join_timeout_s: float = JOIN_TIMEOUT_S,
                 poll_s: float = 0.5, say: Callable[[str], None] | None = None,
                 guard: threading.Lock | None = None, policy: str | None = None,
                 keys: Mapping[str, str | None] | None = None, health_timeout_s: float = HEALTH_TIMEOUT_S,
                 http: Transport | None = None) -> None:
        self.client = client
        #: How the workers' own endpoints are reached (/health, /generate, /metrics); the router's go through the
        #: client. Default: real HTTP, a connection per request.
        self.http: Transport = http or HttpTransport()
        #: Each worker's key by URL, for asking its own /health (default: the router's key, one for the fleet).
        self.keys: Mapping[str, str | None] = keys or {}
        self.health_timeout_s = health_timeout_s
        #: The router's policy: under cache_aware, sglang-router 0.3.2 sends no new prompt to a worker added
        #: through POST /workers while the others have room (seen on the real router: 0 of 12 random prompts), so
        #: "no request reached it" there is the policy, not a broken worker (see `restore`).
        self.policy = policy
        self.drain_timeout_s = drain_timeout_s
        self.join_timeout_s = join_timeout_s
        self.poll_s = poll_s
        self.say = say or (lambda _text: None)
        self.last_reach: Reach | None = None
        #: Shared by the drains of one fleet roll: the check "another worker is healthy" and the removal are one
        #: step, so two hosts drained at once cannot both see the other as the healthy one.
        self.guard = guard or threading.Lock()

    def _server_in_flight(self, url: str) -> int | None:
        try:
            resp = send(self.http, "GET", f"{url}/metrics", timeout_s=5)
        except TransportError:
            return None
        return in_flight(resp.text) if resp.status_code == 200 else None

    def others_ok(self, url: str) -> Removal:
        """What removing `url` leaves, asked of the workers themselves (router/serving.py: their own /health, not
        the router's cached flag). Refuses (CheckFailed, exit 1, with each other worker's answer) when another
        listed worker does not serve, and waits (bounded by the drain timeout) while none serves: draining `url`
        then would empty the pool."""
        began = time.monotonic()
        said = False
        while True:
            workers = self.client.serving_workers()  # one smg is draining out is leaving, not sick
            answers = ask(self.http, [w.url for w in workers], self.keys, self.client.api_key,
                          timeout_s=self.health_timeout_s)
            removal = judge(url, [(w.url, w.healthy) for w in workers], answers)
            if removal.sick:
                what = ("would leave the router no serving worker" if removal.protects_traffic
                        else "the wave stops while another worker does not serve")
                raise CheckFailed(f"{url} is not removed: {what} ({', '.join(a.url for a in removal.sick)} "
                                  f"not serving). Asked of each worker: {removal.evidence()}",
                                  fix="check the worker that does not serve (deploy status group G, deploy router "
                                      "status) and bring it back, then remove or resume (`deploy roll … --resume`); "
                                      "nothing was drained", step="drain", details=removal.details())
            if not removal.protects_traffic:
                return removal
            if time.monotonic() - began >= self.drain_timeout_s:
                raise CheckFailed(f"{url} is the router's last healthy worker: draining it would leave the router "
                                  f"with none; waited {self.drain_timeout_s:.0f} s for another. Asked of each "
                                  f"worker: {removal.evidence()}",
                                  fix="bring another worker back first (`deploy router add HOST`, `deploy up group "
                                      "G`), then resume; nothing was drained", step="drain",
                                  details=removal.details())
            if not said:
                self.say(f"{url} is the last healthy worker: waiting up to {self.drain_timeout_s:.0f} s for another "
                         "before draining it")
                said = True
            time.sleep(self.poll_s)

    def drain(self, url: str) -> DrainResult:
        """Remove the worker (out of selection), wait while the router counts requests on it, then until its
        server has no running or queued request (bounded). Refuses to drain the last healthy worker or while
        another is unhealthy (others_ok)."""
        began = time.monotonic()
        with self.guard:
            self.others_ok(url)
            removed = self.client.remove_worker(url)
        out_at = time.monotonic()
        counted = self._router_drain(url, began) if removed else None
        result = self._server_drain(url, removed, began)
        if counted is not None:
            at_removal, dropped = counted
            dropped = dropped and bool(result.in_flight_at_removal)  # gone from its list, yet the server still ran
            result.router_drain_s = time.monotonic() - out_at
            result.note += (f"; out of selection to 0 active: {result.router_drain_s:.1f} s ({at_removal} active "
                            "at removal, by the router's count"
                            + ("; the router dropped it from its list before they ended, the server's own count "
                               "was waited on" if dropped else "") + ")")
        return result

    def _router_drain(self, url: str, began: float) -> tuple[int, bool] | None:
        """While the router still lists the removed worker (smg: `draining`), wait until it counts no active
        request there. Returns (count at removal, whether the router dropped the worker while it still counted
        some), None when the router does not list it after the removal (sglang-router). Why not trust "dropped":
        smg 1.13.0 drops a draining worker after about 5 s whatever it still runs (seen with 20 s requests, which
        then completed), so the server's own gauges decide from there (`_server_drain`). RemoteError past the
        drain timeout."""
        active = self.client.active_requests(url)
        if active is None:
            return None
        at_removal, said = active, None
        while active:
            if time.monotonic() - began >= self.drain_timeout_s:
                raise RemoteError(f"drain of {url}: the router still has {active} active request(s) on it after "
                                  f"{self.drain_timeout_s:.0f} s (smg_worker_requests_active)",
                                  fix="the worker is out of selection and was not restarted; wait for the long "
                                      "requests or raise --drain-timeout, then resume", step="drain")
            if active != said:  # once per count, not once per poll
                self.say(f"draining: the router has {active} request(s) active on {url}")
                said = active
            time.sleep(self.poll_s)
            active = self.client.active_requests(url)
        return at_removal, active is None

    def _server_drain(self, url: str, removed: bool, began: float) -> DrainResult:
        """Wait until the server itself has no running or queued request (requests the router had forwarded)."""
        first = self._server_in_flight(url)
        if first is None:
            note = (f"removed from the router; its server's /metrics gives no in-flight count (enable-metrics "
                    f"off?): waited a grace of {self.poll_s * 10:.0f} s")
            time.sleep(self.poll_s * 10)
            return DrainResult(removed, time.monotonic() - began, None, note)
        zero_reads = 0
        current: int | None = first
        while time.monotonic() - began < self.drain_timeout_s:
            zero_reads = zero_reads + 1 if current == 0 else 0
            if zero_reads >= 2:
                waited = time.monotonic() - began
                what = "removed from the router" if removed else "not listed by the router"
                return DrainResult(removed, waited, first,
                                   f"{what}; {first} request(s) in flight finished in {waited:.1f} s")
            if current:
                self.say(f"draining: {current} request(s) still in flight on {url}")
            time.sleep(self.poll_s)
            current = self._server_in_flight(url)
        raise RemoteError(f"drain of {url}: {current} request(s) still in flight after {self.drain_timeout_s:.0f} s",
                          fix="the worker is out of the router and was not restarted; wait for the long requests "
                              "or raise --drain-timeout, then resume", step="drain")

    def restore(self, url: str, api_key: str | None = None) -> float:
        """Check the worker answers, add it back, wait until the router lists it healthy, then check that a
        request through the router reaches it; returns the seconds it took. CheckFailed when a check fails."""
        began = time.monotonic()
        error = add_check_error(self.http, url, api_key)
        if error is not None:
            what = "did not answer a generation" if error.startswith("POST /generate") else "failed its check"
            raise CheckFailed(f"{url} {what} before being added back: {error}",
                              fix="the host stays out of the router; check its server (deploy status host X), then "
                                  "`deploy router add HOST`", step="router")
        worker = self._settled(url, began)
        if worker is not None and worker.status in REREGISTER:
            self.say(f"{url} is listed {worker.status}: registering it again")
            self.client.remove_worker(url)
            worker = self._settled(url, began)
        if worker is None:
            self.client.add_worker(url, api_key)
        while time.monotonic() - began < self.join_timeout_s:
            worker = self.client.find(url)
            if worker is not None and worker.healthy:
                break
            time.sleep(self.poll_s)
        else:
            self.client.remove_worker(url)  # not left queued: the router would add it whenever it turns healthy
            raise RemoteError(f"router did not list {url} as a healthy worker within {self.join_timeout_s:.0f} s "
                              "after POST /workers", fix="check the router's journal and the host's /health; the "
                              "host is rolled but out of the router", step="router")
        self.last_reach = self.reach(url)
        if not self.last_reach.reached and self.last_reach.answered and self.policy == "cache_aware":
            # The worker answered its own generation (checked above) and the router lists it healthy; the
            # router's requests all answered, elsewhere. Rolling back a good host for the policy's choice would
            # split the fleet, so the roll goes on and says what was not verified.
            self.last_reach = Reach(False, self.last_reach.tries, answered=True, note=(
                f"not verified that a request through the router reaches it: cache_aware sends new "
                f"prompts to a worker added through the API only once the others are busier "
                f"({self.last_reach.tries} request(s) answered by the other workers)"))
            return time.monotonic() - began
        if not self.last_reach.reached:
            self.client.remove_worker(url)  # a worker the router cannot reach is not left in its list
            raise CheckFailed(f"the router listed {url} healthy, but {self.last_reach.note}; taken out again",
                              fix="check the router's worker URL for the host (router.worker_urls) and its journal",
                              step="router")
        return time.monotonic() - began

    def _settled(self, url: str, began: float) -> RouterWorker | None:
        """The router's entry for `url` once smg is no longer draining it (bounded by the join timeout)."""
        left = max(0.0, self.join_timeout_s - (time.monotonic() - began))
        return self.client.settled(url, left, self.poll_s)

    def reach(self, url: str) -> Reach:
        workers = sum(1 for w in self.client.list_workers() if w.healthy)
        return reach_through_router(self.http, self.client.base_url, self.client.api_key, url, workers=workers)
