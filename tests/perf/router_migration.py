"""Figure: a running sglang-router 0.3.2 migrated to smg 1.13.0 by `deploy up` under a constant client load,
through the router's public address (issue 37): failed requests, truncated streams, and each phase's duration.

    python tests/perf/router_migration.py [--hosts 2] [--first 160] [--streams 4] [--before-s 20]

Starts N simulated hosts on their own root, converges them with the router (0.3.2, `router.runs_on` the first
host: its CT 120) managed by `up`, starts the clients (`--streams` streaming chat completions, each 32 tokens, as
tests/perf/fleet_canary_roll.py's; two non-streaming, tests/e2e/test_fleet_roll.py's Client), lets them run
`--before-s` seconds, changes `router.package` to smg and runs `deploy up group fleet --skip-bench --skip-weights`,
then keeps the load 10 s more. Prints the requests, failures (a stream without `[DONE]` counts as truncated), each
with the second it happened, and the router's lines of the run (each phase, its duration), timed the same
way. Nothing is asserted: a measurement. Run as root (the simulator's containers).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from fleet_canary_roll import Clients, Phase  # noqa: E402  (this directory: the script's own)

from simulator.manager.lifecycle import sim_down, sim_up  # noqa: E402
from tests.e2e import site_template  # noqa: E402
from tests.e2e.conftest import make_fleet_env  # noqa: E402
from tests.e2e.test_fleet_roll import Client  # noqa: E402

ROUTER_YAML = "router:\n  package: {package}\n  runs_on: {host}\n  policy: round_robin\n  workers: fleet\n"
TRUNCATED = "stream ended without [DONE]"


class Timed(list[str]):
    """A failure list whose entries say when they happened, in seconds from the migration's start."""

    def __init__(self, t0: float) -> None:
        super().__init__()
        self.t0 = t0

    def append(self, item: str) -> None:
        super().append(f"{time.monotonic() - self.t0:6.1f} s {item}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--first", type=int, default=int(os.environ.get("DEPLOY_SIM_FIRST", "160")))
    ap.add_argument("--streams", type=int, default=4, help="concurrent streaming clients")
    ap.add_argument("--before-s", type=float, default=20.0, help="seconds of load before the migration")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="deploy-migration-perf-") as tmp:
        root = Path(tmp) / "sim"
        infos = sim_up(root, hosts=args.hosts, first=args.first, time_scale=5.0)
        try:
            env_dir = Path(tmp) / "env"
            env_dir.mkdir()
            names = [i.name for i in infos]
            volids = {site_template.install(Path(i.host_dir)) for i in infos}
            env = make_fleet_env(infos, env_dir, {"fleet": names}, ostemplate=volids.pop())
            (env.inventory / "router.yaml").write_text(ROUTER_YAML.format(package="sglang-router", host=names[0]))
            up = env.run("--json", "up", "group", "fleet", "--skip-bench", "--skip-weights", timeout=1800)
            if up.rc != 0:
                print(up.text[-3000:])
                return 1
            base = json.loads(up.stdout)["router"]["url"]
            print(f"  {args.hosts} hosts behind sglang-router 0.3.2 at {base} (CT 120 of {names[0]})")
            streams = Clients(base, args.streams)
            threads = streams.start()
            with Client(base) as chats:
                time.sleep(args.before_s)
                t0 = time.monotonic()
                during = streams.phase = Phase(failed=Timed(t0))
                chats.failed = Timed(t0)
                chats_before = chats.ok
                (env.inventory / "router.yaml").write_text(ROUTER_YAML.format(package="smg", host=names[0]))
                env.env["PYTHONUNBUFFERED"] = "1"  # each line as it is printed: the times are the phases'
                proc = env.popen("up", "group", "fleet", "--skip-bench", "--skip-weights")
                assert proc.stdout is not None
                lines = [f"{time.monotonic() - t0:6.1f} s | {line.rstrip()}" for line in proc.stdout]
                rc = proc.wait()
                took = time.monotonic() - t0
                time.sleep(10)
                streams.stop.set()
                for t in threads:
                    t.join(timeout=150)
            truncated = sum(1 for f in during.failed if TRUNCATED in f)
            print(f"  deploy up group fleet (router.package: smg): exit {rc} in {took:.1f} s; load average "
                  f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
            print(f"  streaming: {len(during.ttft_s) + len(during.failed)} requests from the migration's start, "
                  f"{len(during.failed) - truncated} failed, {truncated} truncated")
            print(f"  non-streaming: {chats.ok - chats_before} answered, {len(chats.failed)} failed")
            for f in (during.failed + chats.failed)[:10]:
                print(f"  failed (seconds from the start): {f}")
            for line in lines:
                if "router:" in line:
                    print(f"  {line}")
        finally:
            sim_down(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
