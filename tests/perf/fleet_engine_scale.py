"""The fleet engine alone at 16, 64, 256 and 1024 hosts: wall time, CPU, peak threads and memory.

    python tests/perf/fleet_engine_scale.py [--parallel 16] [--host-s 0.5] [--sizes 16,64,256,1024]

Each host's job is a stand-in for a converged run's shape: it waits --host-s seconds (the remote work) and builds a
report of the size a real converged `up` report has (15 step records). No SSH: this isolates what the engine and
the per-host bookkeeping cost as the fleet grows (tests/perf/fleet_up.py measures real runs against the
simulator). Expect wall ≈ ceil(N / parallel) × host-s, CPU and memory roughly linear in N, threads flat.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator.commands.result import RunResult  # noqa: E402
from orchestrator.engine.runner import RunReport  # noqa: E402
from orchestrator.fleet.engine import HostEvents, HostOutcome, run_fleet  # noqa: E402
from orchestrator.fleet.outcome import host_outcome  # noqa: E402
from orchestrator.fleet.view import fleet_summary  # noqa: E402
from orchestrator.runlog import StepRecord  # noqa: E402

STEPS = ["connect", "lock", "host_prereqs", "container", "driver_userspace", "container_gpus", "sglang_install",
         "model_weights", "verify_p2p", "server_unit", "health", "smoke", "throughput", "release_verdict", "unlock"]


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def make_job(host_s: float):
    def job(host: str, events: HostEvents) -> HostOutcome:
        records = []
        for name in STEPS:
            events.step(name)
            records.append(StepRecord(name, summary=f"{name} ok on {host}", ssh_round_trips=1 if name == "lock" else 0,
                                      details={"host": host}))
        time.sleep(host_s)
        report = RunReport(host, "up", dry_run=False, steps=records, ssh_round_trips=3)
        return host_outcome(host, RunResult(report), records)
    return job


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--host-s", type=float, default=0.5)
    ap.add_argument("--sizes", default="16,64,256,1024")
    args = ap.parse_args()
    print(f"parallel {args.parallel}, {args.host_s} s per host; peak RSS is the process high-water mark so far")
    print(f"{'hosts':>6} {'wall s':>8} {'ideal s':>8} {'CPU s':>7} {'CPU ms/host':>11} {'threads':>8} {'RSS MiB':>8}")
    for n in (int(x) for x in args.sizes.split(",")):
        hosts = [f"h{i}" for i in range(n)]
        c0, t0 = cpu_s(), time.monotonic()
        run = run_fleet(hosts, make_job(args.host_s), parallel=args.parallel, on_event=lambda _e: None)
        wall, cpu = time.monotonic() - t0, cpu_s() - c0
        summary = fleet_summary(run)
        ideal = -(-n // args.parallel) * args.host_s
        print(f"{n:>6} {wall:8.2f} {ideal:8.2f} {cpu:7.2f} {1000 * cpu / n:11.2f} "
              f"{summary['engine']['peak_threads']:>8} {rss_mib():8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
