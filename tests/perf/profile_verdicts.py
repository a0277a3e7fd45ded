"""Issue 52's figures: the verdict accuracy of `deploy bench --profile` per simulator kernel shape, and the profiling
cost (bench throughput with and without the profiled window).

    python tests/perf/profile_verdicts.py [--windows 40] [--steps 4] [--preset quick] [--time-scale 5]

Starts a simulated host (sim-N, N from DEPLOY_SIM_FIRST, default 95) from the site template, `up --skip-bench`,
then for each shape sets the container's fault through the real CLI (`deploy sim fault HOST --ct 120
kernel_shape=…`) and runs `deploy bench host HOST --preset P --profile STEPS --json` WINDOWS times; a window is
right when its verdict is the shape's. Then the cost: WINDOWS/4 plain runs and as many profiled ones, interleaved,
their mean output throughput and the difference. Prints the figures; nothing is asserted (a measurement).
Run as root.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from one_host import template_host  # noqa: E402 - beside this script (tests/perf is sys.path[0])

from tests.e2e.conftest import DeployEnv  # noqa: E402

EXPECTED = {"collective": "collective-bound", "moe": "moe-bound", "attention": "attention-bound",
            "host": "host-bound", "slow_rank": "rank-imbalanced"}


def bench(env: DeployEnv, preset: str, steps: int | None) -> dict:
    args = ["--json", "bench", "host", env.host, "--preset", preset, *(["--profile", str(steps)] if steps else [])]
    res = env.run(*args, timeout=900)
    if res.rc != 0:
        journal = env.ct("journalctl -u sglang --no-pager -n 40 -o short-precise")
        raise SystemExit(f"bench exit {res.rc}\n{res.text[-3000:]}\nthe server's journal:\n{journal.stdout}")
    (run,) = res.json["runs"]
    return run


def fault(env: DeployEnv, root: Path, *knobs: str) -> None:
    res = env.run("sim", "fault", env.host, "--ct", "120", *knobs, "--root", str(root))
    if res.rc != 0:
        raise SystemExit(f"sim fault: {res.text}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=40)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--preset", default="quick")
    parser.add_argument("--time-scale", type=float, default=5.0)
    parser.add_argument("--shapes", default=",".join(EXPECTED), help="comma-separated shapes to measure ('' none)")
    parser.add_argument("--cost-runs", type=int, default=None, help="plain and profiled runs each (default W/4)")
    parser.add_argument("--show", default=None, metavar="SHAPE",
                        help="also print one text run of `bench --profile` with this shape (a docs example)")
    args = parser.parse_args()
    with template_host(args.time_scale, default_first=95) as (info, env, root):
        up = env.run("--json", "up", "host", env.host, "--skip-bench", timeout=1800)
        if up.rc != 0:
            raise SystemExit(f"up exit {up.rc}\n{up.text[-3000:]}")
        print(f"{info.name}: time_scale {args.time_scale:g}, preset {args.preset}, {args.steps} decode steps per "
              f"window, {args.windows} windows per shape")
        for shape in [x for x in args.shapes.split(",") if x]:
            want = EXPECTED[shape]
            fault(env, root, f"kernel_shape={shape}", "slow_rank=none")
            t0 = time.monotonic()
            seen: dict[str, int] = {}
            for _ in range(args.windows):
                prof = bench(env, args.preset, args.steps)["profile"]
                code = (prof.get("verdict") or {}).get("code") or f"none ({prof.get('problem')})"
                seen[code] = seen.get(code, 0) + 1
            right = seen.get(want, 0)
            print(f"  {shape:<10} → {want:<17} {right}/{args.windows} right ({100 * right / args.windows:.0f} %), "
                  f"{(time.monotonic() - t0) / args.windows:.1f} s per window; verdicts {seen}")
        if args.show:
            fault(env, root, f"kernel_shape={args.show}", "slow_rank=none")
            shown = env.run("bench", "host", env.host, "--preset", args.preset, "--profile", str(args.steps),
                            timeout=900)
            print(f"$ deploy bench host {env.host} --preset {args.preset} --profile {args.steps}\n{shown.stdout}")
        fault(env, root, "kernel_shape=none", "slow_rank=none")
        plain, profiled = [], []
        for _ in range(args.cost_runs or max(args.windows // 4, 2)):
            plain.append(bench(env, args.preset, None)["result"]["output_throughput"])
            profiled.append(bench(env, args.preset, args.steps)["result"]["output_throughput"])
        p, q = statistics.mean(plain), statistics.mean(profiled)
        print(f"  cost: output tok/s without --profile {p:.1f} (n={len(plain)}, sd {statistics.stdev(plain):.1f}), "
              f"with {q:.1f} (n={len(profiled)}, sd {statistics.stdev(profiled):.1f}): {100 * (q - p) / p:+.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
