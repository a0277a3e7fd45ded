"""Performance figures from the tool's own measurements: per-step durations and SSH round trips.

Starts a simulated host on its own root and addresses (127.0.0.91), runs `deploy up` (from nothing), `deploy up`
again (converged), `status`, `verify-p2p` and `bench`, and prints what each step took. Nothing is asserted:
this is a measurement; the numbers come from `--json`. Run as root: `python tests/perf/roundtrips.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from simulator.manager.lifecycle import sim_down, sim_up  # noqa: E402
from tests.e2e import site_template  # noqa: E402
from tests.e2e.conftest import make_env  # noqa: E402


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="deploy-perf-") as tmp:
        root = Path(tmp) / "sim"
        first = int(os.environ.get("DEPLOY_SIM_FIRST", "90"))
        (info,) = sim_up(root, hosts=1, first=first, time_scale=5.0)
        try:  # the container starts from a provisioned site template, as in the e2e tests
            env = make_env(info, Path(tmp), site_template.install(Path(info.host_dir)))
            runs = [("up (from nothing)", ["up", "host", info.name, "--skip-bench"]),
                    ("up (converged)", ["up", "host", info.name, "--skip-bench"]),
                    ("status", ["status", "host", info.name]),
                    ("verify-p2p", ["verify-p2p", "host", info.name]),
                    ("doctor", ["doctor", "host", info.name]),
                    ("bench e2e preset", ["bench", "host", info.name])]
            print(f"{'command':<20} {'wall s':>7} {'ssh rt':>6} {'api':>4}  steps (seconds / round trips)")
            for label, args in runs:
                start = time.monotonic()
                proc = subprocess.run([sys.executable, "-m", "orchestrator", "--json", *args], capture_output=True,
                                      text=True, env=env.env, cwd=REPO)
                wall = time.monotonic() - start
                if proc.returncode != 0:
                    print(f"{label}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
                    return 1
                doc = json.loads(proc.stdout)
                totals = doc.get("totals", {})
                steps = doc.get("steps", [])
                detail = ", ".join(f"{s['name']} {s['duration_s']:.2f}/{s['ssh_round_trips']}" for s in steps)
                print(f"{label:<20} {wall:7.2f} {totals.get('ssh_round_trips', '-'):>6} "
                      f"{totals.get('api_calls', '-'):>4}  {detail}")
                if "ssh_round_trips_before_smoke" in totals:
                    print(f"{'':<20} round trips before smoke: {totals['ssh_round_trips_before_smoke']}")
        finally:
            sim_down(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
