"""Issue 22's watchdog figures, with the profile's DEFAULT watchdog settings (a check every 10 s, stall_s 30,
probe timeout 10 s, 3 restarts an hour):

1. stall → serving again: the stand-in stops serving after a few generations while /health stays 200
   (stall_after). A client in the container sends one small generation a second; the figure is the time from its
   first request that hangs to its first answer after the watchdog's restart (the restart's own time from the
   state file beside it). Goal: within 90 s. Repeated `--stalls` times (at most the budget, 3).
2. a long prefill is left alone: every prefill takes `--prefill-s` seconds (slow_prefill_s) but advances the
   counters; two clients keep the server busy for `--minutes` minutes. Goal: 0 restarts.

Starts a simulated host on its own root (sim-N, N from DEPLOY_SIM_FIRST, default 92), converges it from the site
template, prints the figures. Nothing is asserted: this is a measurement, bounded in time. Run as root:
`python tests/perf/watchdog_figures.py [--stalls 3] [--minutes 5] [--prefill-s 45]`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from simulator.manager.lifecycle import sim_down, sim_up  # noqa: E402
from tests.e2e import site_template  # noqa: E402
from tests.e2e.conftest import DeployEnv, make_env  # noqa: E402

STATE = "/var/lib/deploy/watchdog/state.json"
#: One small generation against the local server with the key deploy keeps in sglang.env (if any).
REQUEST = ("KEY=$(sed -n 's/^SGLANG_API_KEY=//p' /etc/sglang/sglang.env | tr -d '\"'); "
           "curl -s -o /dev/null -m {timeout} -w '%{{http_code}}' ${{KEY:+-H \"Authorization: Bearer $KEY\"}} "
           "-H 'Content-Type: application/json' -d '{body}' http://127.0.0.1:8000/generate")


def request(timeout: int, words: int = 2, new: int = 4) -> str:
    body = json.dumps({"text": " ".join(["w"] * words), "sampling_params": {"max_new_tokens": new}})
    return REQUEST.format(timeout=timeout, body=body)


def state(env: DeployEnv) -> dict[str, Any]:
    res = env.ct(f"cat {STATE}")
    return dict(json.loads(res.stdout)) if res.rc == 0 and res.stdout.strip() else {}


def restarts(st: dict[str, Any]) -> list[float]:
    """When the watchdog restarted sglang (epoch seconds, the container's clock: this machine's)."""
    return [float(a["at"]) for a in st.get("actions") or [] if a.get("action") == "restart"]


def client_loop(env: DeployEnv, seconds: int) -> list[tuple[float, bool]]:
    """One small generation a second for `seconds`, in the container: (time of the request, answered)."""
    script = (f"end=$(( $(date +%s) + {seconds} )); while [ $(date +%s) -lt $end ]; do t=$(date +%s.%N); "
              f"c=$({request(timeout=5)}); echo \"$t $c\"; sleep 1; done")
    res = env.ssh(f"pct exec 120 -- bash -c {shlex.quote(script)}", timeout=seconds + 60)
    return [(float(t), code == "200") for t, code in (line.split() for line in res.stdout.splitlines()
                                                      if len(line.split()) == 2)]


def stall_figures(env: DeployEnv, stalls: int) -> list[tuple[float, float]]:
    """Per watchdog restart: (first hung request → the restart, first hung request → first answer after it). The
    stall began at the first failed request after the last answer before the restart."""
    samples = client_loop(env, 100 * stalls)
    figures: list[tuple[float, float]] = []
    for r in restarts(state(env))[:stalls]:
        before = [t for t, ok in samples if ok and t < r]
        hung = [t for t, ok in samples if not ok and t < r and (not before or t > before[-1])]
        after = [t for t, ok in samples if ok and t > r]
        if hung and after:
            figures.append((r - hung[0], after[0] - hung[0]))
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stalls", type=int, default=3)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--prefill-s", type=float, default=45.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="deploy-perf-") as tmp:
        root = Path(tmp) / "sim"
        (info,) = sim_up(root, hosts=1, first=int(os.environ.get("DEPLOY_SIM_FIRST", "92")), time_scale=5.0)
        try:
            env = make_env(info, Path(tmp), site_template.install(Path(info.host_dir)))
            up = env.run("--json", "up", "host", info.name, "--skip-bench", timeout=900)
            if up.rc != 0:
                print(f"up: exit {up.rc}\n{up.text}")
                return 1
            env.ct_faults(stall_after=5)  # from the next start: the watchdog's probes and the client spend them
            env.ct("systemctl restart sglang")
            figures = stall_figures(env, min(args.stalls, 3))
            end = state(env)
            print("1. stall → serving again (default watchdog: every 10 s, stall_s 30, probe timeout 10 s)")
            for n, (detected, serving) in enumerate(figures, 1):
                print(f"   stall {n}: restarted {detected:5.1f} s after the first hung request, "
                      f"serving again after {serving:5.1f} s")
            print(f"   watchdog state at the end: {end.get('state')} ({end.get('reason')})")

            # 2. A long prefill: no stall, a fresh budget, every prefill args.prefill_s seconds.
            env.ct_faults(stall_after=None, slow_prefill_s=args.prefill_s)
            # The timer stops first: a check under way would write the old state (its spent budget) back.
            env.ct(f"systemctl stop sglang-watchdog.timer sglang-watchdog.service; rm -f {STATE}; "
                   "systemctl reset-failed sglang; systemctl restart sglang; systemctl start sglang-watchdog.timer")
            until_up = time.monotonic() + 120
            while time.monotonic() < until_up and env.ct("curl -s -m 5 -o /dev/null -w '%{http_code}' "
                                                        "http://127.0.0.1:8000/health").stdout != "200":
                time.sleep(1)
            seconds = int(args.minutes * 60)
            loop = (f"end=$(( $(date +%s) + {seconds} )); n=0; while [ $(date +%s) -lt $end ]; do "
                    f"c=$({request(timeout=int(args.prefill_s) * 3 + 30, words=4000, new=8)}); "
                    "[ \"$c\" = 200 ] && n=$((n+1)); done; echo $n")
            ssh = ["ssh", "-i", str(info.key_file), "-o", f"UserKnownHostsFile={info.known_hosts}", "-o",
                   "BatchMode=yes", "-p", str(info.ssh_port), f"root@{info.address}"]
            clients = [subprocess.Popen([*ssh, f"pct exec 120 -- bash -c {shlex.quote(loop)}"],
                                        stdout=subprocess.PIPE, text=True) for _ in range(2)]
            done = [int((c.communicate(timeout=seconds + args.prefill_s * 4 + 120)[0] or "0").strip() or 0)
                    for c in clients]
            after = state(env)
            during = restarts(after)
            print(f"2. {args.minutes:.0f} minutes of prefills of {args.prefill_s:.0f} s each (slow_prefill_s), "
                  f"2 clients, {sum(done)} requests answered")
            print(f"   watchdog restarts: {len(during)}; state at the end: {after.get('state')} "
                  f"({after.get('reason')})")
        finally:
            sim_down(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
