"""Issue 39's figures: GPU hardware faults on three simulated hosts behind the real router, end to end.

    python tests/perf/hardware_faults.py [--first 50] [--router smg] [--intervals 5,30] [--runs 2]
                                         [--idle-s 12] [--p2p-trials 10] [--bench-trials 3]

Starts three simulated hosts (sim-FIRST..FIRST+2) on their own root, converges them (`deploy up group prod
--skip-bench --skip-weights`), then prints:

1. **False alarms on idle links** (host 0, every GPU with `link=N:idle-downshift`, the server idle): the link
   sampler's own command (`nvidia-smi --query-gpu=… -lms 50`) run on the host for `--idle-s` seconds, each sample
   judged by the status rule (a link below its maximum at >= 50 % load) and by the under-load verdict; `deploy
   doctor` five times; `deploy verify-p2p --bandwidth` three times (its window holds idle samples between copies).
2. **A stuck Gen2 under load** (host 0, `link=5:stuck-gen2`, the others idle-downshift): `--p2p-trials` runs of
   `deploy verify-p2p host H --bandwidth` and `--bench-trials` runs of `deploy up host H` (the throughput step's
   bench): flagged when the run fails naming GPU 5 and its slot 00000000:85:00.0.
3. **Fault to out of the router, and back, with no operator command**: the real router (`--router`, smg 1.13.0 by
   default) in front of the three servers, two clients sending chat completions through it, the inventory's
   `health: {reboot: true}`, and the watch started as its systemd unit would start it: the unit printed by `deploy
   watch group prod --unit --interval S` is read, and its `ExecStart=` runs detached with exactly its
   `Environment=` (this machine has no systemd as PID 1 to load the unit itself; `systemd-analyze verify` accepts
   it, tests/unit/test_watch_unit.py). Then, per interval and run: `deploy sim fault HOST xid=79@2` on host 1 (the
   only command), and the router's worker list sampled every 0.5 s: fault to out of the router, to remedied
   (rebooted and verified by the watch, P2P under load included), to back in the router; the fewest of the other
   two hosts listed at any sample; client requests ok and failed. Each fault lands at a random point of the
   watch's cycle (seeded), so the time to cordon samples its spread: at most one interval, plus the status read
   and the drain.
4. **A remedy whose P2P under load fails**: `xid=79@2 link=5:stuck-gen2` on host 1 (the link knob survives the
   reboot): the watch reboots it, the verification's copy matrix flags the link, the host stays out although it
   reads clean and serves while idle; once the knob is cleared (the riser reseated) the watch verifies it again
   and returns it.

Nothing is asserted: a measurement. Run as root (the router venv lives under /var/cache/deploy-sim).
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator.hardware.links import (  # noqa: E402
    LINK_SAMPLER_FIELDS,
    judge_links_under_load,
    link_sampler_argv,
    parse_link_samples,
)
from orchestrator.hardware.state import LOAD_UTIL_PCT  # noqa: E402
from simulator.manager.faults import set_faults  # noqa: E402
from simulator.manager.lifecycle import sim_down, sim_up  # noqa: E402
from simulator.router import VERSIONS, start_router, stop_router  # noqa: E402
from tests.e2e.conftest import DeployEnv, make_fleet_env, site_ostemplate  # noqa: E402
from tests.e2e.fleet_harness import RoutedFleet, worker_urls  # noqa: E402

CHAT = {"model": "glm-5", "max_tokens": 24,
        "messages": [{"role": "user", "content": "What is 17 + 25? Answer with the number only."}]}
IDLE = ",".join(f"{g}:idle-downshift" for g in range(8))
STUCK = ",".join(f"{g}:{'stuck-gen2' if g == 5 else 'idle-downshift'}" for g in range(8))
SLOT = "GPU 5 (slot 00000000:85:00.0)"
UTIL = "nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits"


def wait(check: Any, timeout_s: float, every_s: float = 0.5) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(every_s)
    return False


def sim_fault(env: DeployEnv, root: Path, host: str, *knobs: str) -> None:
    res = env.run("sim", "fault", host, "--root", str(root), *knobs)
    if res.rc != 0:
        raise SystemExit(f"deploy sim fault {host} {' '.join(knobs)}: exit {res.rc}\n{res.text}")


def idle_gpus(env: DeployEnv) -> bool:
    return set(env.ssh(UTIL).stdout.split()) == {"0"}


# ------------------------------------------------------------------------------------------------ links
def idle_false_alarms(env: DeployEnv, root: Path, host: str, idle_s: float) -> None:
    sim_fault(env, root, host, f"link={IDLE}")
    wait(lambda: idle_gpus(env), 60)
    argv = ["timeout", "-s", "INT", f"{idle_s:g}", *link_sampler_argv(50)]
    text = env.ssh(shlex.join(argv)).stdout
    samples = parse_link_samples(text)
    down = sum(1 for s in samples if s.current.below(s.max))
    busy = sum(1 for s in samples if s.util_pct is not None and s.util_pct >= LOAD_UTIL_PCT)
    alarms = sum(1 for s in samples if s.current.below(s.max) and s.util_pct is not None
                 and s.util_pct >= LOAD_UTIL_PCT)  # the status/doctor rule, per sample
    verdict = judge_links_under_load(samples, load="an idle host", min_util_pct=LOAD_UTIL_PCT)
    print(f"1. idle links with downshifts ({host}, link={IDLE.replace(',', ' ')}, no load)")
    print(f"   `{shlex.join(argv)}` on the host: {len(samples)} link samples over 8 GPUs "
          f"({', '.join(LINK_SAMPLER_FIELDS[3:7])}), {down} of them downshifted (below the maximum), {busy} at "
          f">= {LOAD_UTIL_PCT} % load")
    print(f"   false alarms: {alarms} of {len(samples)} samples by the status rule; under-load verdict: "
          f"{'pass' if verdict.ok else 'FAIL'} ({sum(1 for g in verdict.gpus if g.status == 'not-loaded')} GPUs "
          "not judged: never loaded)")
    faults = 0
    for _ in range(5):
        doc = env.run("--json", "doctor", "host", host).json
        faults += sum(1 for g in doc["hardware"]["gpus"] for f in g["faults"] if f["kind"] == "link")
    print(f"   deploy doctor host {host} x5 (40 link readings, all idle): {faults} link fault(s)")
    passed, judged = 0, 0
    for _ in range(3):
        res = env.run("--json", "verify-p2p", "host", host, "--bandwidth")
        links = res.json["bandwidth"]["links"]
        judged += links["samples"]
        passed += int(res.rc == 0 and links["ok"])
    print(f"   deploy verify-p2p host {host} --bandwidth x3: {passed} of 3 passed; {judged} samples judged (each GPU "
          "idles, downshifted, while the other pairs copy)")


def stuck_gen2(env: DeployEnv, root: Path, host: str, p2p_trials: int, bench_trials: int) -> None:
    print(f"2. a link stuck at Gen2 under load ({host}, link=5:stuck-gen2, the other seven idle-downshift)")
    sim_fault(env, root, host, f"link={STUCK}")
    flagged, durations = 0, []
    for _ in range(p2p_trials):
        t0 = time.monotonic()
        res = env.run("verify-p2p", "host", host, "--bandwidth")
        durations.append(time.monotonic() - t0)
        flagged += int(res.rc == 1 and f"PCIe links under load FAIL: {SLOT}: PCIe link Gen2 x16" in res.stdout)
        line = next((ln for ln in res.stdout.splitlines() if ln.startswith("PCIe links under load")), "")
    print(f"   deploy verify-p2p host {host} --bandwidth: flagged in {flagged} of {p2p_trials} trials "
          f"({min(durations):.1f}-{max(durations):.1f} s each, 2 SSH round trips)")
    print(f"     {line}")
    flagged = 0
    last = ""
    for _ in range(bench_trials):
        wait(lambda: idle_gpus(env), 60)  # else up's host checks flag it first, from the bench's leftover load
        res = env.run("up", "host", host, "--bench")  # converged: the throughput step benches on request only
        err = next((ln for ln in res.text.splitlines() if ln.startswith("error:")), "")
        flagged += int(res.rc != 0 and "step throughput" in err and SLOT in err)
        last = err or last
    print(f"   deploy up host {host} (the throughput step's bench): flagged in {flagged} of {bench_trials} trials")
    print(f"     {last}")
    set_faults(root, host, link=None)


# ------------------------------------------------------------------------------------------------ the watch
class Clients:
    def __init__(self, base: str) -> None:
        self.base, self.ok, self.failed = base, 0, []  # type: ignore[var-annotated]
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(2)]
        for t in self.threads:
            t.start()

    def _loop(self) -> None:
        import requests

        with requests.Session() as s:
            while not self.stop.is_set():
                try:
                    r = s.post(f"{self.base}/v1/chat/completions", json=CHAT, timeout=60)
                    if r.status_code == 200 and r.json()["choices"][0]["message"]["content"]:
                        self.ok += 1
                    else:
                        self.failed.append(f"{r.status_code} {r.text[:200]}")
                except Exception as exc:  # every failure counts
                    self.failed.append(repr(exc))

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=90)


class Sampler:
    """The router's healthy workers every 0.5 s: when `bad` left and came back, the fewest others listed."""

    def __init__(self, fleet: RoutedFleet, bad: str) -> None:
        self.fleet, self.bad = fleet, bad
        self.fewest = len(fleet.names) - 1
        self.samples = 0
        self.out_at: float | None = None
        self.back_at: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                listed = self.fleet.listed()
            except Exception:  # a router that does not answer lists nobody
                listed = {}
            self.samples += 1
            self.fewest = min(self.fewest, sum(ok for n, ok in listed.items() if n != self.bad))
            if not listed.get(self.bad, False) and self.out_at is None:
                self.out_at = time.monotonic()
            if listed.get(self.bad, False) and self.out_at is not None and self.back_at is None:
                self.back_at = time.monotonic()
            self.stop.wait(0.5)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


class UnitProcess:
    """The watch as its systemd unit starts it: the unit's ExecStart, with only its Environment= (and PATH),
    detached from this terminal; its lines read as they come, each with its arrival time."""

    def __init__(self, unit: str) -> None:
        lines = unit.splitlines()
        exec_start = next(ln.split("=", 1)[1] for ln in lines if ln.startswith("ExecStart="))
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONUNBUFFERED": "1",
               "COLUMNS": "200"}
        for ln in lines:
            if ln.startswith("Environment="):
                key, _, value = ln.split("=", 1)[1].partition("=")
                env[key] = value
        self.argv = shlex.split(exec_start)
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                     cwd="/", stdin=subprocess.DEVNULL, start_new_session=True)
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def seen(self, text: str, after: float = 0.0) -> float | None:
        return next((t for t, line in self.lines if t >= after and text in line), None)

    def stop(self) -> int:
        self.proc.terminate()  # systemctl stop: SIGTERM, the watch ends after its current cycle
        try:
            return self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def watch_figures(fleet: RoutedFleet, intervals: list[float], runs: int) -> None:
    env, bad = fleet.env, fleet.names[1]
    rng = random.Random(39)
    (env.inventory / "health.yaml").write_text("health:\n  reboot: true\n  reboot_timeout_s: 300\n")
    print(f"3. fault -> out of the router -> remedied -> back, no operator command ({len(fleet.names)} hosts behind "
          f"the router, faulty host {bad}, health: {{reboot: true}})")
    for interval in intervals:
        unit = env.run("watch", "group", "prod", "--unit", "--interval", f"{interval:g}")
        if unit.rc != 0:
            raise SystemExit(unit.text)
        watch = UnitProcess(unit.stdout)
        print(f"   the unit's ExecStart: {shlex.join(watch.argv)}")
        try:
            time.sleep(interval + 2)  # a clean cycle first
            for n in range(runs):
                clients, sampler = Clients(fleet.router), Sampler(fleet, bad)
                try:
                    wait(lambda c=clients: c.ok >= 2, 60)
                    time.sleep(rng.uniform(0, interval))  # the fault lands at any point of the watch's cycle
                    injected = time.monotonic()
                    sim_fault(env, fleet.root, bad, "xid=79@2")  # the only command of the run
                    back = wait(lambda s=sampler: s.back_at is not None, 600)
                    time.sleep(1)
                finally:
                    sampler.close()
                    clients.close()
                remedied = watch.seen(f"{bad}: remedied (reboot)", injected)
                if not back or sampler.out_at is None or sampler.back_at is None or remedied is None:
                    print(f"   interval {interval:g} s, run {n + 1}: the host did not come back within 600 s")
                    print("\n".join(line for _, line in watch.lines[-30:]))
                    return
                print(f"   --interval {interval:g} s, run {n + 1}: fault -> out of the router "
                      f"{sampler.out_at - injected:.1f} s, -> remedied {remedied - injected:.1f} s, -> back in "
                      f"{sampler.back_at - injected:.1f} s; fewest other hosts listed {sampler.fewest} of "
                      f"{len(fleet.names) - 1} over {sampler.samples} samples; client requests ok {clients.ok}, "
                      f"failed {len(clients.failed)}")
                for f in clients.failed[:3]:
                    print(f"     failed: {f}")
                time.sleep(interval + 2)  # a cycle after the return: not cordoned again
        finally:
            code = watch.stop()
        print(f"   the watch's lines for {bad} (exit {code} on SIGTERM):")
        for _, line in watch.lines:
            if line.startswith(f"{bad}: "):
                print(f"     {line}")
    remedy_failure(fleet, intervals[0])


def remedy_failure(fleet: RoutedFleet, interval: float) -> None:
    """4. The reboot clears the Xid but the GPU's link comes back stuck at Gen2: the remedy's P2P under load fails,
    the host stays out although it reads clean and serves while idle, and returns once the link is fixed."""
    env, bad = fleet.env, fleet.names[1]
    print(f"4. a remedy whose P2P under load fails ({bad}: xid=79@2 and link=5:stuck-gen2, the link stays stuck "
          f"after the reboot; --interval {interval:g})")
    unit = env.run("watch", "group", "prod", "--unit", "--interval", f"{interval:g}")
    watch = UnitProcess(unit.stdout)
    sampler = Sampler(fleet, bad)
    try:
        time.sleep(interval + 2)
        injected = time.monotonic()
        sim_fault(env, fleet.root, bad, "xid=79@2", "link=5:stuck-gen2")
        failed = wait(lambda: watch.seen(f"{bad}: remedy FAILED", injected) is not None, 600)
        held = wait(lambda: watch.seen(f"{bad}: still out of the router: it reads clean and serves", injected)
                    is not None, 300)
        time.sleep(2 * interval)  # two more cycles: still out
        out_after_fail = sampler.back_at is None
        fixed = time.monotonic()
        set_faults(fleet.root, bad, link=None)  # the operator reseated the riser: no deploy command
        back = wait(lambda: sampler.back_at is not None, 600)
        print(f"   remedy failed: {failed}; held while it read clean and served: {held}; still out of the router "
              f"{fixed - injected:.0f} s after the fault: {out_after_fail}; "
              f"link fixed -> back in the router {(sampler.back_at or fixed) - fixed:.1f} s: {back}; fewest other "
              f"hosts listed {sampler.fewest} of {len(fleet.names) - 1}")
    finally:
        sampler.close()
        code = watch.stop()
    print(f"   the watch's lines for {bad} (exit {code} on SIGTERM; repeated hold lines cut to the first):")
    seen: set[str] = set()
    for _, line in watch.lines:
        key = line.split(": now:")[0].split(" (cordoned ")[0][:60]
        if line.startswith(f"{bad}: ") and key not in seen:
            seen.add(key)
            print(f"     {line}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--first", type=int, default=int(os.environ.get("DEPLOY_SIM_FIRST", "50")))
    ap.add_argument("--router", choices=["sglang-router", "smg"], default="smg")
    ap.add_argument("--intervals", default="5,30", help="watch intervals to measure, comma separated")
    ap.add_argument("--runs", type=int, default=2, help="faults injected per interval")
    ap.add_argument("--idle-s", type=float, default=12.0, help="seconds of idle link sampling")
    ap.add_argument("--p2p-trials", type=int, default=10)
    ap.add_argument("--bench-trials", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="deploy-hwfaults-") as tmp:
        root = Path(tmp) / "sim"
        infos = sim_up(root, hosts=3, first=args.first, time_scale=5.0, ct_storage="tmpfs")
        router_dir = Path(tmp) / "router"
        try:
            env_dir = Path(tmp) / "env"
            env_dir.mkdir()
            names = [i.name for i in infos]
            env = make_fleet_env(infos, env_dir, {"prod": names}, site_ostemplate(infos))
            t0 = time.monotonic()
            up = env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=1800)
            if up.rc != 0:
                print(up.text[-3000:])
                return 1
            print(f"deploy up group prod --skip-bench --skip-weights ({', '.join(names)}): exit 0 in "
                  f"{time.monotonic() - t0:.0f} s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
            fleet = RoutedFleet(env=env, names=names, root=root, infos=infos)
            first = fleet.host_env(names[0])
            idle_false_alarms(first, root, names[0], args.idle_s)
            stuck_gen2(first, root, names[0], args.p2p_trials, args.bench_trials)
            urls = worker_urls(fleet)
            address = f"127.0.0.{args.first + len(names) + 2}"
            from orchestrator.router.release import SMG_HEALTH_FLAGS

            extra = ([a for k, v in SMG_HEALTH_FLAGS.items() for a in (f"--{k}", str(v))] if args.router == "smg"
                     else ["--health-check-interval-secs", "1"])
            start_router(router_dir, address, 30000, list(urls.values()), policy="round_robin", extra=extra,
                         package=args.router)
            (env.inventory / "router.yaml").write_text(
                f"router:\n  package: {args.router}\n  host: {address}\n  port: 30000\n  policy: round_robin\n"
                "  workers: prod\n" + ("  flags:\n    prometheus-port: 30001\n" if args.router == "smg" else ""))
            fleet.router, fleet.urls = f"http://{address}:30000", urls
            if not wait(lambda: all(fleet.listed().values()), 120):
                print(f"the router did not list every worker: {fleet.listed()}")
                return 1
            print(f"   router: {args.router} {VERSIONS[args.router]} at {fleet.router}")
            watch_figures(fleet, [float(x) for x in args.intervals.split(",") if x], args.runs)
            events = env.run("--json", "history", "host", names[1]).json.get("events", [])
            kinds = [e["kind"] for e in events]
            print(f"   deploy history host {names[1]}: {len(events)} GPU fault events "
                  f"({', '.join(f'{k} x{kinds.count(k)}' for k in dict.fromkeys(kinds))})")
            print(f"\nload average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        finally:
            stop_router(router_dir)
            sim_down(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
