"""Per-host container network: a bridge with a private /24, nft masquerade and a filter, ip_forward bookkeeping.

Host sim-N (address 127.0.0.(N+1)) gets 172.30.N.0/24: the bridge holds 172.30.N.1 (host.json `bridge_address`,
where simulator services for containers listen) and a container VMID gets 172.30.N.(VMID % 250 + 2). Containers
reach the bridge address and, through NAT, public addresses and this machine's DNS servers; private,
loopback, link-local and multicast ranges and this machine's own LAN are dropped. ip_forward is switched on while
any simulated bridge exists on the machine and restored to its earlier value when the last one goes.
"""

from __future__ import annotations

import fcntl
import ipaddress
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SUBNET_BASE = "172.30"
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
#: Machine-wide bookkeeping of ip_forward: one file per live bridge plus the value found before the first one.
FWD_STATE = Path("/run/deploy-sim-net")
#: Private, loopback, link-local, shared and multicast space; plus, at run time, this machine's own LAN subnets.
#: (Documentation ranges stay open: on a sandboxed machine the package registries may appear there.)
BLOCKED = ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
           "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4")


class NetError(RuntimeError):
    pass


@dataclass(frozen=True)
class HostNet:
    """The names and addresses of one simulated host's container network."""

    bridge: str
    table: str
    subnet: str
    bridge_ip: str

    @property
    def bridge_cidr(self) -> str:
        return f"{self.bridge_ip}/24"

    def ct_ip(self, vmid: int) -> str:
        return f"{self.subnet.rsplit('.', 1)[0]}.{vmid % 250 + 2}"


def host_net(address: str, sim_id: str) -> HostNet:
    """Names from the host's loopback address: sim-N on 127.0.0.(N+1) gets 172.30.N.0/24."""
    n = int(address.rsplit(".", 1)[1]) - 1
    return HostNet(bridge=f"dsb{sim_id[:6]}{n}"[:15], table=f"dsim_{sim_id}_{n}",
                   subnet=f"{SUBNET_BASE}.{n}.0", bridge_ip=f"{SUBNET_BASE}.{n}.1")


def _run(argv: list[str], stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise NetError(f"command '{' '.join(argv)}' failed: {res.stderr.strip()}")
    return res


def nameservers(resolv: Path = Path("/etc/resolv.conf")) -> list[str]:
    out = []
    for line in resolv.read_text().splitlines() if resolv.is_file() else []:
        m = re.match(r"\s*nameserver\s+(\S+)", line)
        if m:
            try:
                if ipaddress.ip_address(m.group(1)).version == 4:
                    out.append(m.group(1))
            except ValueError:
                continue
    return out


def local_subnets() -> list[str]:
    """Subnets this machine is directly attached to (its LAN), from the kernel's connected routes."""
    res = _run(["ip", "-4", "-o", "route", "show", "scope", "link"], check=False)
    out = []
    for line in res.stdout.splitlines():
        dest = line.split()[0] if line.split() else ""
        try:
            out.append(str(ipaddress.ip_network(dest, strict=False)))
        except ValueError:
            continue
    return out


def ruleset(net: HostNet, dns: list[str], lan: list[str]) -> str:
    """The host's nft table (pure): masquerade out, containers reach the bridge address, DNS and public space."""
    blocked = list(dict.fromkeys([*BLOCKED, *(n for n in lan if n != f"{net.subnet}/24")]))
    allow_dns = f"        iifname \"{net.bridge}\" ip daddr {{ {', '.join(dns)} }} accept\n" if dns else ""
    return (
        f"table ip {net.table} {{\n"
        f"    chain ct_post {{\n        type nat hook postrouting priority srcnat; policy accept;\n"
        f"        ip saddr {net.subnet}/24 oifname != \"{net.bridge}\" masquerade\n    }}\n"
        f"    chain ct_forward {{\n        type filter hook forward priority filter; policy accept;\n"
        f"        iifname \"{net.bridge}\" oifname \"{net.bridge}\" accept\n"
        f"        oifname \"{net.bridge}\" ct state established,related accept\n"
        f"        oifname \"{net.bridge}\" drop\n"
        f"{allow_dns}"
        f"        iifname \"{net.bridge}\" ip daddr {{ {', '.join(blocked)} }} drop\n    }}\n"
        f"    chain ct_input {{\n        type filter hook input priority filter; policy accept;\n"
        f"        iifname \"{net.bridge}\" ip daddr != {net.bridge_ip} drop\n    }}\n"
        f"}}\n"
    )


@contextmanager
def _fwd_lock() -> Iterator[None]:
    FWD_STATE.mkdir(parents=True, exist_ok=True)
    with open(FWD_STATE / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def up(net: HostNet) -> None:
    """Create the bridge, its address and nft table (idempotent); switch ip_forward on."""
    if _run(["ip", "link", "show", net.bridge], check=False).returncode != 0:
        _run(["ip", "link", "add", net.bridge, "type", "bridge"])
    addrs = _run(["ip", "-o", "-4", "addr", "show", "dev", net.bridge]).stdout
    if net.bridge_cidr not in addrs:
        _run(["ip", "addr", "add", net.bridge_cidr, "dev", net.bridge])
    _run(["ip", "link", "set", net.bridge, "up"])
    _run(["nft", "delete", "table", "ip", net.table], check=False)
    _run(["nft", "-f", "-"], stdin=ruleset(net, nameservers(), local_subnets()))
    with _fwd_lock():
        original = FWD_STATE / "ip_forward.original"
        if not original.exists():
            original.write_text(IP_FORWARD.read_text())
        (FWD_STATE / net.bridge).touch()
        IP_FORWARD.write_text("1\n")


def down(net: HostNet) -> None:
    """Remove the bridge and nft table; restore ip_forward when no simulated bridge is left (idempotent)."""
    _run(["ip", "link", "del", net.bridge], check=False)
    _run(["nft", "delete", "table", "ip", net.table], check=False)
    with _fwd_lock():
        (FWD_STATE / net.bridge).unlink(missing_ok=True)
        original = FWD_STATE / "ip_forward.original"
        live = [p for p in FWD_STATE.iterdir() if not p.name.startswith((".", "ip_forward"))]
        if not live and original.exists():
            IP_FORWARD.write_text(original.read_text())
            original.unlink()


def leftovers(net: HostNet) -> list[str]:
    """What of this host's network still exists (for `sim down` checks)."""
    out = []
    if _run(["ip", "link", "show", net.bridge], check=False).returncode == 0:
        out.append(f"bridge {net.bridge}")
    if _run(["nft", "list", "table", "ip", net.table], check=False).returncode == 0:
        out.append(f"nft table {net.table}")
    return out
