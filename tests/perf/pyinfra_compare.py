"""Issues 41 and 47: a converged `deploy up --skip-bench` against pyinfra doing the same checks.

Starts one simulated host on its own root (sim-N, N from --first, default DEPLOY_SIM_FIRST or 101), converges it once
with `deploy up --skip-bench`, then times interleaved pairs (the order flips every round, so a drifting load on
shared cores weighs on both alike):
- deploy's converged `up --skip-bench`: wall, the client's CPU (user + system of the child process) and its SSH
  round trips (its --json totals);
- `pyinfra -y INVENTORY tests/perf/pyinfra_deploy/converged_checks.py` ("pyinfra, per check"): the checks of
  tests/perf/ansible/converged.yml written the pyinfra way (one check operation each, facts for every read,
  deploy's own files rendered and compared, health and smoke through `pct exec -- curl`);
- `pyinfra -y INVENTORY tests/perf/pyinfra_deploy/converged_batched.py` ("pyinfra, batched"): the fastest pyinfra
  deploy we could write of the checks deploy's converged `up` makes: every read deploy's `up` gathers (the host
  data carries deploy's own fact commands for this host: steps.session.playbook_facts) in ONE custom fact, then the
  smoke check in one `pct exec`: two round trips;
  both with strict host keys against the simulated host's known_hosts file, their commands counted by the deploy
  file (one SSH round trip each);
- beside them (unless --no-views), `deploy status host H` and `deploy plan host H` of the same round.
Prints the medians, the paired ratios deploy/pyinfra (the median of each round's ratio), the load average of every
round and the exact commands; --json-out keeps the last converged up's --json document (its steps are the checks).
Nothing is asserted: this is a measurement.

pyinfra is not a dependency of this project. Without --pyinfra the script installs pyinfra 3 into a venv of its own
under /var/cache/deploy-perf (once; later runs reuse it) with this machine's own pip configuration, as one installs
ansible-core for tests/perf/ansible_compare.py. Run as root:
    python tests/perf/pyinfra_compare.py [--runs 5] [--pyinfra /path/to/venv/bin/pyinfra]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from ansible_compare import MAX_RUNS, Series, Timed, converged_vars, timed, uptime  # noqa: E402

from orchestrator.facts import CT_FACTS, HOST_FACTS  # noqa: E402
from orchestrator.inventory.loader import load_inventory  # noqa: E402
from orchestrator.playbooks import load_playbook  # noqa: E402
from orchestrator.steps import REGISTRY, load_all_steps  # noqa: E402
from orchestrator.steps.session import playbook_facts  # noqa: E402
from simulator.manager.lifecycle import SimHostInfo, sim_down, sim_up  # noqa: E402
from tests.e2e import site_template  # noqa: E402
from tests.e2e.conftest import installed_like_environ, make_env  # noqa: E402

DEPLOY_FILE = REPO / "tests" / "perf" / "pyinfra_deploy" / "converged_checks.py"
BATCHED_FILE = REPO / "tests" / "perf" / "pyinfra_deploy" / "converged_batched.py"
PYINFRA_VENV = Path("/var/cache/deploy-perf/pyinfra-3")
PYINFRA_REQUIREMENT = "pyinfra>=3,<4"


def ensure_pyinfra(venv: Path = PYINFRA_VENV) -> Path:
    """pyinfra in its own venv, installed once with the machine's pip configuration (no index named here)."""
    binary = venv / "bin" / "pyinfra"
    if not binary.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", PYINFRA_REQUIREMENT], check=True)
    return binary


def up_reads(info: SimHostInfo, inventory_dir: Path) -> dict[str, dict[str, str]]:
    """Deploy's own commands for every fact its converged `up` gathers on this host (a run holding the host lock):
    {"host_commands": {name: command}, "ct_commands": {name: command}}, sorted by name as deploy batches them."""
    load_all_steps()
    inv = load_inventory(inventory_dir)
    host = inv.hosts[info.name]
    profile = inv.profile_for(host)
    steps = [ref.name for ref in load_playbook("up", REGISTRY).steps]
    host_facts, ct_facts = playbook_facts(steps, stopping=True)
    assert all(HOST_FACTS[f.name] is f for f in host_facts) and all(CT_FACTS[f.name] is f for f in ct_facts)
    return {"host_commands": {f.name: f.command(host, profile) for f in sorted(host_facts, key=lambda f: f.name)},
            "ct_commands": {f.name: f.command(host, profile) for f in sorted(ct_facts, key=lambda f: f.name)}}


def pyinfra_inventory(info: SimHostInfo, inventory_dir: Path, tmp: Path) -> tuple[Path, Path]:
    """(inventory.py, count file): the simulated host with its SSH connection data and converged_vars."""
    count_file = tmp / "pyinfra-reads"
    data = {"ssh_port": info.ssh_port, "ssh_user": "root", "ssh_key": str(info.key_file),
            "ssh_known_hosts_file": str(info.known_hosts), "ssh_strict_host_key_checking": "yes",
            "count_file": str(count_file), **converged_vars(info, inventory_dir, tmp / "files"),
            **up_reads(info, inventory_dir)}
    data_file = tmp / "host-data.json"
    data_file.write_text(json.dumps(data))
    data_file.chmod(0o600)
    inventory = tmp / "inventory.py"
    inventory.write_text(f"import json\n\npve = [({info.address!r}, json.load(open({str(data_file)!r})))]\n")
    return inventory, count_file


@dataclass
class Side(Series):
    """One command's runs, with its SSH round trips."""

    trips: list[int] = field(default_factory=list)


def ratios(a: list[float], b: list[float]) -> str:
    pairs = [x / y for x, y in zip(a, b, strict=True)]
    return f"{statistics.median(pairs):6.3f}   pairs: " + " ".join(f"{r:.2f}" for r in pairs)


def deploy_trips(run: Timed) -> int:
    return int(json.loads(run.proc.stdout).get("totals", {}).get("ssh_round_trips", -1))


def profile_up(out: Path, up: list[str], env: dict[str, str]) -> None:
    """One converged up under cProfile and one under -X importtime (untimed: for reading where its CPU goes)."""
    out.mkdir(parents=True, exist_ok=True)
    python, rest = up[0], up[2:]  # up is [python, "-m", "orchestrator", ...]
    subprocess.run([python, "-m", "cProfile", "-o", str(out / "up.prof"), "-m", *rest], env=env, cwd=REPO,
                   capture_output=True, check=True, timeout=300)
    proc = subprocess.run([python, "-X", "importtime", "-m", *rest], env=env, cwd=REPO, capture_output=True,
                          text=True, check=True, timeout=300)
    (out / "up.importtime").write_text(proc.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help=f"timed pairs (1..{MAX_RUNS})")
    parser.add_argument("--first", type=int, default=int(os.environ.get("DEPLOY_SIM_FIRST", "101")),
                        help="the simulated host's number (sim-N)")
    parser.add_argument("--pyinfra", type=Path, default=None, help="pyinfra to run (default: installed, see above)")
    parser.add_argument("--no-views", action="store_true", help="leave out `deploy status` and `deploy plan`")
    parser.add_argument("--json-out", type=Path, default=None, help="write the last converged up's --json here")
    parser.add_argument("--profile-dir", type=Path, default=None,
                        help="after the rounds, one more converged up under cProfile (up.prof) and one under "
                             "-X importtime (up.importtime) into this directory")
    args = parser.parse_args()
    if not 1 <= args.runs <= MAX_RUNS:
        parser.error(f"--runs must be within 1..{MAX_RUNS}")
    pyinfra = args.pyinfra or ensure_pyinfra()
    version = subprocess.run([str(pyinfra), "--version"], capture_output=True, text=True, check=False).stdout.strip()
    up_s, py_s, pyb_s = Side("deploy up"), Side("pyinfra, per check"), Side("pyinfra, batched")
    status_s, plan_s = Side("deploy status"), Side("deploy plan")
    loads: list[float] = []
    uptimes = [uptime()]
    with tempfile.TemporaryDirectory(prefix="deploy-pyinfra-") as tmp_name:
        tmp = Path(tmp_name)
        root = tmp / "sim"
        (info,) = sim_up(root, hosts=1, first=args.first, time_scale=5.0)
        try:
            env = make_env(info, tmp, site_template.install(Path(info.host_dir)))
            deploy = [sys.executable, "-m", "orchestrator", "--json"]
            up = [*deploy, "up", "host", info.name, "--skip-bench"]
            status = [*deploy, "status", "host", info.name]
            plan = [*deploy, "plan", "host", info.name]
            first = timed(up, env.env, REPO)
            if first.proc.returncode != 0:
                print(f"first up: exit {first.proc.returncode}\n{first.proc.stdout}{first.proc.stderr}")
                return 1
            inventory, count_file = pyinfra_inventory(info, env.inventory, tmp)
            play = [str(pyinfra), "-y", str(inventory), str(DEPLOY_FILE)]
            batched = [str(pyinfra), "-y", str(inventory), str(BATCHED_FILE)]
            penv = installed_like_environ()
            for argv in (play, batched):  # untimed: their bytecode caches, as deploy's first up is untimed
                warm = timed(argv, penv, tmp)
                if warm.proc.returncode != 0:
                    print(f"{argv[-1]}: exit {warm.proc.returncode}\n{warm.proc.stdout}{warm.proc.stderr}")
                    return 1
            sides = [(up_s, up, env.env, REPO), (pyb_s, batched, penv, tmp), (py_s, play, penv, tmp)]
            views = [] if args.no_views else [(status_s, status, env.env, REPO), (plan_s, plan, env.env, REPO)]
            for round_no in range(args.runs):
                for side, argv, run_env, cwd in (sides if round_no % 2 == 0 else sides[::-1]) + views:
                    run = timed(argv, run_env, cwd)
                    if run.proc.returncode != 0:
                        print(f"{side.label}: exit {run.proc.returncode}\n{run.proc.stdout}{run.proc.stderr}")
                        return 1
                    side.add(run)
                    side.trips.append(int(count_file.read_text()) if side in (py_s, pyb_s) else deploy_trips(run))
                    if side is up_s:
                        up_s.last = run.proc.stdout
                loads.append(os.getloadavg()[0])
            if args.profile_dir is not None:
                profile_up(args.profile_dir, up, env.env)
        finally:
            sim_down(root)
    uptimes.append(uptime())
    print(f"median of {args.runs} interleaved pairs on one simulated host (sim-{args.first}, time_scale 5)")
    if args.json_out is not None:
        args.json_out.write_text(up_s.last)
    for side in (up_s, pyb_s, py_s, *(() if args.no_views else (status_s, plan_s))):
        print(side.line("wall", side.walls))
        print(side.line("client CPU", side.cpus))
        print(f"{side.label + ', SSH round trips':34s}{statistics.median(side.trips):7.0f}")
    for peer, name in ((pyb_s, "batched"), (py_s, "per check")):
        print(f"{'ratio up/pyinfra ' + name + ', wall':34s}" + ratios(up_s.walls, peer.walls))
        print(f"{'ratio up/pyinfra ' + name + ', CPU':34s}" + ratios(up_s.cpus, peer.cpus))
    steps = json.loads(up_s.last).get("steps", [])
    print(f"deploy's converged up: {len(steps)} steps: " + " ".join(
        f"{s.get('name')}={s.get('status')}" for s in steps if isinstance(s, dict)))
    print("load average (1 min) after each round: " + " ".join(f"{lo:.2f}" for lo in loads))
    print("uptime before: " + uptimes[0])
    print("uptime after:  " + uptimes[-1])
    print(f"commands (in {tmp}, removed since):")
    print("  " + " ".join(f"{k}={shlex.quote(env.env[k])}" for k in ("DEPLOY_INVENTORY", "DEPLOY_STATE_DIR"))
          + " python -m orchestrator --json {up host H --skip-bench | status host H | plan host H}")
    print(f"  {shlex.join(play)}   ({version})")
    print(f"  {shlex.join(batched)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
