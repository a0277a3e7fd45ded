"""Issue 35's stack figures: a rollback to a release on another stack against a flag-only rollback, and a failed
stack upgrade against one server start.

    python tests/perf/stack_rollback.py [--runs 2] [--time-scale 5]

Starts a simulated host (sim-N, N from DEPLOY_SIM_FIRST, default 93) from the site template and makes three
releases: R1 (`up`, sglang 0.5.12.post1 in the profile's venv), R2 (`roll --set max-running-requests=128`, same
stack) and R3 (the profile moved to 0.5.23 with the renamed flags, `up`: a new stack under /opt/deploy/stacks).
Then `--runs` times the cycle R3→R2 (stack), R2→R1 (flags), R1→R2 (flags), R2→R3 (stack) with `deploy rollback
--to`, each timed from the command's start to its exit (it exits once the release is healthy and smoke-checked),
and checks that no rollback changed the stacks directory (no pip run). Last, from R2 with the new release's server
dying (`fatal=unsupported-arch match=dsa-decode`), `up` is timed until it exits with R2 serving again. Nothing is
asserted: a measurement. Run as root.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from one_host import template_host  # noqa: E402 - beside this script (tests/perf is sys.path[0])

from tests.e2e.conftest import DeployEnv  # noqa: E402

RENAMED = {"nsa-prefill-backend": None, "nsa-decode-backend": None,
           "dsa-prefill-backend": "trtllm", "dsa-decode-backend": "trtllm"}
STACKS = "ls -l --time-style=+%s /opt/deploy/stacks; cat /opt/deploy/stacks/*.json"


def current(env: DeployEnv) -> str:
    return env.ct("readlink /var/lib/deploy/current").stdout.strip().rsplit("/", 1)[-1]


def step_s(doc: dict, name: str) -> float:
    return float(next(s["duration_s"] for s in doc["steps"] if s["name"] == name))


def timed_rollback(env: DeployEnv, to: str) -> float:
    start = time.monotonic()
    res = env.run("--json", "rollback", "host", env.host, "--to", to, timeout=900)
    took = time.monotonic() - start
    if res.rc != 0 or current(env) != to:
        raise SystemExit(f"rollback to {to}: exit {res.rc}\n{res.text[-3000:]}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--time-scale", type=float, default=5.0)
    args = parser.parse_args()
    with template_host(args.time_scale) as (info, env, _root):
        up = env.run("--json", "up", "host", info.name, "--skip-bench", timeout=900)
        r1 = current(env)
        roll = env.run("--json", "roll", "host", info.name, "--set", "max-running-requests=128", "--skip-bench",
                       timeout=900)
        r2 = current(env)
        env.set_profile(sglang_version="0.5.23", flags=RENAMED)
        upgrade = env.run("--json", "up", "host", info.name, "--skip-bench", timeout=900)
        r3 = current(env)
        if up.rc or roll.rc or upgrade.rc or len({r1, r2, r3}) != 3:
            print(f"setup failed: up {up.rc}, roll {roll.rc}, upgrade {upgrade.rc}\n{upgrade.text[-3000:]}")
            return 1
        build_s = step_s(upgrade.json, "sglang_install")
        stacks = env.ct(STACKS).stdout
        flag_s: list[float] = []
        stack_s: list[float] = []
        for _ in range(args.runs):
            stack_s.append(timed_rollback(env, r2))
            flag_s.append(timed_rollback(env, r1))
            flag_s.append(timed_rollback(env, r2))
            stack_s.append(timed_rollback(env, r3))
        untouched = env.ct(STACKS).stdout == stacks
        timed_rollback(env, r2)
        env.ct_faults(fatal="unsupported-arch", match="dsa-decode")
        start = time.monotonic()
        failed = env.run("--json", "up", "host", info.name, "--skip-bench", timeout=900)
        failed_s = time.monotonic() - start
        env.ct_faults(fatal=None, match=None)
        healthy = env.ct("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/health").stdout
        after = current(env)
        back = re.search(r"healthy again after (\d+) s", failed.json.get("what", ""))
        one_start_s = step_s(upgrade.json, "health")
    print(f"{info.name}: releases {r1} (0.5.12.post1, profile venv), {r2} (flags), {r3} (0.5.23, own stack); "
          f"time_scale {args.time_scale:g}")
    print(f"building the 0.5.23 stack beside the running server (sglang_install): {build_s:.1f} s")
    for label, values in (("flag-only rollback (same stack)", flag_s), ("rollback to another stack", stack_s)):
        print(f"{label:<36}median {statistics.median(values):6.2f} s   all: {' '.join(f'{x:.2f}' for x in values)}")
    print(f"ratio stack / flag-only: {statistics.median(stack_s) / statistics.median(flag_s):.2f}; stacks dir "
          f"{'unchanged (no pip run)' if untouched else 'CHANGED'} across the rollbacks")
    print(f"failed stack upgrade: up exit {failed.rc} after {failed_s:.1f} s, current {after} "
          f"({'R2' if after == r2 else 'NOT R2'}), /health {healthy}; rollback healthy after "
          f"{back[1] if back else '?'} s; one server start (health step of the upgrade's up) {one_start_s:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
