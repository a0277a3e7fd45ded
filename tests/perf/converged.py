"""Issue 24's figures: the facts round trip, a converged `up --skip-bench` (wall and the client's own CPU) and
`deploy --help`, each the median of several runs.

Starts a simulated host on its own root (sim-N, N from DEPLOY_SIM_FIRST, default 92), converges it once from the
site template, then times the converged runs. The facts round trip is the `lock` step of `--json` (the lease and
every host and container fact in one SSH round trip). Client CPU is the user + system time of the `deploy`
process alone (its children's rusage), not the simulated host's. Nothing is asserted: this is a measurement.
Run as root: `python tests/perf/converged.py [--runs 5] [--baseline DIR]`.

`--baseline DIR` (another checkout, e.g. a `git worktree add --detach DIR main`) also times that tree's `deploy`
against the same simulated host, alternating run by run with this tree's, so a machine whose load drifts (shared
cores) weighs on both alike; the figures of both are printed, before (baseline) and after (this tree).
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
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from simulator.manager.lifecycle import sim_down, sim_up  # noqa: E402
from tests.e2e import site_template  # noqa: E402
from tests.e2e.conftest import make_env  # noqa: E402


def timed(argv: list[str], env: dict[str, str], tree: Path = REPO) -> tuple[float, float,
                                                                        subprocess.CompletedProcess[str]]:
    """(wall s, the process's own CPU s, result) of one `deploy` run of the checkout `tree` (`-m` finds the
    package in the working directory first)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *argv], capture_output=True, text=True, env=env,
                          cwd=tree)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc


@dataclass
class Figures:
    """One tree's runs."""

    tree: Path
    facts: list[float] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    helps: list[float] = field(default_factory=list)

    def converged(self, up: list[str], env: dict[str, str]) -> str | None:
        wall, cpu, proc = timed(up, env, self.tree)
        if proc.returncode != 0:
            return f"converged up ({self.tree}): exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
        steps = {s["name"]: s for s in json.loads(proc.stdout)["steps"]}
        self.walls.append(wall)
        self.cpus.append(cpu)
        self.facts.append(steps["lock"]["duration_s"])
        return None

    def report(self, label: str) -> None:
        def line(what: str, xs: list[float]) -> None:
            print(f"{what:38s}{statistics.median(xs):6.2f} s   all: " + " ".join(f"{x:.2f}" for x in xs))

        print(f"{label}: {self.tree}")
        line("facts round trip (lock step)", self.facts)
        line("converged up --skip-bench, wall", self.walls)
        line("converged up --skip-bench, client CPU", self.cpus)
        line("deploy --help", self.helps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout to time alternately")
    args = parser.parse_args()
    runs = args.runs
    trees = [Figures(REPO)] + ([Figures(args.baseline.resolve())] if args.baseline else [])
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
            for _ in range(runs):
                for fig in reversed(trees):  # the baseline first in each round
                    failed = fig.converged(up, env.env)
                    if failed:
                        print(failed)
                        return 1
            for _ in range(runs):
                for fig in reversed(trees):
                    fig.helps.append(timed(["--help"], env.env, fig.tree)[0])
        finally:
            sim_down(root)
    print(f"median of {runs} runs on a simulated host (time_scale 5)")
    for fig, label in zip(reversed(trees), ("before (baseline)", "after") if args.baseline else ("this tree",),
                          strict=True):
        fig.report(label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
