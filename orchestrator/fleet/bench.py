"""`deploy bench group G`: load through the router, GPU telemetry from every host at once, figures per host and total.

How one point runs:
1. every host's server counters are read (`/metrics`: `sglang:generation_tokens_total`), all hosts at once;
2. every host except the bench client's starts the GPU samplers of a normal bench
   (orchestrator/telemetry/sampler.py) around a wait for a stop file, so they sample while the load runs;
3. the bench client runs a normal bench (orchestrator/bench/run.py: bench_serving with samplers, one round trip)
   in the server container of the router's host, aimed at the router instead of its own server;
4. the stop files are written, the samplers return, the counters are read again.

Per-host shares: the difference of each host's own generation-token counter is what that server produced,
whichever way the router spread the requests (the router 0.3.2 keeps no per-worker totals; `/workers` only has
the current load). A host's tok/s is its tokens over the client's bench duration; its W and J are its GPUs' over
the client's bench window (host clocks are taken to agree, as NTP keeps them; a host whose samples miss that window
is summarised over its own sampling window instead). The total tok/s is what the client measured.

Behind smg, the router's own view of the point too (orchestrator/router/metrics.py), read from its metrics port
before and after the run: the requests it sent to each worker (`smg_worker_requests_total`), its request errors by
`error_type` (`smg_router_request_errors_total`) and each worker's circuit breaker at the end
(`smg_worker_cb_state`). Router errors above the preset's `max_failed_fraction` of the prompts fail the point, as
failed requests do. sglang-router 0.3.2 exports none of these: its points have none.
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.bench.command import connect_host
from orchestrator.bench.run import BenchRun, run_bench
from orchestrator.errors import CheckFailed, ConfigError, DeployError, RemoteError
from orchestrator.inventory.models import Host, Inventory, ServerProfile
from orchestrator.ledger.sqlite import new_run_id
from orchestrator.parsers.server_metrics import GENERATION_TOKENS, REQUESTS, delta
from orchestrator.remote.container import Container
from orchestrator.router.addresses import learn_fleet, learn_router
from orchestrator.router.client import RouterClient
from orchestrator.router.metrics import RouterWindow, router_error_failure, window
from orchestrator.router.places import (
    SiteAddresses,
    known_worker_urls,
    router_address_in,
    router_api_key,
    router_base_url,
    router_metrics_url,
)
from orchestrator.router.release import release_of
from orchestrator.telemetry.sampler import (
    SampledRun,
    SamplerOutputError,
    build_sampled_bench_script,
    parse_sampled_output,
    run_samples,
)
from orchestrator.telemetry.summary import TelemetrySummary, summarize

if TYPE_CHECKING:  # paramiko loads only when a fleet bench runs
    from orchestrator.remote.ssh import SshHost

#: Seconds the waiting samplers get to start before the load does.
LEAD_IN_S = 1.5


@dataclass(frozen=True)
class BenchClient:
    """Where bench_serving runs and which address it aims at: the router, seen from that container."""

    host: Host
    vmid: int
    router_host: str
    router_port: int


def bench_client(inventory: Inventory, addresses: SiteAddresses) -> BenchClient:
    """The server container of the router's host, and where it reaches the router."""
    host = bench_client_host(inventory)
    vmid = host.container.vmid
    addr, port = router_address_in(inventory, vmid, addresses)
    return BenchClient(host, vmid, addr, port)


def bench_client_host(inventory: Inventory) -> Host:
    """The router's host (its server container runs bench_serving); refuses a fleet without a router in a host's
    container. No I/O."""
    spec = inventory.router
    if spec is None:
        raise ConfigError("`deploy bench group` drives load through the router, and the inventory has no router:",
                          fix="add a router: section (docs/fleet.md) or bench one host: `deploy bench host X`")
    if spec.runs_on == "operator":
        raise ConfigError("`deploy bench group` runs bench_serving in the router host's container, and the router "
                          "runs on the operator's machine (router.runs_on: operator)",
                          fix="set router.runs_on to an inventory host (deploy up then runs it there)")
    return inventory.hosts[spec.runs_on]


@dataclass
class HostShare:
    """One host's part of a fleet bench point."""

    host: str
    output_tokens: int | None
    requests: int | None
    duration_s: float | None
    telemetry: TelemetrySummary | None
    error: str | None = None
    #: smg only: requests the router sent to this host's worker during the point, and its circuit breaker after.
    router_requests: int | None = None
    circuit: str | None = None

    @property
    def output_tok_s(self) -> float | None:
        if self.output_tokens is None or not self.duration_s:
            return None
        return self.output_tokens / self.duration_s

    @property
    def mean_power_w(self) -> float | None:
        return self.telemetry.total_mean_power_w if self.telemetry else None

    @property
    def energy_j(self) -> float | None:
        return self.telemetry.total_energy_j if self.telemetry else None

    @property
    def tok_s_per_w(self) -> float | None:
        tps, w = self.output_tok_s, self.mean_power_w
        return tps / w if tps is not None and w else None

    @property
    def j_per_token(self) -> float | None:
        e = self.energy_j
        return e / self.output_tokens if e is not None and self.output_tokens else None

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "output_tokens": self.output_tokens, "requests": self.requests,
                "output_tok_s": _r(self.output_tok_s), "mean_power_w": _r(self.mean_power_w),
                "energy_j": _r(self.energy_j), "tok_s_per_w": _r(self.tok_s_per_w, 4),
                "j_per_token": _r(self.j_per_token, 4), "error": self.error,
                "router_requests": self.router_requests, "circuit": self.circuit,
                "telemetry": self.telemetry.model_dump(mode="json") if self.telemetry else None}


@dataclass
class FleetBenchPoint:
    """One bench run through the router, its client's result and every host's share."""

    run: BenchRun
    client: str
    router_url: str
    shares: list[HostShare] = field(default_factory=list)
    #: smg's view of the point (None behind sglang-router, or when its metrics did not answer: see router_note).
    router_window: RouterWindow | None = None
    #: requests smg sent to a URL that is no inventory worker (a stale or foreign entry in its list).
    router_unlisted: dict[str, int] = field(default_factory=dict)
    router_note: str | None = None

    @property
    def output_tok_s(self) -> float:
        return self.run.result.output_throughput

    @property
    def mean_power_w(self) -> float | None:
        vals = [s.mean_power_w for s in self.shares]
        return sum(v for v in vals if v is not None) if vals and None not in vals else None

    @property
    def energy_j(self) -> float | None:
        vals = [s.energy_j for s in self.shares]
        return sum(v for v in vals if v is not None) if vals and None not in vals else None

    @property
    def tok_s_per_w(self) -> float | None:
        w = self.mean_power_w
        return self.output_tok_s / w if w else None

    @property
    def j_per_token(self) -> float | None:
        e, tokens = self.energy_j, self.run.result.total_output_tokens
        return e / tokens if e is not None and tokens else None

    @property
    def attributed_tokens(self) -> int | None:
        vals = [s.output_tokens for s in self.shares]
        return sum(v for v in vals if v is not None) if vals and None not in vals else None

    def to_dict(self) -> dict[str, Any]:
        r = self.run.result
        return {"run_id": self.run.run_id, "preset": self.run.preset, "overrides": self.run.overrides,
                "client": self.client, "router": self.router_url, "failure": self.run.failure or None,
                "total": {"output_tokens": r.total_output_tokens, "attributed_output_tokens": self.attributed_tokens,
                          "completed": r.completed, "failed": r.failed, "duration_s": r.duration_s,
                          "output_tok_s": _r(self.output_tok_s), "mean_power_w": _r(self.mean_power_w),
                          "energy_j": _r(self.energy_j), "tok_s_per_w": _r(self.tok_s_per_w, 4),
                          "j_per_token": _r(self.j_per_token, 4)},
                "hosts": [s.to_dict() for s in self.shares],
                "router_metrics": self.router_metrics_dict(),
                "bench": r.model_dump(mode="json", exclude={"server_info"})}


    def router_metrics_dict(self) -> dict[str, Any] | None:
        """smg's series over the point, as --json has them; None when there are none (see `router_note`)."""
        w = self.router_window
        if w is None:
            return None if self.router_note is None else {"error": self.router_note}
        return {"sent": sum(w.sent.values()), "errors": w.errors, "error_total": w.error_total,
                "unlisted": self.router_unlisted, "error": self.router_note}


def attribute(point: FleetBenchPoint, win: RouterWindow, url_of: dict[str, str]) -> None:
    """Give each host its worker's figures from smg's window (`url_of`: host name -> worker URL). Pure."""
    point.router_window = win
    host_of = {url.rstrip("/"): name for name, url in url_of.items()}
    for share in point.shares:
        url = url_of.get(share.host, "").rstrip("/")
        share.router_requests = win.sent.get(url, 0 if url else None)  # no series: smg sent it nothing
        share.circuit = win.circuit.get(url)
    point.router_unlisted = {u: n for u, n in win.sent.items() if u not in host_of and n > 0}


def _r(v: float | None, nd: int = 2) -> float | None:
    return round(v, nd) if v is not None else None


# ------------------------------------------------------------------------------------------------ remote parts
def metrics_command(ct: Container, profile: ServerProfile) -> str:
    """The server's /metrics text, read in its container with the profile venv's python (no curl needed)."""
    url = f"http://{connect_host(profile)}:{profile.port}/metrics"
    code = ("import sys, urllib.request\n"
            f"sys.stdout.write(urllib.request.urlopen({url!r}, timeout=20).read().decode())\n")
    return ct.exec_command([ct.paths.venv_python(profile.venv), "-c", code])


def wait_command(stop_file: str, limit_s: float) -> str:
    """What a non-client host's samplers frame: a wait until the client's run is over (or the time limit)."""
    loop = f"while [ ! -e {shlex.quote(stop_file)} ]; do sleep 0.2; done; rm -f {shlex.quote(stop_file)}"
    return f"timeout {int(limit_s)} bash -c {shlex.quote(loop)}"


@dataclass
class _Host:
    host: Host
    profile: ServerProfile
    ssh: SshHost
    ct: Container
    before: str = ""
    after: str = ""
    sampled: SampledRun | None = None
    query_fields: tuple[str, ...] = ()
    error: str | None = None


def _read_metrics(h: _Host) -> str:
    res = h.ssh.run(metrics_command(h.ct, h.profile), check=False, timeout=60, what="server metrics")
    if res.rc != 0:
        raise RemoteError(f"reading /metrics of the server in CT {h.ct.vmid} failed: "
                          f"{res.said(300)}",
                          fix="enable the server's metrics (profile flag enable-metrics: true) and check "
                              "`deploy status`", host=h.host.name, step="fleet bench")
    return res.stdout


def _sample_while_waiting(h: _Host, stop_file: str, limit_s: float) -> None:
    sampler = build_sampled_bench_script(wait_command(stop_file, limit_s), lead_in_s=0.5)
    res = h.ssh.script(sampler.script, check=False, timeout=limit_s + 120, what="GPU telemetry")
    try:
        h.sampled = parse_sampled_output(res.stdout, sampler.nonce)
        h.query_fields = sampler.query_fields
    except SamplerOutputError as exc:
        h.error = f"telemetry: {exc}"


def _share(h: _Host, point_run: BenchRun, client: str) -> HostShare:
    tokens = delta(h.before, h.after, GENERATION_TOKENS)
    requests = delta(h.before, h.after, REQUESTS)
    duration = point_run.result.duration_s or (point_run.telemetry.duration_s if point_run.telemetry else None)
    telemetry = point_run.telemetry if h.host.name == client else None
    if h.host.name != client and h.sampled is not None:
        samples, static = run_samples(h.sampled, h.query_fields)
        window = ((point_run.telemetry.window_start, point_run.telemetry.window_end)
                  if point_run.telemetry and point_run.telemetry.window_start and point_run.telemetry.window_end
                  else (h.sampled.started_at, h.sampled.ended_at))
        inside = [s for s in samples if s.ts is not None and window[0] <= s.ts <= window[1]]
        if not inside:
            window = (h.sampled.started_at, h.sampled.ended_at)
        if samples:
            telemetry = summarize(samples, window=window, static=static,
                                  sampling_overhead_pct=h.sampled.sampler_overhead_pct)
    error = h.error
    if tokens is None and error is None:
        error = "no generation-token counter difference in /metrics (metrics off, or the server restarted)"
    return HostShare(h.host.name, int(tokens) if tokens is not None else None,
                     int(requests) if requests is not None else None, duration, telemetry, error)


def _connect(h: _Host) -> None:
    h.ssh.connect()


def _each(hosts: list[_Host], fn: Callable[[_Host], None]) -> None:
    """fn on every host at once (a fleet bench samples every host together); the first error is raised."""
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        for fut in [pool.submit(fn, h) for h in hosts]:
            fut.result()


def run_fleet_bench(inventory: Inventory, hosts: list[Host], preset_name: str, points: list[dict[str, str]], *,
                    tofu: bool = False, say: Callable[[str], None] = lambda _m: None) -> list[FleetBenchPoint]:
    """One FleetBenchPoint per point (bench flag overrides), each through the router with every host sampled."""
    from orchestrator.remote.ssh import SshHost

    spec = inventory.router
    smg_series = spec is not None and release_of(spec).metrics_port(spec.flags) is not None
    # Behind smg, the workers' addresses too: its per-worker series are labelled with their URLs.
    addresses = learn_fleet(inventory, tofu=tofu) if smg_series else learn_router(inventory, tofu=tofu)
    client = bench_client(inventory, addresses)
    names = [h.name for h in hosts]
    if client.host.name not in names:
        raise ConfigError(f"the bench client runs on the router's host {client.host.name}, which is not among the "
                          f"targets ({', '.join(names)})", fix=f"add host {client.host.name} to the targets")
    preset = inventory.preset(preset_name)
    client_profile = inventory.profile_for(client.host)
    aimed = client_profile.model_copy(update={"host": client.router_host, "port": client.router_port})
    router_url = router_base_url(inventory, addresses)
    metrics_url = router_metrics_url(inventory, router_url)
    smg = _SmgView(RouterClient(router_url, router_api_key(inventory), timeout_s=10.0, metrics_url=metrics_url),
                   known_worker_urls(inventory, addresses)) if metrics_url is not None else None
    opened: list[_Host] = []
    try:
        for host in hosts:
            ssh = SshHost(host, tofu=tofu)
            opened.append(_Host(host, inventory.profile_for(host), ssh, Container(ssh, host.container.vmid)))
        _each(opened, _connect)
        by_name = {h.host.name: h for h in opened}
        others = [h for h in opened if h.host.name != client.host.name]
        out = []
        for overrides in points:
            label = ", ".join(f"{k}={v}" for k, v in overrides.items()) or preset_name
            say(f"bench {label} through the router {router_url} from {client.host.name}, "
                f"GPU telemetry on {len(opened)} host(s) …")
            out.append(_one_point(client, by_name[client.host.name], others, aimed, preset_name, preset, overrides,
                                  router_url, smg))
            p = out[-1]
            say(f"  {p.output_tok_s:.1f} output tok/s in total"
                + "".join(f"; {s.host} {s.output_tok_s:.1f}" for s in p.shares if s.output_tok_s is not None))
        return out
    finally:
        for h in opened:
            h.ssh.close()
        if smg is not None:
            smg.client.close()


@dataclass
class _SmgView:
    """smg's metrics endpoint, read from this machine before and after each point."""

    client: RouterClient
    url_of: dict[str, str]

    def read(self) -> str | None:
        return self.client.router_metrics()


def _one_point(client: BenchClient, client_host: _Host, others: list[_Host], aimed: ServerProfile,
               preset_name: str, preset: Any, overrides: dict[str, str], router_url: str,
               smg: _SmgView | None = None) -> FleetBenchPoint:
    everyone = [client_host, *others]

    def before(h: _Host) -> None:
        h.before, h.sampled, h.error = _read_metrics(h), None, None

    _each(everyone, before)
    router_before = smg.read() if smg is not None else None
    stop_file = f"/tmp/deploy-fleet-bench-{new_run_id()}.stop"
    limit_s = preset.timeout_s + 60
    threads = [threading.Thread(target=_sample_while_waiting, args=(h, stop_file, limit_s), daemon=True)
               for h in others]
    for t in threads:
        t.start()
    time.sleep(LEAD_IN_S if others else 0)
    try:
        run = run_bench(client_host.ct, client.host, aimed, preset_name, preset, overrides=overrides or None)
    except DeployError as err:
        raise err.at(host=client.host.name, step="fleet bench") from None
    finally:
        def stop(h: _Host) -> None:
            h.ssh.run(f"touch {shlex.quote(stop_file)}", check=False, timeout=30, what="end of the fleet bench")

        _each(others, stop)
        for t in threads:
            t.join(limit_s + 180)

    def after(h: _Host) -> None:
        h.after = _read_metrics(h)

    _each(everyone, after)
    router_after = smg.read() if smg is not None else None
    point = FleetBenchPoint(run, client.host.name, router_url,
                            [_share(h, run, client.host.name) for h in sorted(everyone, key=lambda h: h.host.name)])
    if smg is not None:
        if router_before is None or router_after is None:
            point.router_note = f"smg's metrics ({smg.client.metrics_url}) did not answer: no per-worker split"
        else:
            attribute(point, window(router_before, router_after), smg.url_of)
    if run.failure:  # bench/failures.py: the preset's rule, as for `deploy bench` and the router's errors below
        raise CheckFailed(f"through the router: {run.failure}",
                          fix="see `deploy status group` for the router's view of each worker",
                          host=client.host.name, step="fleet bench", details=point.to_dict())
    if point.router_window is not None:
        sent = run.result.num_prompts or (run.result.completed + (run.result.failed or 0))
        why = router_error_failure(point.router_window.error_total, sent, preset.max_failed_fraction)
        if why:
            raise CheckFailed(f"{why}: {_errors_said(point.router_window.errors)}",
                              fix="see `deploy status group` for the router's view of each worker, and the "
                                  "router's journal (journalctl -u sglang-router in its container)",
                              host=client.host.name, step="fleet bench", details=point.to_dict())
    return point


def _errors_said(errors: dict[str, int]) -> str:
    return ", ".join(f"{k or 'unlabelled'} {v}" for k, v in errors.items())
