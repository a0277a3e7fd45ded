"""Issue 20's figure: how long a host reboot takes until the server serves again, with no deploy command.

Starts a simulated host on its own root (sim-N, N from DEPLOY_SIM_FIRST, default 93), converges it once from the
site template (so `up` leaves deploy-nvidia-nodes.service), then reboots it `--runs` times with `deploy sim reboot`
and polls the server's /health inside the container (`pct exec` over SSH, as an operator would) until it answers
200. Printed per run: the reboot itself (guests down, daemons back, the boot unit, pve-guests; `sim reboot`'s own
wall time) and the time from the reboot's start until the server serves. The server's start is the simulated
model load, which follows `--time-scale` (default 5, `deploy sim up`'s). Nothing is asserted: this is a
measurement. Run as root: `python tests/perf/reboot_serve.py [--runs 3]`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from one_host import template_host  # noqa: E402 - beside this script (tests/perf is sys.path[0])

HEALTH = "pct exec 120 -- curl -s -o /dev/null -w '%{http_code}' -m 3 http://127.0.0.1:8000/health"
SERVE_LIMIT_S = 600.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--time-scale", type=float, default=5.0)
    args = parser.parse_args()
    with template_host(args.time_scale) as (info, env, root):
        up = env.run("up", "host", info.name, "--skip-bench", timeout=900)
        if up.rc != 0:
            print(f"up: exit {up.rc}\n{up.text}")
            return 1
        reboots, serves = [], []
        for _ in range(args.runs):
            start = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "orchestrator", "sim", "reboot", info.name, "--root",
                                   str(root)], capture_output=True, text=True, env=env.env, cwd=REPO)
            reboots.append(time.monotonic() - start)
            if proc.returncode != 0 or "failed" in proc.stdout:
                print(f"sim reboot: exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
                return 1
            while env.ssh(HEALTH).stdout.strip() != "200":
                if time.monotonic() - start > SERVE_LIMIT_S:
                    print(f"the server did not serve within {SERVE_LIMIT_S:.0f} s of the reboot")
                    return 1
                time.sleep(0.5)
            serves.append(time.monotonic() - start)
    print(f"median of {args.runs} reboots of a converged simulated host (time_scale {args.time_scale:g})")
    rows = (("deploy sim reboot (guests down, boot unit, pve-guests)", reboots),
            ("reboot start until /health answers 200", serves))
    for label, values in rows:
        print(f"{label:<56}{statistics.median(values):7.2f} s   all: {' '.join(f'{x:.2f}' for x in values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
