"""Zero-downtime figure: a canary fleet roll of N (default 4) simulated hosts behind the real router (sglang-router
0.3.2, or smg 1.13.0 with --router smg), with a steady streaming client sending chat completions through the
router for the whole roll.

    python tests/perf/fleet_canary_roll.py [--router smg] [--hosts 4] [--first 60] [--clients 4] [--before-s 30]
                                           [--with-bench] [--no-drain]

Starts N simulated hosts on their own root, converges them (`up --skip-bench --skip-weights`), starts the real
router in front of their servers, starts the clients, measures TTFT (time to the first streamed token) for
`--before-s` seconds, then runs `deploy roll group fleet --set num-continuous-decode-steps=4 --canary 1 --batch 25%
--max-unavailable 1` (with `--skip-bench` unless `--with-bench`) while the clients keep going. Prints the number of
requests and failed requests before and during the roll, p50/p99 TTFT in both phases, the roll's wall time, and
each host's drain line. Nothing is asserted: a measurement. Run as root (the router venv lives under
/var/cache/deploy-sim).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from simulator.manager.lifecycle import sim_down, sim_up  # noqa: E402
from simulator.router import VERSIONS, start_router, stop_router  # noqa: E402
from tests.e2e import site_template  # noqa: E402
from tests.e2e.conftest import make_fleet_env  # noqa: E402

CHAT = {"model": "glm-5", "max_tokens": 32, "stream": True,
        "messages": [{"role": "user", "content": "What is 17 + 25? Answer with the number only."}]}


@dataclass
class Phase:
    ttft_s: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    failed_at: list[float] = field(default_factory=list)  # time.monotonic() of each failure, as failed

    def fail(self, what: str) -> None:
        """A failed request, with when it failed (the chaos soak explains each by the event around it)."""
        self.failed.append(what)
        self.failed_at.append(time.monotonic())


FAILED_BACKOFF_S = 0.5


@dataclass
class Clients:
    base: str
    count: int
    phase: Phase = field(default_factory=Phase)
    stop: threading.Event = field(default_factory=threading.Event)
    api_key: str | None = None  # the router's key, when the fleet's servers have one

    def one(self, session: requests.Session) -> None:
        start = time.monotonic()
        phase = self.phase  # a request counts in the phase it started in
        try:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            with session.post(f"{self.base}/v1/chat/completions", json=CHAT, stream=True, timeout=120,
                              headers=headers) as resp:
                if resp.status_code != 200:
                    phase.fail(f"HTTP {resp.status_code}: {resp.text[:200]}")
                    return
                first: float | None = None
                done = False
                for line in resp.iter_lines():
                    if not line.startswith(b"data: "):
                        continue
                    if line == b"data: [DONE]":
                        done = True
                        break
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        phase.fail(f"stream error: {chunk['error']}")
                        return
                    if first is None and (chunk.get("choices") or [{}])[0].get("delta", {}).get("content"):
                        first = time.monotonic() - start
                if not done or first is None:
                    phase.fail("stream ended without [DONE] or without a token")
                    return
                phase.ttft_s.append(first)
        except requests.RequestException as exc:
            phase.fail(repr(exc))

    def loop(self) -> None:
        with requests.Session() as s:
            while not self.stop.is_set():
                failed = len(self.phase.failed)
                self.one(s)
                if len(self.phase.failed) > failed:
                    self.stop.wait(FAILED_BACKOFF_S)  # as a client with retries would: a refused port is no busy loop

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self.loop, daemon=True) for _ in range(self.count)]
        for t in threads:
            t.start()
        return threads


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def describe(name: str, phase: Phase, seconds: float) -> str:
    n = len(phase.ttft_s) + len(phase.failed)
    return (f"  {name:<7} {seconds:6.1f} s: {n:5d} requests, {len(phase.failed)} failed; TTFT p50 "
            f"{pct(phase.ttft_s, 50) * 1000:7.1f} ms, p99 {pct(phase.ttft_s, 99) * 1000:7.1f} ms, max "
            f"{max(phase.ttft_s, default=float('nan')) * 1000:7.1f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--router", choices=["sglang-router", "smg"], default="sglang-router",
                    help="the real router package in front of the hosts (smg: with deploy's health settings)")
    ap.add_argument("--first", type=int, default=int(os.environ.get("DEPLOY_SIM_FIRST", "60")))
    ap.add_argument("--clients", type=int, default=4, help="concurrent streaming clients through the router")
    ap.add_argument("--before-s", type=float, default=30.0, help="seconds of traffic measured before the roll")
    ap.add_argument("--with-bench", action="store_true", help="keep each host's throughput gate (slower)")
    ap.add_argument("--no-drain", action="store_true",
                    help="control run: the router stays in front, but the inventory has no router: section, so "
                         "deploy restarts each host without draining it")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="deploy-canary-perf-") as tmp:
        root = Path(tmp) / "sim"
        infos = sim_up(root, hosts=args.hosts, first=args.first, time_scale=5.0)
        router_dir = Path(tmp) / "router"
        try:
            env_dir = Path(tmp) / "env"
            env_dir.mkdir()
            names = [i.name for i in infos]
            volids = {site_template.install(Path(i.host_dir)) for i in infos}
            env = make_fleet_env(infos, env_dir, {"fleet": names}, ostemplate=volids.pop())
            t_up = time.monotonic()
            up = env.run("up", "group", "fleet", "--skip-bench", "--skip-weights", timeout=1800)
            up_s = time.monotonic() - t_up
            if up.rc != 0:
                print(up.text[-3000:])
                return 1
            print(f"  deploy up group fleet --skip-bench --skip-weights ({args.hosts} hosts, fresh containers from "
                  f"the site template): exit {up.rc} in {up_s:.1f} s")
            address = f"127.0.0.{args.first + args.hosts + 1}"
            # the workers' containers' addresses on the site network, read inside each as the tool does
            from orchestrator.inventory.loader import load_inventory
            from orchestrator.router.addresses import learn
            from orchestrator.router.places import worker_url

            inv = load_inventory(env.inventory)
            site = learn([(inv.hosts[n], inv.hosts[n].container.vmid) for n in names])
            urls = [worker_url(inv, inv.hosts[n], site) for n in names]
            print(f"  worker URLs: {', '.join(urls)}")
            from orchestrator.router.release import SMG_HEALTH_FLAGS

            smg = args.router == "smg"
            extra = ([a for k, v in SMG_HEALTH_FLAGS.items() for a in (f"--{k}", str(v))] if smg
                     else ["--health-check-interval-secs", "1"])
            start_router(router_dir, address, 30000, urls, policy="round_robin", extra=extra, package=args.router)
            if not args.no_drain:
                (env.inventory / "router.yaml").write_text(
                    f"router:\n  package: {args.router}\n  host: {address}\n  port: 30000\n  policy: round_robin\n"
                    "  workers: fleet\n" + ("  flags:\n    prometheus-port: 30001\n" if smg else ""))
            base = f"http://{address}:30000"
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                workers = requests.get(f"{base}/workers", timeout=5).json().get("workers") or []
                if sum(1 for w in workers if w.get("is_healthy")) == len(urls):
                    break
                time.sleep(0.5)
            clients = Clients(base, args.clients)
            threads = clients.start()
            time.sleep(3)  # warm-up, not measured
            before = clients.phase = Phase()
            time.sleep(args.before_s)
            during = clients.phase = Phase()
            t0 = time.monotonic()
            argv = ["--json", "roll", "group", "fleet", "--set", "num-continuous-decode-steps=4", "--canary", "1",
                    "--batch", "25%", "--max-unavailable", "1"] + ([] if args.with_bench else ["--skip-bench"])
            roll = env.run(*argv, timeout=3600)
            roll_s = time.monotonic() - t0
            clients.phase = Phase()  # requests after the roll are not counted
            clients.stop.set()
            for t in threads:
                t.join(timeout=150)
            print(f"\n{args.hosts} hosts behind {args.router} {VERSIONS[args.router]}, {args.clients} streaming clients"
                  + (" (control: NO drain)" if args.no_drain else "") + "; load average "
                  f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
            print(f"  deploy {' '.join(argv[1:])}: exit {roll.rc} in {roll_s:.1f} s")
            print(describe("before", before, args.before_s))
            print(describe("during", during, roll_s))
            ratio = pct(during.ttft_s, 99) / pct(before.ttft_s, 99)
            print(f"  p99 TTFT during / before: {ratio:.2f}x")
            for f in (before.failed + during.failed)[:10]:
                print(f"  failed: {f}")
            try:
                doc = json.loads(roll.stdout)
                for h in doc["hosts"]:
                    print(f"  {h['host']}: {h['result']}, release {h['release']}, flags {h['flags_sha']}; "
                          f"{h['router']}")
            except (json.JSONDecodeError, KeyError):
                print(roll.text[-3000:])
        finally:
            stop_router(router_dir)
            sim_down(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
