"""Issue 40's cost figure: what publishing the metrics costs a converged `deploy up`.

    python tests/perf/publish_cost.py [--runs 7] [--reps 50]

Starts one simulated host from the site template (sim-N, N from DEPLOY_SIM_FIRST, default 94), converges it, then:

1. `--runs` converged `up --skip-bench` runs: their SSH round trips (`totals.ssh_round_trips`), wall time, and the
   unlock step (the round trip that releases the lock and publishes), each with what its `details.metrics` said;
2. on the host, the exact publish lines that run (`monitoring.publish.publish_script` over the host's own
   deploy.prom and carried state, as the unlock script runs them: sourced in its shell) `--reps` times against
   an empty loop of the same length: the wall and CPU (user+sys, bash's `time`) that publishing adds per run.

The watchdog timer publishes nothing (docs/monitoring.md says why), so its publishing cost is 0 by construction;
its own CPU per check is tests/perf/watchdog_figures.py's. A measurement: nothing is asserted. Run as root.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from one_host import template_host

from orchestrator.monitoring.publish import PROM_PATH, STATE_PATH, publish_script
from tests.e2e.conftest import DeployEnv


def converged_runs(env: DeployEnv, runs: int) -> None:
    walls, unlocks, trips, said = [], [], set(), set()
    for _ in range(runs):
        began = time.monotonic()
        res = env.run("--json", "up", "host", env.host, "--skip-bench")
        walls.append(time.monotonic() - began)
        doc = res.json
        assert res.rc == 0, res.text
        trips.add(doc["totals"]["ssh_round_trips"])
        step = next(s for s in doc["steps"] if s["name"] == "unlock")
        unlocks.append(step["duration_s"])
        said.add(str(step.get("details", {}).get("metrics")))
    print(f"converged up --skip-bench x{runs}: round trips {sorted(trips)}, wall median "
          f"{statistics.median(walls):.2f} s, unlock step (lock release + publish) median "
          f"{statistics.median(unlocks) * 1000:.0f} ms; details.metrics: {sorted(said)}")


def host_side(env: DeployEnv, reps: int) -> None:
    prom = env.ssh(f"cat {shlex.quote(PROM_PATH)}")
    state = env.ssh(f"cat {shlex.quote(STATE_PATH)}")
    assert prom.rc == 0 and state.rc == 0, prom.text + state.text
    script = publish_script(prom.stdout, state.stdout)
    put = env.ssh(f"printf '%s' {shlex.quote(script)} > /tmp/deploy-publish-cost.sh")
    assert put.rc == 0, put.text

    def timed(body: str) -> tuple[float, float]:
        res = env.ssh(f"TIMEFORMAT='%R %U %S'; time ( for i in $(seq {reps}); do {body}; done ) 2>&1", timeout=300)
        real, user, sys_ = (float(x) for x in res.stdout.split()[-3:])
        return real, user + sys_

    with_real, with_cpu = timed(". /tmp/deploy-publish-cost.sh")
    base_real, base_cpu = timed(":")
    env.ssh("rm -f /tmp/deploy-publish-cost.sh")
    print(f"publish lines on the host ({len(prom.stdout)} B deploy.prom, {len(state.stdout)} B state), x{reps}: "
          f"{(with_real - base_real) / reps * 1000:.1f} ms wall and {(with_cpu - base_cpu) / reps * 1000:.1f} ms "
          "CPU per publish, inside the unlock round trip (no round trip of its own)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    with template_host(1.0, default_first=94) as (_info, env, _root):
        res = env.run("--json", "up", "host", env.host, "--skip-bench")
        assert res.rc == 0, res.text
        converged_runs(env, args.runs)
        host_side(env, args.reps)
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
