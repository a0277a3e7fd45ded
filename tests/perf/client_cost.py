"""Issue 41's breakdown: where the client's wall and CPU go in a converged `up --skip-bench`, `status` and `plan`.

Starts one simulated host from the site template (tests/perf/one_host.py; sim-N, N from DEPLOY_SIM_FIRST), converges
it once, then, for each command, the median of --runs runs of:
- the command as the operator runs it: wall, and client CPU (user + system of the `deploy` process, its rusage);
- the same under tests/perf/client_probe.py: wall and CPU per phase (interpreter start, imports and CLI parsing, the
  inventory's load and validation, rendering, the SSH connect and key exchange, each round trip, the report, the
  rest of the command body, and the process's exit);
- once under `python -X importtime`: the modules imported, their total, and the top-level packages that cost most.
Prints the tables and the load average. Nothing is asserted: this is a measurement. Run as root:
    python tests/perf/client_cost.py [--runs 5]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ansible_compare import MAX_RUNS, timed  # noqa: E402
from one_host import template_host  # noqa: E402

PROBE = REPO / "tests" / "perf" / "client_probe.py"
IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)")


def import_totals(stderr: str) -> tuple[int, float, list[tuple[str, float, int]]]:
    """(modules, their self time in s, [(top-level package, s, modules)] costliest first) from -X importtime."""
    cost: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for match in IMPORT_LINE.finditer(stderr):
        top = match.group(2).split(".")[0]
        cost[top] += int(match.group(1))
        count[top] += 1
    return sum(count.values()), sum(cost.values()) / 1e6, [(k, v / 1e6, count[k]) for k, v in cost.most_common(12)]


def probe_rows(argv: list[str], env: dict[str, str], out: Path) -> tuple[dict[str, tuple[float, float]], float]:
    """One probed run: {phase: (wall, cpu)} with round trips numbered in order, and the run's whole wall."""
    spawned = time.time()
    run = timed([sys.executable, str(PROBE), str(out), *argv], env, REPO)
    if run.proc.returncode != 0:
        raise SystemExit(f"probe {argv}: exit {run.proc.returncode}\n{run.proc.stdout}{run.proc.stderr}")
    got = json.loads(out.read_text())
    rows = {name: (wall, cpu) for name, wall, cpu in got["rows"]}
    start = "interpreter start (until this file ran)"
    rows[start] = (got["t0_wall"] - spawned, rows[start][1])
    cpu_in = sum(cpu for _, cpu in rows.values())
    rows["process exit (the rusage's rest)"] = (max(0.0, spawned + run.wall - got["end_wall"]),
                                                max(0.0, run.cpu - cpu_in))
    return rows, run.wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help=f"runs of each (1..{MAX_RUNS})")
    args = parser.parse_args()
    if not 1 <= args.runs <= MAX_RUNS:
        parser.error(f"--runs must be within 1..{MAX_RUNS}")
    loads = [os.getloadavg()[0]]
    with template_host(time_scale=5.0, default_first=101) as (info, env, root):
        commands = {"up --skip-bench": ["--json", "up", "host", info.name, "--skip-bench"],
                    "status": ["--json", "status", "host", info.name],
                    "plan": ["--json", "plan", "host", info.name]}
        deploy = [sys.executable, "-m", "orchestrator"]
        first = timed([*deploy, *commands["up --skip-bench"]], env.env, REPO)
        if first.proc.returncode != 0:
            print(f"first up: exit {first.proc.returncode}\n{first.proc.stdout}{first.proc.stderr}")
            return 1
        plain: dict[str, list[tuple[float, float]]] = {c: [] for c in commands}
        probed: dict[str, list[dict[str, tuple[float, float]]]] = {c: [] for c in commands}
        for _ in range(args.runs):  # interleaved, so a drifting load weighs on every command alike
            for label, argv in commands.items():
                run = timed([*deploy, *argv], env.env, REPO)
                if run.proc.returncode != 0:
                    print(f"{label}: exit {run.proc.returncode}\n{run.proc.stdout}{run.proc.stderr}")
                    return 1
                plain[label].append((run.wall, run.cpu))
                probed[label].append(probe_rows(argv, env.env, root.parent / "probe.json")[0])
            loads.append(os.getloadavg()[0])
        imports = {label: timed([sys.executable, "-X", "importtime", "-m", "orchestrator", *argv], env.env, REPO)
                   for label, argv in commands.items()}
    print(f"median of {args.runs} runs each on one simulated host ({info.name}, time_scale 5)")
    for label in commands:
        walls, cpus = zip(*plain[label], strict=True)
        print(f"\ndeploy {label}: wall {statistics.median(walls):.3f} s, client CPU {statistics.median(cpus):.3f} s")
        print(f"  {'phase (probed run)':62s}{'wall s':>8s}{'CPU s':>8s}")
        names = list(dict.fromkeys(n for run in probed[label] for n in run))
        for name in names:
            vals = [run.get(name, (0.0, 0.0)) for run in probed[label]]
            wall, cpu = (statistics.median(v[i] for v in vals) for i in (0, 1))
            print(f"  {name:62s}{wall:8.3f}{cpu:8.3f}")
        count, total, top = import_totals(imports[label].proc.stderr)
        print(f"  imports (-X importtime, one run): {count} modules, {total:.3f} s; costliest packages:")
        print("    " + ", ".join(f"{name} {s * 1000:.0f} ms/{n}" for name, s, n in top))
    print("\nload average (1 min) before and after each round: " + " ".join(f"{lo:.2f}" for lo in loads))
    print("commands: DEPLOY_INVENTORY=… DEPLOY_STATE_DIR=… python -m orchestrator " + " | ".join(
        " ".join(a if a != info.name else "H" for a in argv) for argv in commands.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
