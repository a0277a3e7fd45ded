"""Reach a simulated container's ports from outside, and other hosts' servers from inside a container.

On a real PVE node the container has its own address on a bridge: the router reaches each host's server there,
and clients reach a router that runs in a container there. A simulated container has a real address on the
host's bridge (simulator/lxc/net.py), but that bridge is not on the machine's LAN, so each simulated host runs this
small TCP relay, in both directions:
- inbound: HOST_ADDRESS:PORT → CT_IP:PORT, for the server's port 8000 and the router's port 30000, so two
  containers can both serve :8000. A server bound to the container's 127.0.0.1 is reached from a short-lived
  thread that first joins the container's network namespace (setns(2) on a network namespace applies to the
  calling thread only). When no container runs, the connection is closed at once, as a refused port would be;
- outbound: inside the running container's network namespace (/proc/<its init pid>/ns/net) it listens on every
  simulated host's ADDRESS:8000 of the same sim root and relays each connection to that address outside, so a
  router in this container reaches every host's server at its worker URL, as it would over a site's LAN. The
  listeners are made again whenever the container (re)starts. They exist only while the container has a router
  unit installed: a listener on ADDRESS:8000 would make a server's own 0.0.0.0:8000 bind fail, and a container
  without a router needs no other host.

    python -m simulator.portfwd HOST_DIR ADDRESS PORT[,PORT...] [VMID]
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path

from simulator import nsutil
from simulator.config import DEFAULT_VMID, HostPaths

#: The unit `deploy up` installs for a router in a container (orchestrator/router/render.py UNIT_PATH).
ROUTER_UNIT = "/etc/systemd/system/sglang-router.service"


def _running_state(hp: HostPaths, vmid: int) -> dict[str, object] | None:
    try:
        state = json.loads((hp.dir / "ct" / str(vmid) / "state.json").read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and state.get("status") == "running" else None


class NetnsTracker:
    """The running container's network namespace file, or None; looked up again only when it (re)starts.

    /proc/<its init pid>/ns/net, asked of LXC once per start (the state's `started_at` tells a restart), so
    polling costs a file read, not an lxc-info call.
    """

    def __init__(self, hp: HostPaths, vmid: int) -> None:
        self.hp, self.vmid = hp, vmid
        self._start: object = None
        self._file: str | None = None
        self._rootfs: Path | None = None

    def current(self) -> str | None:
        state = _running_state(self.hp, self.vmid)
        if state is None:
            self._start, self._file = None, None
            return None
        if state.get("started_at") != self._start or self._file is None:
            self._start, self._file = state.get("started_at"), _ns_file(self.hp, self.vmid)
        return self._file

    def router_here(self) -> bool:
        """Whether the container runs a router (its unit is installed): only then does it need the other hosts'
        servers. A real container sees no listener of ours otherwise, so its own server may bind 0.0.0.0:8000."""
        if self._rootfs is None:
            from simulator.lxc.runtime import LxcRuntime
            from simulator.pve.lxc import Node

            self._rootfs = LxcRuntime(self.hp, Node(self.hp).cfg).dirs(self.vmid).rootfs
        return (self._rootfs / ROUTER_UNIT.lstrip("/")).is_file()


def _ns_file(hp: HostPaths, vmid: int) -> str | None:
    """The running container's network namespace file, asked of LXC (None: not running)."""
    from simulator.lxc.runtime import LxcRuntime
    from simulator.pve.lxc import Node

    pid = LxcRuntime(hp, Node(hp).cfg).init_pid(vmid)
    return f"/proc/{pid}/ns/net" if pid else None


def _bridge_address(hp: HostPaths, vmid: int) -> str | None:
    """The container's address on its host's bridge (None: no readable host.json)."""
    try:
        cfg = json.loads(hp.config.read_text())
    except (OSError, ValueError):
        return None
    from simulator.lxc.net import host_net

    return host_net(cfg["address"], cfg["sim_id"]).ct_ip(vmid)


def connect_in_ct(hp: HostPaths, vmid: int, port: int, timeout_s: float = 5.0) -> socket.socket:
    """A TCP connection to the container's server: its bridge address, else (a server bound to the container's
    127.0.0.1, the profile's default host) 127.0.0.1:port inside its network namespace."""
    address = _bridge_address(hp, vmid)
    if address is None:
        raise ConnectionRefusedError(f"CT {vmid}: host {hp.name} has no readable host.json")
    try:
        sock = socket.create_connection((address, port), timeout=timeout_s)
        sock.settimeout(None)
        return sock
    except ConnectionRefusedError:
        ns_file = _ns_file(hp, vmid)
        if ns_file is None:
            raise
        return _connect_via(ns_file, vmid, port, timeout_s)


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


def _splice(client: socket.socket, upstream: socket.socket) -> None:
    """Copy both ways until each side has closed, then close both."""
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _relay(client: socket.socket, hp: HostPaths, vmid: int, port: int) -> None:
    try:
        upstream = connect_in_ct(hp, vmid, port)
    except OSError:
        client.close()
        return
    _splice(client, upstream)


def _relay_out(client: socket.socket, address: str, port: int) -> None:
    """A connection made inside the container, relayed to ADDRESS:PORT outside it."""
    try:
        upstream = socket.create_connection((address, port), timeout=5.0)
        upstream.settimeout(None)
    except OSError:
        client.close()
        return
    _splice(client, upstream)


def _accept_out(listener: socket.socket, address: str, port: int) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:  # closed: the container stopped
            return
        threading.Thread(target=_relay_out, args=(client, address, port), daemon=True).start()


def sim_host_addresses(hp: HostPaths) -> list[str]:
    """Every simulated host's address in this host's sim root (hosts/<name>/host.json)."""
    out = []
    for conf in sorted(hp.dir.parent.glob("*/host.json")):
        try:
            out.append(str(json.loads(conf.read_text())["address"]))
        except (OSError, ValueError, KeyError):
            continue
    return out


def _listen_in_ct(ns_file: str, addresses: list[str], port: int) -> dict[str, socket.socket]:
    """Listening sockets on ADDRESS:PORT inside the netns `ns_file` (made by a thread that joined it)."""
    made: dict[str, socket.socket] = {}

    def join_and_listen() -> None:
        try:
            nsutil.setns(ns_file, nsutil.CLONE_NEWNET)
        except OSError:
            return
        for address in addresses:
            try:
                made[address] = socket.create_server((address, port), backlog=128)
            except OSError:  # taken inside the container (e.g. a server bound to 0.0.0.0): leave that one be
                continue

    t = threading.Thread(target=join_and_listen, daemon=True)
    t.start()
    t.join(10)
    return made


def serve_outbound(hp: HostPaths, vmid: int, port: int, poll_s: float = 0.5) -> None:
    """Keep listeners for every sim host's ADDRESS:PORT inside the running container; remake them on restart."""
    netns: str | None = None
    listeners: dict[str, socket.socket] = {}
    tracker = NetnsTracker(hp, vmid)
    while True:
        ns = tracker.current() if tracker.router_here() else None
        if ns != netns:
            for sock in listeners.values():
                sock.close()
            listeners, netns = {}, ns
        if ns is not None:
            missing = [a for a in sim_host_addresses(hp) if a not in listeners]
            if missing:
                for address, sock in _listen_in_ct(ns, missing, port).items():
                    listeners[address] = sock
                    threading.Thread(target=_accept_out, args=(sock, address, port), daemon=True).start()
        time.sleep(poll_s)


def serve(host_dir: Path, address: str, ports: list[int], vmid: int = DEFAULT_VMID,
          outbound_port: int | None = None) -> None:
    assert address.startswith("127."), "the simulator only listens on 127.0.0.0/8"
    hp = HostPaths(host_dir)
    for port in ports:
        listener = socket.create_server((address, port), backlog=128)
        threading.Thread(target=_accept_in, args=(listener, hp, vmid, port), daemon=True).start()
    if outbound_port is not None:
        serve_outbound(hp, vmid, outbound_port)
    else:
        threading.Event().wait()


def _accept_in(listener: socket.socket, hp: HostPaths, vmid: int, port: int) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_relay, args=(client, hp, vmid, port), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    ports = [int(p) for p in args[2].split(",")]
    serve(Path(args[0]), args[1], ports, int(args[3]) if len(args) > 3 else DEFAULT_VMID, outbound_port=ports[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
