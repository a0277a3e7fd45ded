"""Issue 50's figure: a `deploy watch` killed at each of its points, and how long until the next watch has the host
back in the router (or remedied), against one interval plus the remedy.

    python tests/perf/watch_kill.py [--first 60] [--router sglang-router|smg] [--intervals 5,30] [--runs 1]

Starts three simulated hosts (sim-FIRST..FIRST+2), converges them (`deploy up group prod --skip-bench
--skip-weights`), puts the real router in front of their servers (the inventory's router.yaml), and starts the watch
as its systemd unit would (the unit printed by `deploy watch group prod --unit`, its ExecStart with its
Environment=). Two clients send chat completions through the router throughout. Then, per interval and run, for
each kill point:

- **mid-cordon, Ctrl-C** (SIGINT) and **mid-cordon, crash** (SIGKILL): a restart-class Xid (`deploy sim fault HOST
  xid=13@G`) while a long request runs on the host, so its drain waits; the watch is killed the moment the router
  stops listing the host (sampled every 0.1 s), i.e. while the drain waits for that request;
- **mid-remedy, crash** (SIGKILL): killed the moment the watch says `remedy: restart`.

The watch's state file is read right after each kill (what the watch recorded before it acted: `phase: cordoning`,
`remedying`), and `deploy status group prod` is run (its exit code, and whether it names the host cordoned by a
watch that is not running). A new watch is then started as systemd's `Restart=` would: the figure is the time from
that start to the host back in the router (the router's list, sampled every 0.5 s), beside the bound: the interval
plus the remedy the new watch ran (its own `remedied (restart) in X s` line). Nothing is asserted: a measurement (the
e2e test `test_a_watch_killed_mid_cordon_and_mid_remedy_leaves_the_host_to_its_next_cycle` asserts it). Run as
root (the router venv lives under /var/cache/deploy-sim).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from hardware_faults import CHAT, Clients, Sampler, UnitProcess, sim_fault, wait  # noqa: E402  (this directory)

from simulator.manager.lifecycle import sim_down, sim_up  # noqa: E402
from simulator.router import VERSIONS, start_router, stop_router  # noqa: E402
from tests.e2e.conftest import make_fleet_env, site_ostemplate  # noqa: E402
from tests.e2e.fleet_harness import RoutedFleet, worker_urls  # noqa: E402

POINTS = (("mid-cordon", signal.SIGINT), ("mid-cordon", signal.SIGKILL), ("mid-remedy", signal.SIGKILL))


def present(fleet: RoutedFleet, name: str) -> bool:
    from orchestrator.router.client import RouterClient

    try:
        with RouterClient(fleet.router) as client:
            return client.find(fleet.urls[name]) is not None
    except Exception:  # a router that does not answer: not known to have dropped it
        return True


def long_request(url: str) -> threading.Thread:
    """One long streamed completion straight to the host's server: in flight there, its drain waits for it."""

    def run() -> None:
        import requests

        body = {**CHAT, "max_tokens": 4000, "stream": True, "ignore_eos": True}
        try:
            with requests.post(f"{url}/v1/chat/completions", json=body, stream=True, timeout=120) as r:
                for _ in r.iter_lines():
                    pass
        except Exception:  # it only holds the drain
            pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def one(fleet: RoutedFleet, unit: str, interval: float, point: str, sig: signal.Signals, rng: random.Random) -> str:
    env, bad = fleet.env, fleet.names[1]
    state = Path(env.env["DEPLOY_STATE_DIR"]) / "watch" / "prod.json"
    watch = UnitProcess(unit)
    try:
        time.sleep(interval + 3)  # a clean cycle first: every host recorded as listed
        time.sleep(rng.uniform(0, interval))  # the fault lands at any point of the cycle
        holder = long_request(fleet.urls[bad]) if point == "mid-cordon" else None
        time.sleep(1)
        sim_fault(env, fleet.root, bad, f"xid=13@{rng.randrange(8)}")
        if point == "mid-cordon":
            hit = wait(lambda: not present(fleet, bad), 120, 0.1)
        else:
            hit = wait(lambda: watch.seen(f"{bad}: remedy: restart") is not None, 180, 0.1)
        watch.proc.send_signal(sig)
        watch.proc.wait(timeout=120)
    finally:
        if watch.proc.poll() is None:
            watch.proc.kill()
    if holder is not None:
        holder.join(timeout=150)
    entry = (json.loads(state.read_text()).get("cordoned") or {}).get(bad, {}) if state.exists() else {}
    recorded = ("phase " + str(entry["phase"]) if entry.get("phase") else
                "remedying" if entry.get("remedying") else "cordoned" if entry else "NOTHING recorded")
    status = env.run("status", "group", "prod", timeout=300)
    said = "names it" if f"{bad} is out of the router, cordoned by a deploy watch" in status.stdout else "silent"
    sampler = Sampler(fleet, bad)
    sampler.out_at = time.monotonic()  # it is out now: back_at is its return
    began = time.monotonic()
    again = UnitProcess(unit)
    try:
        back = wait(lambda: sampler.back_at is not None, 600)
    finally:
        sampler.close()
        again.stop()
    sim_fault(env, fleet.root, bad, "xid=none")
    text = "\n".join(line for _, line in again.lines)
    found = re.search(rf"{bad}: remedied \(restart\) in ([0-9.]+) s", text)
    remedy_s = float(found.group(1)) if found else float("nan")
    took = (sampler.back_at - began) if back and sampler.back_at is not None else None
    verdict = ("within" if took is not None and took <= interval + remedy_s else "OVER") + \
        f" one interval plus the remedy ({interval:g} + {remedy_s:.1f} s)"
    return (f"--interval {interval:g}, killed {point} by {sig.name} ({'at the point' if hit else 'POINT NOT SEEN'}; "
            f"recorded: {recorded}; status group exit {status.rc}, {said}): next watch started -> back in the router "
            f"{'never' if took is None else f'{took:.1f} s'}, {verdict}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--first", type=int, default=int(os.environ.get("DEPLOY_SIM_FIRST", "60")))
    ap.add_argument("--router", choices=["sglang-router", "smg"], default="sglang-router")
    ap.add_argument("--intervals", default="5,30")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=50)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still takes its hosts down (finally)
    # Started in a shell's background, this process (and every watch it starts) inherits SIGINT ignored: the
    # Ctrl-C kill point would be no kill at all (chaos_soak.py does the same).
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="deploy-watchkill-") as tmp:
        root = Path(tmp) / "sim"
        infos = sim_up(root, hosts=3, first=args.first, time_scale=5.0)
        router_dir = Path(tmp) / "router"
        try:
            env_dir = Path(tmp) / "env"
            env_dir.mkdir()
            names = [i.name for i in infos]
            env = make_fleet_env(infos, env_dir, {"prod": names}, site_ostemplate(infos))
            up = env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=1800)
            if up.rc != 0:
                print(up.text[-3000:])
                return 1
            fleet = RoutedFleet(env=env, names=names, root=root, infos=infos)
            urls = worker_urls(fleet)
            address = f"127.0.0.{args.first + len(names) + 2}"
            start_router(router_dir, address, 30000, list(urls.values()), policy="round_robin",
                         extra=["--health-check-interval-secs", "1"], package=args.router)
            (env.inventory / "router.yaml").write_text(
                f"router:\n  package: {args.router}\n  host: {address}\n  port: 30000\n  policy: round_robin\n"
                "  workers: prod\n")
            fleet.router, fleet.urls = f"http://{address}:30000", urls
            if not wait(lambda: all(fleet.listed().values()), 120):
                print(f"the router did not list every worker: {fleet.listed()}")
                return 1
            print(f"3 hosts behind {args.router} {VERSIONS[args.router]} at {fleet.router}; faulty host {names[1]}; "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
            clients = Clients(fleet.router)
            try:
                for interval in [float(x) for x in args.intervals.split(",") if x]:
                    unit = env.run("watch", "group", "prod", "--unit", "--interval", f"{interval:g}").stdout
                    for _ in range(args.runs):
                        for point, sig in POINTS:
                            print("  " + one(fleet, unit, interval, point, sig, rng), flush=True)
            finally:
                clients.close()
            print(f"client requests through the router: ok {clients.ok}, failed {len(clients.failed)}")
            for f in clients.failed[:5]:
                print(f"  failed: {f}")
        finally:
            stop_router(router_dir)
            sim_down(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
