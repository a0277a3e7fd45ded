"""Reach a simulated container's model server from outside: HOST_ADDRESS:PORT → the CT's 127.0.0.1:PORT.

On a real PVE node the container has its own address on a bridge and the router reaches its server there. A
simulated container is a network namespace with loopback only, so each simulated host runs this small TCP relay
on its own loopback address (127.0.0.(N+1):8000). For every connection it opens the upstream socket from a
short-lived thread that first joins the running container's netns (setns(2) on a network namespace applies to the
calling thread only), so the socket lives in the container while the relay stays outside. When no container
runs, the connection is closed at once, as a refused port would be.

With the lxc runtime the container has a real address on the host's bridge (simulator/lxc/net.py), and the
relay connects there: ADDRESS:PORT → CT_IP:PORT, so two containers can both serve :8000.

    python -m simulator.portfwd HOST_DIR ADDRESS PORT [VMID]
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from pathlib import Path

from simulator import nsutil
from simulator.config import DEFAULT_VMID, HostPaths
from simulator.pve.lxc import netns_path


def _running_netns(hp: HostPaths, vmid: int) -> str | None:
    try:
        state = json.loads((hp.dir / "ct" / str(vmid) / "state.json").read_text())
    except (OSError, ValueError):
        return None
    ns = state.get("netns") or ""
    return ns if state.get("status") == "running" and ns else None


def _lxc_address(hp: HostPaths, vmid: int) -> str | None:
    """The container's bridge address when the host uses the lxc runtime (None: the view runtime)."""
    try:
        cfg = json.loads(hp.config.read_text())
    except (OSError, ValueError):
        return None
    if cfg.get("runtime") != "lxc":
        return None
    from simulator.lxc.net import host_net

    return host_net(cfg["address"], cfg["sim_id"]).ct_ip(vmid)


def connect_in_ct(hp: HostPaths, vmid: int, port: int, timeout_s: float = 5.0) -> socket.socket:
    """A TCP connection to the container's server: its bridge address (lxc runtime), else 127.0.0.1:port inside
    its network namespace (view runtime)."""
    address = _lxc_address(hp, vmid)
    if address is not None:
        try:
            sock = socket.create_connection((address, port), timeout=timeout_s)
            sock.settimeout(None)
            return sock
        except ConnectionRefusedError:
            # a server bound to the container's 127.0.0.1 (the profile's default host): reach it from inside
            from simulator.lxc.runtime import LxcRuntime
            from simulator.pve.lxc import Node

            pid = LxcRuntime(hp, Node(hp).cfg).init_pid(vmid)
            if not pid:
                raise
            return _connect_via(f"/proc/{pid}/ns/net", vmid, port, timeout_s)
    ns = _running_netns(hp, vmid)
    if ns is None:
        raise ConnectionRefusedError(f"CT {vmid} is not running")
    return _connect_via(netns_path(hp, ns), vmid, port, timeout_s)


def _connect_via(ns_file: str, vmid: int, port: int, timeout_s: float) -> socket.socket:
    """Connect to 127.0.0.1:port in the network namespace `ns_file`, from a short-lived thread."""
    result: list[socket.socket | BaseException] = []

    def join_and_connect() -> None:
        try:
            nsutil.setns(ns_file, nsutil.CLONE_NEWNET)
            result.append(socket.create_connection(("127.0.0.1", port), timeout=timeout_s))
        except BaseException as exc:  # handed to the caller's thread
            result.append(exc)

    t = threading.Thread(target=join_and_connect, daemon=True)
    t.start()
    t.join(timeout_s + 1)
    if not result:
        raise TimeoutError(f"connecting into CT {vmid} timed out")
    if isinstance(result[0], BaseException):
        raise result[0]
    sock = result[0]
    sock.settimeout(None)
    return sock


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(1 << 16):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _relay(client: socket.socket, hp: HostPaths, vmid: int, port: int) -> None:
    try:
        upstream = connect_in_ct(hp, vmid, port)
    except OSError:
        client.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def serve(host_dir: Path, address: str, port: int, vmid: int = DEFAULT_VMID) -> None:
    assert address.startswith("127."), "the simulator only listens on 127.0.0.0/8"
    hp = HostPaths(host_dir)
    listener = socket.create_server((address, port), backlog=128)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_relay, args=(client, hp, vmid, port), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    serve(Path(args[0]), args[1], int(args[2]), int(args[3]) if len(args) > 3 else DEFAULT_VMID)
    return 0


if __name__ == "__main__":
    sys.exit(main())
