"""Issue 22's correctness-gate figures: the catch rate over rolls whose server answers corrupted output (garbage,
zeros, nan, repeat), false reverts over clean rolls whose server drifts slightly, and the time the gate adds.

Starts a simulated host on its own root (sim-N, N from DEPLOY_SIM_FIRST, default 93), converges it once from the
site template (bench skipped), then rolls: each corrupt roll sets `max-running-requests` to a value of its own and
the `output=` fault matches only that value's command line, so only the candidate answers wrongly; it counts as
caught when the roll exits 1 at step `correctness` and the previous release is current again. Each clean roll
changes `num-continuous-decode-steps` with a server-wide `drift=` between 0.02 and 0.08 (a different value each
roll, so every candidate answers a little differently from its reference); a false revert is any clean roll that
does not keep its candidate. The time the gate adds is the `correctness` step's duration in each kept roll's
--json report. Nothing is asserted: this is a measurement. Run as root:
`python tests/perf/gate_figures.py [--corrupt 20] [--clean 20]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from simulator.manager.faults import set_ct_faults  # noqa: E402
from simulator.manager.lifecycle import sim_down, sim_up  # noqa: E402
from tests.e2e import site_template  # noqa: E402
from tests.e2e.conftest import make_env  # noqa: E402

CORRUPTIONS = ("garbage", "zeros", "nan", "repeat")


def deploy(argv: list[str], env: dict[str, str]) -> tuple[float, int, dict[str, Any]]:
    """(wall s, exit code, the --json document) of one `deploy` run."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "--json", *argv], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=600)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        doc = {"unparsed": (proc.stdout + proc.stderr)[-400:]}
    return time.monotonic() - start, proc.returncode, doc


def current(info: Any, env: dict[str, str]) -> str | None:
    _, rc, doc = deploy(["status", "host", info.name], env)
    return str(doc.get("release")) if rc == 0 else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corrupt", type=int, default=20, help="rolls with an injected corruption")
    parser.add_argument("--clean", type=int, default=20, help="clean rolls with drift")
    args = parser.parse_args()
    caught: Counter[str] = Counter()
    tried: Counter[str] = Counter()
    misses: list[str] = []
    kept, reverts, gate_s, roll_s = 0, [], [], []
    examples: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="deploy-perf-") as tmp:
        root = Path(tmp) / "sim"
        (info,) = sim_up(root, hosts=1, first=int(os.environ.get("DEPLOY_SIM_FIRST", "93")), time_scale=5.0)
        try:
            env = make_env(info, Path(tmp), site_template.install(Path(info.host_dir)))
            _, rc, doc = deploy(["up", "host", info.name, "--skip-bench"], env.env)
            if rc != 0:
                print(f"up: exit {rc}: {doc}")
                return 1
            for i in range(args.corrupt):
                kind = CORRUPTIONS[i % len(CORRUPTIONS)]
                value = 100 + i  # three digits: the match never hits another roll's value
                before = current(info, env.env)
                set_ct_faults(root, info.name, 120, output=kind, drift=0, match=f"--max-running-requests {value}")
                _, rc, doc = deploy(["roll", "host", info.name, "--set", f"max-running-requests={value}",
                                     "--skip-bench"], env.env)
                tried[kind] += 1
                back = current(info, env.env) == before
                if rc == 1 and doc.get("step") == "correctness" and back:
                    caught[kind] += 1
                    examples.setdefault(kind, f"{doc.get('what')}\n    fix: {doc.get('fix')}")
                else:
                    misses.append(f"{kind}: exit {rc}, step {doc.get('step')}, rolled back {back}")
            set_ct_faults(root, info.name, 120, output=None, match=None)
            for i in range(args.clean):
                drift = 0.02 + 0.06 * ((i * 7) % 11) / 10
                set_ct_faults(root, info.name, 120, drift=round(drift, 3))
                wall, rc, doc = deploy(["roll", "host", info.name, "--set",
                                        f"num-continuous-decode-steps={2 + i % 6}", "--skip-bench"], env.env)
                if rc == 0:
                    kept += 1
                    roll_s.append(wall)
                    gate_s += [s["duration_s"] for s in doc.get("steps", []) if s.get("name") == "correctness"]
                else:
                    reverts.append(f"drift {drift:.3f}: exit {rc}: {str(doc.get('what', doc))[:200]}")
        finally:
            sim_down(root)
    total = sum(tried.values())
    print(f"correctness gate on a simulated host (time_scale 5), {total} corrupt and {args.clean} clean rolls")
    print(f"caught and rolled back   {sum(caught.values())}/{total}  "
          + "  ".join(f"{k} {caught[k]}/{tried[k]}" for k in CORRUPTIONS))
    for miss in misses:
        print(f"  missed: {miss}")
    for kind, what in examples.items():
        print(f"  {kind}: {what}")
    print(f"false reverts (drift)    {len(reverts)}/{args.clean}   kept {kept}/{args.clean}")
    for revert in reverts:
        print(f"  reverted: {revert}")
    if gate_s:
        print(f"time the gate adds       median {statistics.median(gate_s):.2f} s, max {max(gate_s):.2f} s "
              f"(the correctness step of {len(gate_s)} kept rolls; a whole roll --skip-bench: median "
              f"{statistics.median(roll_s):.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
