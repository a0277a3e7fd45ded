"""Services a simulated host offers its real LXC containers on its bridge address: the package index over the
wheelhouse (pip) and the model hub stand-in (`hf download`).

Why on the bridge: a container's network reaches only NAT'd package registries and its host's bridge address,
as an air-gapped site reaches its own mirrors. The inventory entries `deploy sim up` writes point the tool at
them (`container.pip_index_url`, `container.hf_endpoint`). Both run in one daemon per host with a pid file
(`python -m simulator.host.services HOST_DIR ADDRESS`), so `sim down` stops them like the API server.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from simulator import procs
from simulator.config import HostConfig, HostPaths
from simulator.software import wheelhouse

REPO = Path(__file__).resolve().parents[2]
INDEX_PORT = 3141
HUB_PORT = 8088


def index_url(address: str) -> str:
    return f"http://{address}:{INDEX_PORT}/simple"


def hub_url(address: str) -> str:
    return f"http://{address}:{HUB_PORT}"


def _pidfile(hp: HostPaths) -> Path:
    return hp.dir / "svc" / "services.pid"


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


def _wait_listening(address: str, ports: tuple[int, ...], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(listening(address, port) for port in ports):
            return True
        time.sleep(0.1)
    return False


def start(hp: HostPaths, cfg: HostConfig) -> None:
    """Start (or keep) the services on the host's bridge address; raises RuntimeError naming the log."""
    assert cfg.bridge_address, "lxc hosts get a bridge address before their services start"
    # Fill the wheelhouse here, once per machine (downloads on a fresh one): its errors then reach `sim up`
    # directly, and the daemon below starts on a filled one within the wait.
    wheelhouse.fill()
    pidfile = _pidfile(hp)
    if procs.read_pid(pidfile) is not None:
        return
    pidfile.parent.mkdir(exist_ok=True)
    log = pidfile.with_suffix(".log")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    if os.environ.get("DEPLOY_SIM_WHEELHOUSE"):  # serve the wheelhouse filled above, not the machine's shared one
        env["DEPLOY_SIM_WHEELHOUSE"] = os.environ["DEPLOY_SIM_WHEELHOUSE"]
    if os.environ.get("DEPLOY_SIM_REAL_WHEELHOUSE"):  # the real stacks' wheels, served under /real/simple
        env["DEPLOY_SIM_REAL_WHEELHOUSE"] = os.environ["DEPLOY_SIM_REAL_WHEELHOUSE"]
    proc = procs.start_detached([str(Path(sys.executable).resolve()), "-m", "simulator.host.services", str(hp.dir),
                                 cfg.bridge_address], log, env=env, cwd=hp.dir)
    if not _wait_listening(cfg.bridge_address, (INDEX_PORT, HUB_PORT), 120.0):
        proc.kill()
        raise RuntimeError(f"package index / model hub of {cfg.name} did not come up; see {log}")
    pidfile.write_text(f"{proc.pid}\n")


def stop(hp: HostPaths) -> None:
    procs.stop_tree(_pidfile(hp))


def container_options(cfg: HostConfig) -> dict[str, str]:
    """The inventory `container:` options that point the tool at this host's services (once the bridge is up)."""
    if not cfg.bridge_address:
        return {}
    return {"pip_index_url": index_url(cfg.bridge_address), "hf_endpoint": hub_url(cfg.bridge_address)}


def main() -> int:
    """`python -m simulator.host.services HOST_DIR ADDRESS`: the index and the hub, served until killed."""
    from simulator.software.hub import start_hub
    from simulator.software.index import start_index

    host_dir, address = Path(sys.argv[1]), sys.argv[2]
    index = start_index(host_dir, address, INDEX_PORT)
    hub = start_hub(host_dir, address, HUB_PORT)
    print(index.url, hub.url, flush=True)
    index.thread.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
