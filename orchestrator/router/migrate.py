"""A running sglang-router 0.3.2 replaced by smg with no request lost (issue 37), as `deploy up` runs it when the
inventory's `router.package` turns to smg while the router's container runs 0.3.2.

Why these phases (docs/fleet.md "Migrating a running router to smg"): a restart of the router's unit under the new
package drops every request in flight. Instead
  a. stage: smg starts as a unit of its own on the staging port (router/staging.py) with every worker; gate:
     each worker listed ready and a generation through it answered. A failure removes it; 0.3.2 never noticed;
  b. redirect: an nftables nat table sends NEW connections for the public port to the staging smg (SYN only: the
     connections 0.3.2 holds stay on it); a new connection to the public port must reach the staging smg;
  c. switch: 0.3.2 stopped gracefully (SIGTERM: it stops accepting and finishes every request in flight, streams
     included; deploy waits until it exited, bounded by the drain timeout); write and start the final smg unit on
     the public port; gate it from inside the container (the redirect does not catch a connection to the
     container's own LAN address sent from there);
  d. finish: the public port out of the redirect's set (new connections reach the final smg), the staging smg
     stopped gracefully the same way, then the table deleted and the staging unit removed.
An interrupted migration is found by the next `up` (the router facts' `migration`, router/staging.py): `resume`
undoes it while 0.3.2 still serves (then it starts again), or completes it once 0.3.2 is stopped; a redirect
whose staging router does not run is deleted first, so it never points at a dead port.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from orchestrator.errors import CheckFailed, DeployError, RemoteError
from orchestrator.remote.container import Container, heredoc
from orchestrator.router.client import RouterClient
from orchestrator.router.facts import GRACEFUL_STOP, UNIT, RouterFacts, apply_script
from orchestrator.router.metrics import ACTIVE, samples
from orchestrator.router.release import SMG_METRICS_PORT
from orchestrator.router.render import KEY_PATH, RouterBundle
from orchestrator.router.staging import (
    NFT_TABLE,
    STAGING_UNIT,
    MigrationState,
    clear_drain_mark_script,
    free_port_check,
    graceful_stop_script,
    redirect_script,
    remove_staging_script,
    stop_redirecting_script,
    unredirect_script,
)

#: How long a graceful stop (0.3.2 at the switch, the staging smg at the finish) may take to finish the requests in
#: flight: above the longest stream clients send (max_tokens ÷ one request's decode rate), as a roll's
#: --drain-timeout (120 s).
DRAIN_TIMEOUT_S = 120.0
#: 0.3.2's own gauge of the requests it handles (it has no per-worker active count; a stream counts until its
#: response head only), read for the record: the switch waits on its graceful shutdown instead.
HTTP_ACTIVE = "smg_http_connections_active"

#: Runs in the router's container with the smg venv's python: the final smg's gate, sent to the container's own
#: LAN address (not 127.0.0.1: the redirect's output chain would send it to the staging smg). The key is read
#: from its 0600 file, never from argv.
FINAL_GATE_PY = """
import json, os, sys, time, urllib.request
base, urls, timeout = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
key = open(KEY).read().strip() if os.path.exists(KEY) else None
headers = {"Content-Type": "application/json", **({"Authorization": "Bearer " + key} if key else {})}
def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method, headers=headers,
                                 data=json.dumps(body).encode() if body is not None else None)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.status, resp.read().decode()
deadline, last = time.monotonic() + timeout, "no answer"
while time.monotonic() < deadline:
    try:
        listed = {w["url"].rstrip("/"): w for w in json.loads(call("GET", "/workers")[1])["workers"]}
        missing = [u for u in urls if u not in listed or listed[u].get("status", "ready") != "ready"
                   or not listed[u].get("is_healthy")]
        if missing:
            last = "workers not ready: " + ", ".join(missing)
        else:
            status, body = call("POST", "/generate", {"text": "deploy migration check: 1 + 1 =",
                                                      "sampling_params": {"temperature": 0.0, "max_new_tokens": 4}})
            if status == 200 and json.loads(body).get("text"):
                print(json.dumps({"ok": True, "workers": len(urls)}))
                sys.exit(0)
            last = "POST /generate answered %d" % status
    except Exception as exc:
        last = "%s: %s" % (exc.__class__.__name__, exc)
    time.sleep(1)
print(json.dumps({"ok": False, "last": last}))
sys.exit(1)
"""


def old_metrics_port(execstart: str) -> int:
    """Pure: where the running router exports its metrics (its unit's `--prometheus-port`, else the default)."""
    words = execstart.split()
    if "--prometheus-port" in words[:-1]:
        try:
            return int(words[words.index("--prometheus-port") + 1])
        except ValueError:
            pass
    return SMG_METRICS_PORT


@dataclass(frozen=True)
class GracefulStop:
    """What graceful_stop saw: client connections at the SIGTERM (-1: unknown), seconds until the unit was
    stopped, and whether it ran at all."""

    connections: int
    waited_s: float
    was_active: bool


@dataclass
class Migration:
    """One migration's context and record (`--json`: the router step's details["migration"])."""

    ct: Container
    base_url: str  # the router's public URL
    staging_port: int
    staging_metrics_port: int
    old_metrics_port: int
    api_key: str | None
    urls: list[str]
    python: str  # the smg venv's python
    gate: Callable[[str], dict[str, Any]]  # the operator-side gate of converge.py (health, workers, a generation)
    say: Callable[[str], None]
    drain_timeout_s: float = DRAIN_TIMEOUT_S
    router: str = "smg"  # the package staged and started as the final unit (a 0.3.2 flag change stages 0.3.2)
    phases: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return urlsplit(self.base_url).hostname or ""

    @property
    def public_port(self) -> int:
        return urlsplit(self.base_url).port or 80

    @property
    def staging_url(self) -> str:
        return f"http://{self.address}:{self.staging_port}"

    def record(self) -> dict[str, Any]:
        return {**self.details, "phases_s": {k: round(v, 1) for k, v in self.phases.items()}}

    # ------------------------------------------------------------------------------------------- phases
    def stage(self, bundle: RouterBundle) -> None:
        """(a) The staging smg beside 0.3.2, gated; on any failure it is removed and 0.3.2 is untouched."""
        began = time.monotonic()
        self.say(f"migration: stage {self.router} on :{self.staging_port} (unit {STAGING_UNIT}, metrics "
                 f":{self.staging_metrics_port}) with {len(self.urls)} worker(s)")
        try:
            self._run(apply_script(bundle, action=None, unit=STAGING_UNIT, enable=False), "staging files")
            self._run(free_port_check(self.staging_port, self.staging_metrics_port)
                      + f"\n{clear_drain_mark_script(STAGING_UNIT)}\nsystemctl restart {shlex.quote(STAGING_UNIT)}",
                      "staging start")
            health = self.gate(self.staging_url)
            not_ready = self._not_ready(self.staging_url)
            if not_ready:
                raise CheckFailed(f"staging {self.router} lists worker(s) not ready: {', '.join(not_ready)}")
        except DeployError as err:
            self.remove_staging()
            raise CheckFailed(f"the staging {self.router} on :{self.staging_port} failed its gate: {err.what}; it "
                              f"was stopped and removed, the running sglang-router still serves on :{self.public_port} "
                              "(nothing else changed)",
                              fix=f"see `journalctl -u {STAGING_UNIT}` in CT {self.ct.vmid} (kept after the unit is "
                                  "removed) and the evidence above; fix it, then re-run `deploy up`") from None
        self.details["staging_gate"] = health
        self.phases["stage"] = time.monotonic() - began
        self.say(f"migration: staging {self.router} ready, {len(self.urls)} worker(s) ready, a generation through it "
                 f"answered ({self.phases['stage']:.1f} s)")

    def redirect(self) -> None:
        """(b) New connections for the public port go to the staging smg; checked with a new connection."""
        began = time.monotonic()
        try:
            self._run(redirect_script(self.public_port, self.staging_port), "nftables redirect", timeout=600)
            self._check_redirected()
        except DeployError as err:
            self._run(unredirect_script(), "nftables redirect removal")
            self.remove_staging()
            raise CheckFailed(f"could not send new connections on :{self.public_port} to the staging {self.router}: "
                              f"{err.what}; the redirect and the staging {self.router} were removed, the running "
                              f"sglang-router still serves on :{self.public_port}",
                              fix=f"check that `apt-get install nftables` works in CT {self.ct.vmid} and that its "
                                  "kernel has nftables nat (on PVE: nf_tables, nft_chain_nat loaded on the node)"
                              ) from None
        self.details["in_flight_at_redirect"] = self.in_flight(self.old_metrics_port, name=HTTP_ACTIVE)
        self.phases["redirect"] = time.monotonic() - began
        self.say(f"migration: new connections on :{self.public_port} go to the staging {self.router} (nft table ip "
                 f"{NFT_TABLE}, SYN only); {self.details['in_flight_at_redirect']} request(s) in flight on "
                 f"sglang-router ({self.phases['redirect']:.1f} s)")

    def switch(self, final: BundleApply, *, old_running: bool) -> None:
        """(c) 0.3.2 drained and stopped, the final smg on the public port, gated from inside the container."""
        if old_running:
            self.details["in_flight_at_switch"] = self.in_flight(self.old_metrics_port, name=HTTP_ACTIVE)
            self.say(f"migration: stopping sglang-router gracefully ({self.details['in_flight_at_switch']} "
                     "request(s) in flight by its count, streams not counted; it finishes them all, at most "
                     f"{self.drain_timeout_s:.0f} s)")
            stop = self.graceful_stop(UNIT, self.public_port)
            self.details["connections_at_switch"], self.phases["old_drain"] = stop.connections, stop.waited_s
            self.say(f"migration: sglang-router finished its requests and stopped in {self.phases['old_drain']:.1f} s "
                     f"({self.details['connections_at_switch']} client connection(s) open at the switch)")
        self._run(f"systemctl stop {shlex.quote(UNIT)} || true\n{clear_drain_mark_script(UNIT)}",
                  "stop sglang-router")
        started = time.monotonic()
        final.apply("restart")
        try:
            self.final_gate()
        except DeployError as err:
            raise CheckFailed(f"the final {self.router} on :{self.public_port} failed its gate: {err.what}; the "
                              f"staging {self.router} keeps serving the public port through the redirect",
                              fix=f"see `journalctl -u {UNIT}` in CT {self.ct.vmid}, fix it, then re-run `deploy "
                                  "up`: it completes the migration") from None
        self.phases["switch"] = time.monotonic() - started
        self.say(f"migration: {self.router} runs as {UNIT} on :{self.public_port}, workers ready and a generation "
                 f"answered from inside the container ({self.phases['switch']:.1f} s)")

    def finish(self, phase: str = "finish") -> None:
        """(d) New connections back to the public port (the port out of the redirect's set; the table stays, so
        that the redirected connections keep going), the staging smg stopped gracefully (it finishes its requests in
        flight, streams included, and closes idle keep-alive connections: polling its count for 0 would wait out
        the timeout while keep-alive clients keep sending on their connections), then the table deleted and the
        staging unit removed. Also the undo of a migration stopped before its switch (then 0.3.2 gets them)."""
        began = time.monotonic()
        self._run(stop_redirecting_script(self.public_port), "nftables redirect stop")
        self.say(f"migration: new connections on :{self.public_port} reach {UNIT} again; stopping the staging "
                 f"{self.router} gracefully (it finishes its requests, at most {self.drain_timeout_s:.0f} s)")
        in_flight = self.in_flight(self.staging_metrics_port)
        self.details["staging_in_flight_at_stop"] = in_flight
        stop = self.graceful_stop(STAGING_UNIT, self.staging_port)
        self._run(unredirect_script(), "nftables redirect removal")
        self.remove_staging()
        self.phases[phase] = time.monotonic() - began
        if not stop.was_active:
            drained = f"the staging {self.router} was not running"
        elif in_flight is None:
            drained = (f"the staging {self.router} finished its requests in flight (its metrics did not answer, so "
                       f"their number is not known) and stopped in {stop.waited_s:.1f} s")
        else:
            drained = (f"the staging {self.router} finished its {in_flight} request(s) in flight and stopped in "
                       f"{stop.waited_s:.1f} s")
        self.say(f"migration: redirect removed; {drained}, removed ({self.phases[phase]:.1f} s)")

    def graceful_stop(self, unit: str, port: int) -> GracefulStop:
        """SIGTERM, then wait until the unit exited (router/staging.py graceful_stop_script)."""
        began = time.monotonic()
        said = self.ct.read_script(graceful_stop_script(unit, port, self.drain_timeout_s), GRACEFUL_STOP,
                                   timeout=int(self.drain_timeout_s) + 120, what=f"graceful stop of {unit}")
        return GracefulStop(connections=said.connections, waited_s=time.monotonic() - began,
                            was_active=said.was_active)

    # ------------------------------------------------------------------------------------------- reads
    def in_flight(self, metrics_port: int, *, name: str = ACTIVE) -> int | None:
        """A router's requests in flight: the sum of its smg_worker_requests_active (smg: streams until their last
        chunk), or 0.3.2's smg_http_connections_active (`name`: requests until their response head, streams not
        counted); None when its metrics do not answer."""
        with RouterClient(self.base_url, metrics_url=f"http://{self.address}:{metrics_port}/metrics",
                          timeout_s=5.0) as client:
            text = client.router_metrics()
        if text is None:
            return None
        return int(sum(s.value for s in samples(text, (name,)) if s.value >= 0))  # -1: a removed worker

    def final_gate(self) -> None:
        base = f"http://{self.address}:{self.public_port}"
        script = (f"{shlex.quote(self.python)} - {shlex.quote(base)} {shlex.quote(json.dumps(self.urls))} 120 "
                  + heredoc(f"KEY = {KEY_PATH!r}\n" + FINAL_GATE_PY, "DEPLOY_GATE_EOF"))
        res = self.ct.script(script, check=False, timeout=200, what="final smg gate")
        if res.rc != 0:
            raise CheckFailed(f"from inside CT {self.ct.vmid}: {res.said(300)}")
        self.details["final_gate"] = "workers ready and a generation answered (from inside the container)"

    def _not_ready(self, url: str) -> list[str]:
        with RouterClient(url, self.api_key, timeout_s=10.0) as client:
            listed = {w.url: w for w in client.list_workers()}
        return [f"{u} ({listed[u].status if u in listed else 'not listed'})" for u in self.urls
                if u not in listed or listed[u].status not in (None, "ready")]

    def _check_redirected(self) -> None:
        """A new connection to the public port must reach the staging smg: the worker ids it lists are the staging
        router's own (each router gives its workers ids of its own)."""
        with RouterClient(self.staging_url, self.api_key, timeout_s=10.0) as client:
            staging = {w.id for w in client.list_workers()}
        with RouterClient(self.base_url, self.api_key, timeout_s=10.0) as client:
            public = {w.id for w in client.list_workers()}
        if public != staging:
            raise CheckFailed(f"a new connection to {self.base_url} still reached the old router (worker ids "
                              f"{sorted(public)[:2]}…, the staging {self.router}'s are {sorted(staging)[:2]}…)")
        self.details["redirect_checked"] = "a new connection to the public port reached the staging smg"

    # ------------------------------------------------------------------------------------------- cleanup
    def remove_staging(self) -> None:
        self._run(remove_staging_script(), "staging removal")

    def _run(self, script: str, what: str, *, timeout: int = 120) -> None:
        res = self.ct.script(script, check=False, timeout=timeout, what=what)
        if res.rc != 0:
            raise RemoteError(f"{what} in CT {self.ct.vmid} failed: {res.said(400)}",
                              fix="see the output above; `deploy up` finds what is left and completes or undoes it")


@dataclass(frozen=True)
class BundleApply:
    """The final router's files and how converge.py writes them (its `_apply`)."""

    bundle: RouterBundle
    write: Callable[[RouterBundle, str | None], None]

    def apply(self, action: str | None) -> None:
        self.write(self.bundle, action)


def run_migration(m: Migration, staging: RouterBundle, final: BundleApply) -> dict[str, Any]:
    """(a)–(d) from a running 0.3.2; the record for `--json`."""
    began = time.monotonic()
    m.stage(staging)
    m.redirect()
    m.switch(final, old_running=True)
    m.finish()
    m.details["total_s"] = round(time.monotonic() - began, 1)
    return m.record()


def resume(m: Migration, state: MigrationState, facts: RouterFacts, final: BundleApply) -> str:
    """What an interrupted migration (or handover of a running smg to its changed unit) left, judged by what serves
    the public port, never by the staging unit's `is-active` alone (a staging smg that drains after SIGTERM reads
    `active` too):
    - the router's unit drains (the switch's graceful stop began, drain_mark): its drain is waited for (no second
      SIGTERM), then the inventory's router (`final`: smg, or 0.3.2 whose flags changed) is started and gated, then
      the finish: 'completed' (an undo would send new connections to a router that no longer accepts them, whatever
      package the inventory names);
    - smg runs as the router's unit and does not drain: it is gated from inside the container, never stopped or
      restarted, then the finish runs: 'finished' (the usual converge follows: it hands over to a changed unit);
    - 0.3.2 serves: the redirect and the staging smg go, a new migration may start: 'undone';
    - the router's unit is stopped and the staging smg carries the public port: the final smg is started and gated,
      then the finish: 'completed'.
    A redirect whose staging router does not run is deleted first, so it never points at a dead port."""
    if state.redirect and state.staging != "active":
        m.say("migration: the redirect points at the staging port, where nothing runs: removing it")
        m._run(unredirect_script(), "nftables redirect removal")
        state = MigrationState(module=state.module, staging=state.staging, staging_unit=state.staging_unit,
                               router_draining=state.router_draining)
    runs = facts.active == "active"
    if (runs and state.router_draining) or (not runs and state.staging == "active"):
        m.say(f"migration: completing an interrupted migration ({state.text()}); {UNIT} "
              + ("is finishing its requests after the interrupted run's SIGTERM" if runs else "is stopped"))
        m.switch(final, old_running=runs)
        m.finish()
        m.details["resumed"] = "completed"
        return "completed"
    if runs and state.module == "smg" and not state.router_draining:
        m.say(f"migration: finishing an interrupted migration ({state.text()}); smg already serves "
              f":{m.public_port} as {UNIT}: checked, not restarted")
        m.final_gate()
        m.finish()
        m.details["resumed"] = "finished"
        return "finished"
    m.say(f"migration: undoing an interrupted migration ({state.text()}); "
          + ("sglang-router still serves" if runs else "the staging smg does not run"))
    m.finish("undo")
    m.details["resumed"] = "undone"
    return "undone"
