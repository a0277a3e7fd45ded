"""Issue 51's figure: what the team store costs a converged `up --skip-bench` against this machine's state.

Starts one simulated host from the site template (tests/perf/one_host.py; sim-N, N from DEPLOY_SIM_FIRST) and a
real PostgreSQL on loopback (tests/pg_server.py), converges the host once, then runs `up --skip-bench` --runs
times each way, interleaved (so a drifting load weighs on both alike): with this machine's state (the default),
and with DEPLOY_STATE_URL naming the store (the driver's import, the connect and login, the schema check, the
claim taken and freed). Prints the medians of wall time and client CPU (user + system of the `deploy` process
and its children), their spread and the differences; then the floor: the CPU of `import pg8000.native` alone in fresh
processes that have imported the tool, against the budget (+10 % of the default's CPU). Nothing is asserted: this
is a measurement. Run as root:
    python tests/perf/state_store_cost.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import pwd
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "perf"))

from ansible_compare import MAX_RUNS, timed  # noqa: E402
from one_host import template_host  # noqa: E402

from tests.pg_server import PgServer, free_port, server_bin  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7, help=f"runs of each (1..{MAX_RUNS})")
    args = parser.parse_args()
    if not 1 <= args.runs <= MAX_RUNS:
        parser.error(f"--runs must be within 1..{MAX_RUNS}")
    bindir = server_bin()
    if bindir is None:
        print("no PostgreSQL server binaries: run scripts/install.sh")
        return 2
    pg_root = Path(tempfile.mkdtemp(prefix="deploy-pg-"))
    os.chmod(pg_root, 0o700)
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(pg_root, pw.pw_uid, pw.pw_gid)
    server = PgServer(bindir, pg_root, free_port(), secrets.token_urlsafe(16))
    loads = [os.getloadavg()[0]]
    try:
        server.start()
        with template_host(time_scale=5.0, default_first=101) as (info, env, root):
            pw_file = root.parent / "store.pw"
            fd = os.open(pw_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(server.password)
            team = {**env.env, "DEPLOY_STATE_URL": server.url(server.create_database()),
                    "DEPLOY_STATE_PASSWORD_FILE": str(pw_file)}
            argv = [sys.executable, "-m", "orchestrator", "--json", "up", "host", info.name, "--skip-bench"]
            for label, e in (("first (converge)", env.env), ("first with the store", team)):
                run = timed(argv, e, REPO)
                if run.proc.returncode != 0:
                    print(f"{label}: exit {run.proc.returncode}\n{run.proc.stdout}{run.proc.stderr}")
                    return 1
            sides: dict[str, list[tuple[float, float]]] = {"this machine (default)": [], "team store": []}
            for _ in range(args.runs):
                for label, e in (("this machine (default)", env.env), ("team store", team)):
                    run = timed(argv, e, REPO)
                    if run.proc.returncode != 0:
                        print(f"{label}: exit {run.proc.returncode}\n{run.proc.stdout}{run.proc.stderr}")
                        return 1
                    sides[label].append((run.wall, run.cpu))
                loads.append(os.getloadavg()[0])
    finally:
        server.stop()
        shutil.rmtree(pg_root, ignore_errors=True)
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in sides.items()}
    (lw, lc), (tw, tc) = med["this machine (default)"], med["team store"]
    print(f"converged `up --skip-bench`, median of {args.runs} runs each (interleaved), spread min..max")
    print(f"{'state':<24} {'wall s':>8} {'(spread)':>15} {'client CPU s':>13} {'(spread)':>15}")
    for k, (w, c) in med.items():
        walls, cpus = [x for x, _ in sides[k]], [x for _, x in sides[k]]
        print(f"{k:<24} {w:>8.3f} {min(walls):>7.3f}..{max(walls):<6.3f} {c:>13.3f} "
              f"{min(cpus):>7.3f}..{max(cpus):<6.3f}")
    print(f"{'difference':<24} {tw - lw:>+8.3f} {'':>15} {tc - lc:>+13.3f}   "
          f"({(tw / lw - 1) * 100:+.1f} % wall, {(tc / lc - 1) * 100:+.1f} % CPU)")
    pairs = [(t[1] - d[1]) / d[1] * 100 for d, t in zip(sides["this machine (default)"], sides["team store"],
                                                          strict=True)]
    print(f"client CPU, team store against the default run just before it: {min(pairs):+.1f} % .. "
          f"{max(pairs):+.1f} % (median {statistics.median(pairs):+.1f} %)")
    print(f"load average (1 min) over the runs: {min(loads):.2f}..{max(loads):.2f}")
    floor = sorted(import_cpu() for _ in range(args.runs))
    print(f"`import pg8000.native` alone, CPU s in {args.runs} fresh processes that imported the tool: median "
          f"{statistics.median(floor):.3f} ({floor[0]:.3f}..{floor[-1]:.3f}); the budget (+10 % of the default's "
          f"median CPU): {lc * 0.10:.3f}")
    return 0


IMPORT_CPU = ("import time, orchestrator.cli, orchestrator.cli.up_cmd, orchestrator.locks.claims\n"
              "t = time.process_time()\nimport pg8000.native\nprint(time.process_time() - t)")


def import_cpu() -> float:
    """What the driver's import costs a `deploy` process that has loaded what a converged `up` loads before it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run([sys.executable, "-c", IMPORT_CPU], capture_output=True, text=True, env=env, cwd=REPO,
                         check=True, timeout=120)
    return float(out.stdout.strip())


if __name__ == "__main__":
    sys.exit(main())
