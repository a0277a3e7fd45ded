"""Issue 24's figures: the facts round trip, a converged `up --skip-bench` (wall and the client's own CPU) and
`deploy --help`, each the median of several runs.

Starts a simulated host on its own root (sim-N, N from DEPLOY_SIM_FIRST, default 92), converges it once from the
site template, then times the converged runs. The facts round trip is the `lock` step of `--json` (the lease and
every host and container fact in one SSH round trip). Client CPU is the user + system time of the `deploy`
process alone (its children's rusage), not the simulated host's. Nothing is asserted: this is a measurement.
Run as root: `python tests/perf/converged.py [--runs 5]`.
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from simulator.manager import sim_down, sim_up  # noqa: E402
from tests.e2e import site_template  # noqa: E402
from tests.e2e.conftest import make_env  # noqa: E402


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall s, the process's own CPU s, result) of one `deploy` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *argv], capture_output=True, text=True, env=env,
                          cwd=REPO)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory(prefix="deploy-perf-") as tmp:
        root = Path(tmp) / "sim"
        (info,) = sim_up(root, hosts=1, first=int(os.environ.get("DEPLOY_SIM_FIRST", "92")), time_scale=5.0)
        try:
            env = make_env(info, Path(tmp), site_template.install(Path(info.host_dir)))
            up = ["--json", "up", "host", info.name, "--skip-bench"]
            _, _, first = timed(up, env.env)
            if first.returncode != 0:
                print(f"first up: exit {first.returncode}\n{first.stdout}{first.stderr}")
                return 1
            walls, cpus, facts = [], [], []
            for _ in range(runs):
                wall, cpu, proc = timed(up, env.env)
                if proc.returncode != 0:
                    print(f"converged up: exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
                    return 1
                steps = {s["name"]: s for s in json.loads(proc.stdout)["steps"]}
                walls.append(wall)
                cpus.append(cpu)
                facts.append(steps["lock"]["duration_s"])
            helps = [timed(["--help"], env.env)[0] for _ in range(runs)]
        finally:
            sim_down(root)
    print(f"median of {runs} runs on a simulated host (time_scale 5)")
    print(f"facts round trip (lock step)        {statistics.median(facts):6.2f} s   all: "
          + " ".join(f"{x:.2f}" for x in facts))
    print(f"converged up --skip-bench, wall     {statistics.median(walls):6.2f} s   all: "
          + " ".join(f"{x:.2f}" for x in walls))
    print(f"converged up --skip-bench, client CPU {statistics.median(cpus):4.2f} s   all: "
          + " ".join(f"{x:.2f}" for x in cpus))
    print(f"deploy --help                       {statistics.median(helps):6.2f} s   all: "
          + " ".join(f"{x:.2f}" for x in helps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
