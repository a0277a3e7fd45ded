"""Fleet figures: a converged `deploy up` of one simulated host against a fleet of N (default 16) in one process.

    python tests/perf/fleet_up.py [--hosts 16] [--first 140] [--repeat 2] [--separate] [--baseline DIR [--pairs 5]]

Starts N simulated hosts on their own root (sim-FIRST.. on 127.0.0.(FIRST+1)..), converges them all once
(`deploy up group fleet --skip-bench --skip-weights`), then measures converged runs (`--skip-bench`):
`up host sim-FIRST` and `up group fleet --parallel N`, each `--repeat` times (best wall time kept). Prints the
wall-time ratio, the deploy process's own CPU time (user+sys from getrusage of the child) per extra host, SSH
round trips, and the engine's peak worker threads and open sockets from the fleet --json. `--separate` also times
N separate `deploy up host X` processes started at once (the pre-fleet way). `--baseline DIR` (another checkout)
then alternates both runs between that tree and this one and prints medians, with the whole machine's CPU per
run: what the simulated hosts spend on the tool's requests is most of it. Nothing is asserted: a measurement.
Run as root. The simulated hosts share the machine's cores with the tool, so the wall ratio includes them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from simulator.manager.lifecycle import sim_down, sim_up  # noqa: E402
from tests.e2e import site_template  # noqa: E402
from tests.e2e.conftest import make_fleet_env  # noqa: E402


@dataclass
class Sample:
    wall_s: float
    cpu_s: float
    doc: dict[str, Any]
    rc: int
    sim_cpu_s: float = 0.0


SIM_PIDS: list[int] = []


def sim_cpu(pids: list[int]) -> float:
    """CPU of the simulated hosts: each sshd listener's reaped children (every SSH session, with the stand-ins it
    ran) plus its own time, from /proc/PID/stat (utime, stime, cutime, cstime)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])
    return total / tick


def sim_pss_mib(root: Path) -> float:
    """Memory of the simulated hosts: the proportional set size (shared pages split) of every daemon of every host
    (sshd, API server, view holder) and the site's DHCP server and everything they run, from /proc/PID/smaps_rollup."""
    from simulator import procs

    pids: set[int] = set()
    for pidfile in [*root.glob("hosts/*/sshd/*.pid"), *root.glob("hosts/*/api/api.pid"),
                    root / "site" / "dnsmasq.pid"]:
        pid = procs.read_pid(pidfile)
        if pid is not None:
            pids |= {pid, *procs.descendants(pid)}
    total_kb = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total_kb += int(line.split()[1])
        except OSError:
            continue
    return total_kb / 1024


def child_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def machine_cpu() -> float:
    """CPU seconds the whole machine has spent busy (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as fh:
        ticks = [int(x) for x in fh.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def deploy(env: dict[str, str], *args: str, tree: Path = REPO) -> Sample:
    sim0, cpu0, start = sim_cpu(SIM_PIDS), child_cpu(), time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "--json", *args], capture_output=True, text=True,
                          env=env, cwd=tree)
    wall, cpu = time.monotonic() - start, child_cpu() - cpu0
    sim = sim_cpu(SIM_PIDS) - sim0
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        doc = {"stdout": proc.stdout[-2000:], "stderr": proc.stderr[-2000:]}
    return Sample(wall, cpu, doc, proc.returncode, sim)


def best(env: dict[str, str], repeat: int, *args: str) -> Sample:
    samples = [deploy(env, *args) for _ in range(repeat)]
    for s in samples:
        if s.rc != 0:
            raise SystemExit(f"deploy {' '.join(args)}: exit {s.rc}\n{json.dumps(s.doc)[:3000]}")
    return min(samples, key=lambda s: s.wall_s)


def separate(env: dict[str, str], names: list[str]) -> tuple[float, float]:
    """N separate processes at once: wall time and their summed CPU."""
    cpu0, start = child_cpu(), time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "orchestrator", "--json", "up", "host", n, "--skip-bench"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO)
             for n in names]
    rcs = [p.wait() for p in procs]
    if any(rcs):
        raise SystemExit(f"separate runs failed: {rcs}")
    return time.monotonic() - start, child_cpu() - cpu0


def compare(env: dict[str, str], names: list[str], baseline: Path, pairs: int) -> None:
    """`--baseline`: the 1-host and the N-host run from another checkout and from this one, alternating, `pairs`
    times each; medians of the wall times and of the whole machine's CPU per run (tool, simulated hosts, all).
    The simulated hosts are this tree's, so the difference is the tool's: what it asks the hosts to run."""
    fleet = ("up", "group", "fleet", "--parallel", str(len(names)), "--skip-bench")
    trees = {"before (baseline)": baseline.resolve(), "after (this tree)": REPO}
    walls: dict[str, dict[str, list[float]]] = {label: {"one": [], "many": []} for label in trees}
    cpus: dict[str, dict[str, list[float]]] = {label: {"one": [], "many": []} for label in trees}
    for _ in range(pairs):
        for label, tree in trees.items():
            for kind, args in (("one", ("up", "host", names[0], "--skip-bench")), ("many", fleet)):
                busy0 = machine_cpu()
                sample = deploy(env, *args, tree=tree)
                if sample.rc != 0:
                    raise SystemExit(f"{tree}: deploy {' '.join(args)}: exit {sample.rc}")
                walls[label][kind].append(sample.wall_s)
                cpus[label][kind].append(machine_cpu() - busy0)
                time.sleep(1.0)
    med = statistics.median
    print(f"\nalternating with {baseline} ({pairs} pairs, medians; machine CPU = every process on the machine)")
    for label in trees:
        one, many = med(walls[label]["one"]), med(walls[label]["many"])
        print(f"  {label}: 1 host {one:.2f} s, {len(names)} hosts {many:.2f} s, ratio {many / one:.2f}x; machine "
              f"CPU per run {med(cpus[label]['one']):.2f} / {med(cpus[label]['many']):.2f} CPU-s (floor on "
              f"{os.cpu_count()} cores: {med(cpus[label]['many']) / (os.cpu_count() or 1) / one:.2f}x)")


def busy_fraction(window_s: float) -> float:
    """The machine's CPU busy share over `window_s` (/proc/stat: all but idle and iowait)."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as fh:
            ticks = [int(x) for x in fh.readline().split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]

    total0, idle0 = sample()
    time.sleep(window_s)
    total1, idle1 = sample()
    return 1 - (idle1 - idle0) / max(total1 - total0, 1)


def settle(limit_s: float, busy_max: float = 0.1, window_s: float = 5.0) -> str:
    """Wait (at most `limit_s`) until the machine is quiet: the hosts' containers have just booted and started
    their servers, and a figure taken meanwhile measures that, not the converged run."""
    start = time.monotonic()
    busy = busy_fraction(window_s)
    while busy > busy_max and time.monotonic() - start < limit_s:
        busy = busy_fraction(window_s)
    return f"{busy:.0%} busy over {window_s:.0f} s after {time.monotonic() - start:.0f} s of waiting"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--first", type=int, default=int(os.environ.get("DEPLOY_SIM_FIRST", "140")))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--separate", action="store_true", help="also time N separate processes started at once")
    ap.add_argument("--keep", metavar="DIR", default=None, help="sim root to use and keep (default: a temp dir)")
    ap.add_argument("--baseline", metavar="DIR", type=Path, default=None,
                    help="another checkout: time its runs and this tree's alternately (see compare)")
    ap.add_argument("--pairs", type=int, default=5, help="alternating pairs with --baseline")
    ap.add_argument("--settle-s", type=float, default=120.0,
                    help="after converging, wait at most this long for the CPU to be <= 10 %% busy (0: no wait)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="deploy-fleet-perf-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp) / "sim"
        t0 = time.monotonic()
        infos = sim_up(root, hosts=args.hosts, first=args.first, time_scale=5.0)
        print(f"{len(infos)} simulated hosts up in {time.monotonic() - t0:.1f} s; their daemons use "
              f"{sim_pss_mib(root):.0f} MiB (PSS)", flush=True)
        SIM_PIDS[:] = [i.sshd_pid for i in infos if i.sshd_pid]
        try:
            env_dir = Path(tmp) / "env"
            env_dir.mkdir()
            names = [i.name for i in infos]
            volids = {site_template.install(Path(i.host_dir)) for i in infos}
            env = make_fleet_env(infos, env_dir, {"fleet": names}, ostemplate=volids.pop())
            first = deploy(env.env, "up", "group", "fleet", "--parallel", str(args.hosts), "--skip-bench",
                           "--skip-weights")
            print(f"converge from nothing: {first.wall_s:.1f} s wall, {first.cpu_s:.2f} s tool CPU, exit {first.rc}",
                  flush=True)
            if first.rc != 0:
                print(json.dumps(first.doc.get("fleet"), indent=1))
                return 1
            if args.settle_s > 0:
                print(f"machine before the figures: {settle(args.settle_s)}", flush=True)
            one = best(env.env, args.repeat, "up", "host", names[0], "--skip-bench")
            many = best(env.env, args.repeat, "up", "group", "fleet", "--parallel", str(args.hosts),
                        "--skip-bench")
            fleet = many.doc["fleet"]
            engine = fleet["engine"]
            extra = max(args.hosts - 1, 1)
            print(f"\nconverged `up --skip-bench` (best of {args.repeat}); load average now "
                  f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
            print(f"  1 host : {one.wall_s:6.2f} s wall, {one.cpu_s:5.2f} s tool CPU, {one.sim_cpu_s:5.2f} s simulated-"
                  f"host CPU, {one.doc['totals']['ssh_round_trips']} SSH round trips")
            print(f"  {args.hosts} hosts: {many.wall_s:6.2f} s wall, {many.cpu_s:5.2f} s tool CPU, "
                  f"{many.sim_cpu_s:5.2f} s simulated-host CPU, {fleet['ssh_round_trips']} SSH round trips "
                  f"({fleet['ssh_round_trips'] / args.hosts:.1f}/host)")
            floor = many.sim_cpu_s / (os.cpu_count() or 1)
            print(f"  the simulated hosts alone need {floor:.1f} s of the machine's {os.cpu_count()} cores for "
                  f"{args.hosts} hosts ({floor / one.wall_s:.2f}x the 1-host wall time) before the tool runs at all")
            print(f"  wall ratio {args.hosts}/1: {many.wall_s / one.wall_s:.2f}x   "
                  f"(goal <= 4x on {os.cpu_count()} cores, issue 24)")
            print(f"  tool CPU per extra host: {(many.cpu_s - one.cpu_s) / extra:.3f} s   (goal <= 0.15 s)")
            print(f"  engine: {engine['workers']} workers, peak {engine['peak_running']} running, peak "
                  f"{engine['peak_threads']} threads (baseline {engine['baseline_threads']}), peak "
                  f"{engine['peak_open_sockets']} open sockets")
            peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            print(f"  memory: deploy process peak RSS {peak_mib:.0f} MiB (largest run so far); simulated hosts "
                  f"{sim_pss_mib(root):.0f} MiB PSS after the runs")
            per_host = sorted(h["duration_s"] for h in many.doc["hosts"])
            print(f"  per-host durations in the fleet run: min {per_host[0]:.2f} s, median "
                  f"{per_host[len(per_host) // 2]:.2f} s, max {per_host[-1]:.2f} s")
            if args.baseline is not None:
                compare(env.env, names, args.baseline, args.pairs)
            if args.separate:
                wall, cpu = separate(env.env, names)
                print(f"  {args.hosts} separate processes at once: {wall:.2f} s wall ({wall / one.wall_s:.2f}x), "
                      f"{cpu:.2f} s CPU ({(cpu - one.cpu_s) / extra:.3f} s per extra host)")
        finally:
            sim_down(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
