"""What one SSH session, and the simulated host's own commands, cost on a simulated host.

    python tests/perf/ssh_session_cost.py [--runs 20] [--first 50] [--json]

Starts one simulated host on its own temporary root (sim-FIRST on 127.0.0.(FIRST+1); default $DEPLOY_SIM_FIRST,
else 50), creates a stopped CT 120 for `pct config`, and then times, over a paramiko connection with strict host
keys (as the tool connects), back to back as the tool sends its round trips:

- `true` in a new session on the open connection (the per-session floor);
- a new connection + session running `true` (key exchange, auth, session);
- the replayed `nvidia-smi` power query of the tool's facts, `pct list`, `pct config 120` and `pvesh get` of the
  container config, each in a session on the open connection.

Each case runs --runs times with each of two client sockets: paramiko's default one (Nagle's algorithm on) and one
with TCP_NODELAY, as the tool opens it (orchestrator/remote/ssh.py). The table gives the median and minimum wall
time seen by the client for both, the mean CPU time spent on the host side (user+sys of sshd's whole process tree:
the per-connection sshd, the session shell and what it ran; the kernel counts it in 10 ms ticks, hence the mean)
and the median on the client side (this process: paramiko). Nothing is asserted: a measurement.
Run as root. docs/simulator.md ("What a session costs") keeps the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import paramiko  # noqa: E402

from simulator.manager.lifecycle import sim_down, sim_up  # noqa: E402

TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Row:
    case: str
    command: str
    runs: int
    wall_median_ms: float
    wall_min_ms: float
    nodelay_median_ms: float
    nodelay_min_ms: float
    host_cpu_mean_ms: float
    client_cpu_median_ms: float


def tree_cpu(root_pid: int) -> float:
    """CPU seconds of a process tree: every live member's own time plus what it reaped from its children.

    Each finished process is counted once, in the cutime/cstime of the parent that waited for it.
    """
    parents: dict[int, int] = {}
    times: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        times[pid] = sum(int(f) for f in fields[11:15])
    members = {root_pid}
    grew = True
    while grew:
        new = {pid for pid, ppid in parents.items() if ppid in members and pid not in members}
        members |= new
        grew = bool(new)
    return sum(times.get(pid, 0) for pid in members) / TICK


def connect(info: Any, nodelay: bool) -> paramiko.SSHClient:
    sock = socket.create_connection((info.address, info.ssh_port), timeout=10)
    if nodelay:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client = paramiko.SSHClient()
    client.load_host_keys(str(info.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(info.address, port=info.ssh_port, username="root", key_filename=str(info.key_file),
                   look_for_keys=False, allow_agent=False, timeout=10, sock=sock)
    return client


def run(client: paramiko.SSHClient, command: str) -> tuple[int, str, str]:
    _, out, err = client.exec_command(command, timeout=60)
    out.channel.shutdown_write()
    o, e = out.read().decode(), err.read().decode()
    return out.channel.recv_exit_status(), o, e


Once = Callable[[paramiko.SSHClient], None]


def measure(info: Any, case: str, command: str, runs: int, once: Once) -> Row:
    """`once` runs times on a connection of each kind, after one warm-up (page cache, first imports)."""
    walls: dict[bool, list[float]] = {False: [], True: []}
    hosts: list[float] = []
    clients: list[float] = []
    for nodelay in (False, True):
        client = connect(info, nodelay)
        try:
            once(client)
            for _ in range(runs):
                # sshd reaps a session before it sends the exit status, so the tree already holds its CPU
                h0, c0, t0 = tree_cpu(info.sshd_pid), time.process_time(), time.perf_counter()
                once(client)
                t1, c1 = time.perf_counter(), time.process_time()
                hosts.append(tree_cpu(info.sshd_pid) - h0)
                walls[nodelay].append(t1 - t0)
                clients.append(c1 - c0)
        finally:
            client.close()
    return Row(case, command, runs, 1000 * statistics.median(walls[False]), 1000 * min(walls[False]),
               1000 * statistics.median(walls[True]), 1000 * min(walls[True]),
               1000 * statistics.fmean(hosts), 1000 * statistics.median(clients))


def cases(info: Any) -> list[tuple[str, str, Once]]:
    def on_open(command: str) -> Once:
        def once(client: paramiko.SSHClient) -> None:
            rc, out, err = run(client, command)
            if rc != 0:
                raise SystemExit(f"{command!r} failed with exit {rc}: {err or out}")
        return once

    def new_connection(client: paramiko.SSHClient) -> None:
        transport = client.get_transport()
        nodelay = bool(transport and transport.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        fresh = connect(info, nodelay)
        try:
            rc, _, err = run(fresh, "true")
            if rc != 0:
                raise SystemExit(f"'true' on a new connection failed with exit {rc}: {err}")
        finally:
            fresh.close()

    smi = ("nvidia-smi --query-gpu=index,power.draw,power.limit,utilization.gpu "
           "--format=csv,noheader,nounits")
    pvesh = f"pvesh get /nodes/{info.node}/lxc/120/config --output-format json"
    return [("session on open connection", "true", on_open("true")),
            ("new connection + session", "true", new_connection),
            ("replayed nvidia-smi query", smi, on_open(smi)),
            ("pct list", "pct list", on_open("pct list")),
            ("pct config 120", "pct config 120", on_open("pct config 120")),
            ("pvesh get ct config", pvesh, on_open(pvesh))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--first", type=int, default=int(os.environ.get("DEPLOY_SIM_FIRST", "50")))
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="deploy-sshcost-") as tmp:
        root = Path(tmp) / "sim"
        (info,) = sim_up(root, hosts=1, first=args.first, time_scale=5.0)
        try:
            if info.sshd_pid is None:
                raise SystemExit("sshd of the simulated host did not start")
            client = connect(info, nodelay=True)
            rc, out, err = run(client, f"pct create 120 {TEMPLATE} --hostname ct120 --cores 2 --memory 1024 "
                                       "--rootfs local-lvm:8 --unprivileged 0")
            if rc != 0:
                raise SystemExit(f"pct create 120 failed with exit {rc}: {err or out}")
            load0 = os.getloadavg()[0]
            client.close()
            rows = [measure(info, case, command, args.runs, once) for case, command, once in cases(info)]
            load1 = os.getloadavg()[0]
        finally:
            sim_down(root)
    if args.json:
        print(json.dumps({"runs": args.runs, "load_average": [load0, load1], "cores": os.cpu_count(),
                          "rows": [asdict(r) for r in rows]}, indent=1))
        return 0
    print(f"{'':<28} {'paramiko default':>17} {'TCP_NODELAY':>17}")
    print(f"{'case':<28} {'median':>8} {'min':>8} {'median':>8} {'min':>8} {'host CPU*':>9} {'client CPU':>10}   "
          f"(ms; wall median/min of {args.runs}; *mean)")
    for r in rows:
        print(f"{r.case:<28} {r.wall_median_ms:8.1f} {r.wall_min_ms:8.1f} {r.nodelay_median_ms:8.1f} "
              f"{r.nodelay_min_ms:8.1f} {r.host_cpu_mean_ms:9.1f} {r.client_cpu_median_ms:10.1f}")
    print(f"load average {load0:.2f} before, {load1:.2f} after, on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
