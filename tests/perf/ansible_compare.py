"""Issue 24's comparison: a converged `deploy up --skip-bench` against an Ansible playbook doing the same checks.

Starts one simulated host on its own root (sim-N, N from --first, default 100), converges it once with `deploy up
--skip-bench`, then times, alternately run by run so a drifting load (shared cores) weighs on both alike:
- deploy's converged `up --skip-bench`: wall, and the client's own CPU (its rusage as a child of this script);
- `ansible-playbook tests/perf/ansible/converged.yml`: the same reads and checks with ansible-core's ordinary
  modules, pipelining on, SSH ControlMaster=auto with ControlPersist=60s, strict host keys against the simulated
  host's known_hosts file (one untimed run first opens the persistent connection, as deploy's first `up` is
  untimed: the timed Ansible runs reuse it, deploy opens its SSH connection in every run).
Prints the medians, the ratio deploy/Ansible, the load average and the exact commands. Nothing is asserted.

ansible-core is not a dependency of this project: install it into a venv of its own, with this machine's own pip
configuration, and name its `ansible-playbook`:
    python3 -m venv /tmp/ansible-venv && /tmp/ansible-venv/bin/pip install ansible-core
    python tests/perf/ansible_compare.py --ansible-playbook /tmp/ansible-venv/bin/ansible-playbook [--runs 5]
Run as root. The playbook's inventory, its expected files (the converged host's unit, env, watchdog and boot unit
files, and deploy's own weights and leftover-bench scripts) and Ansible's state go into a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from orchestrator.facts import CT_PACKAGES, WATCHDOG_FILES  # noqa: E402
from orchestrator.inventory.loader import load_inventory  # noqa: E402
from orchestrator.layout import PATHS  # noqa: E402
from orchestrator.parsers.ct_gpus import CT_GPU_QUERY  # noqa: E402
from orchestrator.parsers.netaddr import address_command, net0_ifname, parse_ip_addr  # noqa: E402
from orchestrator.parsers.packages import DPKG_FORMAT  # noqa: E402
from orchestrator.parsers.weights import RECORD_PATH  # noqa: E402
from orchestrator.render.boot_unit import UNIT_PATH as BOOT_UNIT_PATH  # noqa: E402
from orchestrator.scripts import render_script  # noqa: E402
from simulator.manager.lifecycle import SimHostInfo, sim_down, sim_up  # noqa: E402
from tests.e2e import site_template  # noqa: E402
from tests.e2e.conftest import installed_like_environ, make_env  # noqa: E402

PLAYBOOK = REPO / "tests" / "perf" / "ansible" / "converged.yml"
#: Bounds: no run may take longer than this, and no more runs than MAX_RUNS of each.
RUN_TIMEOUT_S = 300
MAX_RUNS = 20
SSH_ARGS = "-o ControlMaster=auto -o ControlPersist=60s"


@dataclass
class Timed:
    """Wall and client CPU (user + system of the process and its waited-for children) of one command."""

    wall: float
    cpu: float
    proc: subprocess.CompletedProcess[str]


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> Timed:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=RUN_TIMEOUT_S)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Timed(wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc)


@dataclass
class Series:
    """One side's runs."""

    label: str
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    last: str = ""  # the last run's stdout

    def add(self, run: Timed) -> None:
        self.walls.append(run.wall)
        self.cpus.append(run.cpu)

    def line(self, what: str, xs: list[float]) -> str:
        return f"{self.label + ', ' + what:34s}{statistics.median(xs):7.2f} s   all: " + " ".join(f"{x:.2f}"
                                                                                            for x in xs)


class Node:
    """Plain `ssh` to the simulated node with its key and known_hosts (setup reads only, not timed)."""

    def __init__(self, info: SimHostInfo) -> None:
        self.argv = ["ssh", "-i", str(info.key_file), "-o", f"UserKnownHostsFile={info.known_hosts}",
                     "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-p", str(info.ssh_port),
                     f"root@{info.address}"]

    def run(self, command: str) -> str:
        proc = subprocess.run([*self.argv, command], capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise RuntimeError(f"setup command failed ({proc.returncode}): {command}\n{proc.stderr}")
        return proc.stdout


def write_private(path: Path, text: str) -> None:
    """0600: the expected env file may hold a secret on other profiles."""
    path.write_text(text)
    path.chmod(0o600)


def converged_vars(info: SimHostInfo, inventory_dir: Path, files: Path) -> dict[str, Any]:
    """What a peer tool's converged checks need to know about the simulated host, from deploy's inventory (same
    host, profile and paths), and the expected files written into `files`, read from the converged host: the
    Ansible playbook's host vars and pyinfra's host data (tests/perf/pyinfra_compare.py) alike."""
    inv = load_inventory(inventory_dir)
    host = inv.hosts[info.name]
    profile = inv.profile_for(host)
    vmid = host.container.vmid
    node = Node(info)
    files.mkdir(mode=0o700)

    def ct_cat(path: str) -> str:
        return node.run(f"pct exec {vmid} -- cat {shlex.quote(path)}")

    write_private(files / "deploy-nvidia-nodes.service", node.run(f"cat {shlex.quote(BOOT_UNIT_PATH)}"))
    write_private(files / "sglang.service", ct_cat(PATHS.unit_path))
    write_private(files / "sglang.env", ct_cat(PATHS.env_path))
    watchdog = []
    for path in WATCHDOG_FILES:
        name = Path(path).name
        # `{% raw %}`: the converged file is the expected text as is, whatever braces it holds.
        write_private(files / name, "{% raw %}" + ct_cat(path) + "{% endraw %}")
        mode = node.run(f"pct exec {vmid} -- stat -c %a {shlex.quote(path)}").strip()
        watchdog.append({"path": path, "mode": mode, "src": str(files / name)})
    write_private(files / "weights_check.sh", render_script("weights_check.sh.j2", model_path=profile.model_path,
                                                             record_path=RECORD_PATH))
    write_private(files / "stop_leftovers.sh", render_script("stop_leftovers.sh.j2", runs_dir=PATHS.runs_dir))
    ifname = net0_ifname(host.container.net0)
    address = parse_ip_addr(node.run(f"pct exec {vmid} -- {address_command(ifname)}"))
    if address is None:
        raise RuntimeError(f"CT {vmid} has no address on {ifname}")
    return {
        "files_dir": str(files), "vmid": vmid, "pve_node": host.pve.node, "ct_hostname": host.container.hostname,
        "template_storage": host.container.template_storage, "driver_installer": host.container.driver_installer,
        "expected_gpus": host.container.expected_gpus, "ct_address": address, "sglang_port": profile.port,
        "venv": profile.venv, "sglang_want": profile.sglang_version, "served_model_name": profile.served_model_name,
        "ct_gpu_query": CT_GPU_QUERY, "dpkg_format": DPKG_FORMAT, "ct_packages": list(CT_PACKAGES),
        "unit_name": PATHS.unit_name, "unit_path": PATHS.unit_path, "env_path": PATHS.env_path,
        "state_dir": PATHS.state_dir, "current_link": PATHS.current_link, "releases_dir": PATHS.releases_dir,
        "watchdog_files": watchdog, "smoke_prompt": profile.smoke.prompt, "smoke_regex": profile.smoke.expect_regex,
        "smoke_max_tokens": profile.smoke.max_tokens, "smoke_timeout": int(profile.smoke.timeout_s),
    }


def ansible_inventory(info: SimHostInfo, inventory_dir: Path, files: Path) -> Path:
    """The Ansible inventory for the simulated host: its connection and converged_vars."""
    hostvars = {
        "ansible_host": info.address, "ansible_port": info.ssh_port, "ansible_user": "root",
        "ansible_ssh_private_key_file": str(info.key_file),
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={info.known_hosts} -o StrictHostKeyChecking=yes",
        "ansible_python_interpreter": "/usr/bin/python3",
        **converged_vars(info, inventory_dir, files),
    }
    hosts_file = files.parent / "hosts.yml"
    hosts_file.write_text(yaml.safe_dump({"pve": {"hosts": {info.name: hostvars}}}, sort_keys=False))
    return hosts_file


def ansible_env(tmp: Path) -> dict[str, str]:
    """Ansible's settings for this run only: its own config file, home, temp and control-socket directories."""
    cfg = tmp / "ansible.cfg"
    cfg.write_text("[defaults]\nretry_files_enabled = False\n")
    (tmp / "cp").mkdir()
    return {**installed_like_environ(), "ANSIBLE_CONFIG": str(cfg), "ANSIBLE_HOME": str(tmp / "ansible-home"),
            "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-tmp"), "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp / "cp"),
            "ANSIBLE_PIPELINING": "1", "ANSIBLE_SSH_ARGS": SSH_ARGS, "ANSIBLE_HOST_KEY_CHECKING": "True",
            "ANSIBLE_NOCOLOR": "1"}


def recap(out: str) -> str:
    """The PLAY RECAP line of the host (ok/changed/failed/skipped counts)."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("PLAY RECAP"):
            return " ".join(lines[i + 1].split())
    return "(no recap)"


def stop_control_masters(cp: Path) -> None:
    """The persistent SSH connections Ansible left (ControlPersist), ended by their own sockets."""
    for sock in cp.iterdir():
        subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "unused"], capture_output=True,
                       timeout=10, check=False)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help=f"timed runs of each (1..{MAX_RUNS})")
    parser.add_argument("--first", type=int, default=100, help="the simulated host's number (sim-N)")
    parser.add_argument("--ansible-playbook", default="ansible-playbook",
                        help="ansible-playbook to run (default: the one on PATH)")
    args = parser.parse_args()
    if not 1 <= args.runs <= MAX_RUNS:
        parser.error(f"--runs must be within 1..{MAX_RUNS}")
    playbook_bin = shutil.which(args.ansible_playbook)
    if playbook_bin is None:
        parser.error(f"no {args.ansible_playbook!r}: install ansible-core into a venv of its own (see --help)")
    version = subprocess.run([playbook_bin, "--version"], capture_output=True, text=True, check=False)
    deploy_s, ansible_s = Series("deploy"), Series("ansible")
    loads = [os.getloadavg()]
    uptimes = [uptime()]
    with tempfile.TemporaryDirectory(prefix="deploy-ansible-") as tmp_name:
        tmp = Path(tmp_name)
        root = tmp / "sim"
        (info,) = sim_up(root, hosts=1, first=args.first, time_scale=5.0)
        cp = None
        try:
            env = make_env(info, tmp, site_template.install(Path(info.host_dir)))
            up = [sys.executable, "-m", "orchestrator", "--json", "up", "host", info.name, "--skip-bench"]
            first = timed(up, env.env, REPO)
            if first.proc.returncode != 0:
                print(f"first up: exit {first.proc.returncode}\n{first.proc.stdout}{first.proc.stderr}")
                return 1
            hosts = ansible_inventory(info, env.inventory, tmp / "files")
            aenv = ansible_env(tmp)
            cp = tmp / "cp"
            play = [playbook_bin, "-i", str(hosts), str(PLAYBOOK)]
            warm = timed(play, aenv, tmp)
            if warm.proc.returncode != 0:
                print(f"ansible-playbook: exit {warm.proc.returncode}\n{warm.proc.stdout}{warm.proc.stderr}")
                return 1
            for _ in range(args.runs):
                for series, argv, run_env, cwd in ((deploy_s, up, env.env, REPO), (ansible_s, play, aenv, tmp)):
                    run = timed(argv, run_env, cwd)
                    if run.proc.returncode != 0:
                        print(f"{series.label}: exit {run.proc.returncode}\n{run.proc.stdout}{run.proc.stderr}")
                        return 1
                    series.add(run)
                    series.last = run.proc.stdout
                    loads.append(os.getloadavg())
        finally:
            if cp is not None:
                stop_control_masters(cp)
            sim_down(root)
    uptimes.append(uptime())
    ratio = statistics.median(deploy_s.walls) / statistics.median(ansible_s.walls)
    print(f"median of {args.runs} runs each, alternating, on one simulated host (sim-{args.first}, time_scale 5)")
    print(deploy_s.line("converged up, wall", deploy_s.walls))
    print(deploy_s.line("converged up, client CPU", deploy_s.cpus))
    print(ansible_s.line("playbook, wall", ansible_s.walls))
    print(ansible_s.line("playbook, client CPU", ansible_s.cpus))
    print(f"ratio deploy / Ansible (wall){ratio:12.3f}")
    print(f"deploy: {json.loads(deploy_s.last)['totals']}")
    print(f"ansible recap: {recap(ansible_s.last)}")
    print(f"ansible untimed first run (opens the persistent SSH connection): {warm.wall:.2f} s")
    print("load average (1 min) before, during, after: " + " ".join(f"{lo[0]:.2f}" for lo in loads))
    print("uptime before: " + uptimes[0])
    print("uptime after:  " + uptimes[-1])
    print(f"commands (in {tmp}, removed since; the Ansible one with cwd there and ANSIBLE_CONFIG, ANSIBLE_HOME, "
          "ANSIBLE_LOCAL_TEMP and ANSIBLE_SSH_CONTROL_PATH_DIR inside it):")
    print("  " + " ".join(f"{k}={shlex.quote(env.env[k])}" for k in ("DEPLOY_INVENTORY", "DEPLOY_STATE_DIR"))
          + f" {shlex.join(['python', '-m', 'orchestrator', *up[3:]])}")
    print("  " + " ".join(f"{k}={shlex.quote(aenv[k])}" for k in ("ANSIBLE_PIPELINING", "ANSIBLE_SSH_ARGS",
                                                                  "ANSIBLE_HOST_KEY_CHECKING"))
          + f" {shlex.join(play)}")
    print(f"  ({version.stdout.splitlines()[0] if version.stdout else playbook_bin})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
