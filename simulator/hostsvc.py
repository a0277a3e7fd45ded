"""Services a simulated host offers its real LXC containers on its bridge address: the package index over the
wheelhouse (pip) and the model hub stand-in (`hf download`).

Why on the bridge: a container's network reaches only NAT'd package registries and its host's bridge address,
as an air-gapped site reaches its own mirrors. The inventory entries `deploy sim up` writes point the tool at
them (`container.pip_index_url`, `container.hf_endpoint`). Each runs as its own daemon with a pid file, so
`sim down` stops them like the API server.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from simulator import procs
from simulator.config import HostConfig, HostPaths
from simulator.software import wheelhouse

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Service:
    name: str
    module: str
    port: int

    def url(self, address: str) -> str:
        return f"http://{address}:{self.port}" + ("/simple" if self.name == "index" else "")


INDEX = Service("index", "simulator.software.index", 3141)
HUB = Service("hub", "simulator.software.hub", 8088)
SERVICES = (INDEX, HUB)


def _pidfile(hp: HostPaths, svc: Service) -> Path:
    return hp.dir / "svc" / f"{svc.name}.pid"


def listening(address: str, port: int) -> bool:
    """Whether a TCP socket listens on address:port, read from /proc/net/tcp: the simulator connects to nothing
    outside loopback, so readiness is not probed with a connection."""
    hex_addr = "".join(f"{int(b):02X}" for b in reversed(address.split(".")))
    want = f"{hex_addr}:{port:04X}"
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    return any(parts[1] == want and parts[3] == "0A" for parts in (line.split() for line in lines))


def _wait_listening(address: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if listening(address, port):
            return True
        time.sleep(0.1)
    return False


def start(hp: HostPaths, cfg: HostConfig) -> None:
    """Start (or keep) every service on the host's bridge address; raises RuntimeError naming the log."""
    assert cfg.bridge_address, "lxc hosts get a bridge address before their services start"
    # Fill the wheelhouse here, once per machine (downloads on a fresh one): its errors then reach `sim up`
    # directly, and the index daemon below starts on a filled one within the wait.
    wheelhouse.fill()
    (hp.dir / "svc").mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    for svc in SERVICES:
        pidfile = _pidfile(hp, svc)
        if procs.read_pid(pidfile) is not None:
            continue
        log = hp.dir / "svc" / f"{svc.name}.log"
        proc = procs.start_detached([str(Path(sys.executable).resolve()), "-m", svc.module, str(hp.dir),
                                     cfg.bridge_address, str(svc.port)], log, env=env, cwd=hp.dir)
        if not _wait_listening(cfg.bridge_address, svc.port, 120.0):
            proc.kill()
            raise RuntimeError(f"{svc.name} service of {cfg.name} did not come up; see {log}")
        pidfile.write_text(f"{proc.pid}\n")


def stop(hp: HostPaths) -> None:
    for svc in SERVICES:
        procs.stop_tree(_pidfile(hp, svc))


def container_options(cfg: HostConfig) -> dict[str, str]:
    """The inventory `container:` options that point the tool at this host's services (lxc hosts only)."""
    if cfg.runtime != "lxc" or not cfg.bridge_address:
        return {}
    return {"pip_index_url": INDEX.url(cfg.bridge_address), "hf_endpoint": HUB.url(cfg.bridge_address)}
