"""The site network of one simulator root: one bridge every simulated host's containers attach to, like vmbr0 on a
site's LAN, with a DHCP server, nft masquerade and a filter, and ip_forward bookkeeping.

- One root, one site: bridge `dss<sim id>` with a /22 chosen from SITE_POOL that no route or address of this
  machine overlaps (checked under a machine-wide lock, so parallel roots never pick the same one). It is recorded
  in <root>/site/site.json, made by the first `sim up` and removed by `sim down`.
- Addresses on a /22 site: .0.1 the gateway (this machine's side, where the operator reaches containers from, as
  from a LAN); .0.2-.0.255 the simulated hosts' own LAN addresses (host.json `bridge_address`, where the
  simulator services for containers listen); .1.x free for static `ip=` addresses; .2.1-.3.254 the DHCP pool.
- DHCP: Debian's dnsmasq on the bridge answers `net0: ip=dhcp` (leases in <root>/site/); it hands out the gateway
  and this machine's DNS servers.
- Containers reach the site's addresses, this machine's DNS servers and, through NAT, public addresses; private,
  loopback, link-local and multicast ranges and this machine's own LAN are dropped. Nothing from outside the
  bridge is forwarded into it except replies. ip_forward is switched on while any simulated bridge exists on the
  machine and restored to its earlier value when the last one goes.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from simulator import procs

IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
#: Machine-wide bookkeeping of ip_forward: one file per live bridge plus the value found before the first one.
FWD_STATE = Path("/run/deploy-sim-net")
#: Where sites are carved from, a /22 each (private space no simulated host uses for anything else).
SITE_POOL = ipaddress.IPv4Network("10.128.0.0/9")
SITE_PREFIX = 22
#: Private, loopback, link-local, shared and multicast space; plus, at run time, this machine's own LAN subnets.
#: (Documentation ranges stay open: on a sandboxed machine the package registries may appear there.)
BLOCKED = ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
           "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4")
LEASE_TIME = "1h"


class NetError(RuntimeError):
    pass


class BridgeTaken(NetError):
    """The root's bridge name exists on this machine but is not this root's: said before anything is created,
    with who owns it and what to run (`ip link add` would only say `RTNETLINK answers: File exists`)."""

    def __init__(self, what: str, fix: str) -> None:
        self.what, self.fix = what, fix
        super().__init__(f"{what}\n  fix: {fix}")


@dataclass(frozen=True)
class SiteNet:
    """The names and addresses of one root's site network (<root>/site/site.json)."""

    bridge: str
    table: str
    subnet: str  # CIDR, e.g. 10.131.4.0/22

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.subnet)

    def _at(self, offset: int) -> str:
        return str(self.network.network_address + offset)

    @property
    def gateway(self) -> str:
        return self._at(1)

    @property
    def prefixlen(self) -> int:
        return self.network.prefixlen

    def host_address(self, slot: int) -> str:
        """A simulated host's LAN address (slot 0..253)."""
        if not 0 <= slot < 254:
            raise NetError(f"a site holds at most 254 simulated hosts (slot {slot})")
        return self._at(2 + slot)

    def static_address(self, n: int) -> str:
        """An address outside the DHCP pool and the hosts' range, for a static `ip=` (n 0..255)."""
        return self._at(256 + n)

    @property
    def dhcp_range(self) -> tuple[str, str]:
        return self._at(512 + 1), self._at(self.network.num_addresses - 2)


def bridge_name(sim_id: str) -> str:
    return f"dss{sim_id}"[:15]


def site_for(sim_id: str, subnet: str) -> SiteNet:
    return SiteNet(bridge=bridge_name(sim_id), table=f"dsite_{sim_id}", subnet=subnet)


def bridge_taken(root: Path, bridge: str, *, exists: bool, recorded: bool, owner: str | None) -> BridgeTaken | None:
    """Pure: why `root` cannot have `bridge` (None when it can). `recorded`: the root's site.json names it;
    `owner`: the root that made it, by its marker in FWD_STATE (None: no marker)."""
    if not exists:
        return None
    mine = str(root)
    if recorded and owner in (None, mine):
        return None  # this root's own bridge (a marker-less one is from before markers were written)
    table = f"dsite_{bridge.removeprefix('dss')}"
    remove = f"`ip link del {bridge}` and `nft delete table ip {table}`"
    if owner is not None and owner != mine and Path(owner).exists():
        return BridgeTaken(f"the site bridge {bridge} of root {mine} already exists: simulator root {owner} made "
                           "it (their ids share a bridge name); nothing was created",
                           f"stop that root with `deploy sim down --root {owner}`, or start this one with another "
                           "--root")
    made = (f"root {owner}, which is gone" if owner is not None and owner != mine else
            "an earlier root at this path, removed without `deploy sim down`" if owner == mine else
            "something else than this root (no record of it in <root>/site/site.json)")
    return BridgeTaken(f"the site bridge {bridge} of root {mine} already exists, left by {made}; nothing was "
                       "created", f"remove the leftover with {remove} (as root), then run `deploy sim up` again; or "
                       "start this root with another --root")


def check_bridge_free(root: Path, sim_id: str) -> None:
    """Before `sim up` creates anything: BridgeTaken when the root's bridge name is taken by another's."""
    site = SitePaths(root).load()
    bridge = site.bridge if site is not None else bridge_name(sim_id)
    marker = FWD_STATE / bridge
    try:
        owner: str | None = marker.read_text().strip() or None
    except OSError:
        owner = None
    problem = bridge_taken(root.resolve(), bridge, exists=_bridge_exists(bridge), recorded=site is not None,
                           owner=owner)
    if problem is not None:
        raise problem


class SitePaths:
    """<root>/site/: the site's record, the DHCP server's pid, log and leases."""

    def __init__(self, root: Path) -> None:
        self.dir = Path(root) / "site"
        self.record = self.dir / "site.json"
        self.pid = self.dir / "dnsmasq.pid"
        self.log = self.dir / "dnsmasq.log"
        self.leases = self.dir / "dnsmasq.leases"

    def load(self) -> SiteNet | None:
        try:
            return SiteNet(**json.loads(self.record.read_text()))
        except (OSError, ValueError, TypeError):
            return None


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


def used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 route destination (all tables) and interface address on this machine."""
    out: list[ipaddress.IPv4Network] = []
    routes = _run(["ip", "-4", "-o", "route", "show", "table", "all"], check=False).stdout
    addrs = _run(["ip", "-4", "-o", "addr", "show"], check=False).stdout
    words = [ln.split()[0] for ln in routes.splitlines() if ln.split()]
    words += [m.group(1) for m in re.finditer(r"\binet (\S+)", addrs)]
    for word in words:
        if word in ("default", "broadcast", "local", "unreachable", "blackhole", "prohibit", "multicast"):
            continue
        try:
            out.append(ipaddress.IPv4Network(word, strict=False))
        except ValueError:
            continue
    return out


def pick_subnet(sim_id: str, used: Iterable[ipaddress.IPv4Network]) -> str:
    """The first /22 of SITE_POOL, starting at one derived from the root's id, that overlaps nothing in `used`
    (pure: the caller holds the machine-wide lock and passes what exists)."""
    taken = [n for n in used if n.prefixlen > 0]
    blocks: list[ipaddress.IPv4Network] = list(SITE_POOL.subnets(new_prefix=SITE_PREFIX))
    start = int(hashlib.sha1(sim_id.encode()).hexdigest(), 16) % len(blocks)
    for i in range(len(blocks)):
        cand = blocks[(start + i) % len(blocks)]
        if not any(cand.overlaps(n) for n in taken):
            return str(cand)
    raise NetError(f"no free /{SITE_PREFIX} left in {SITE_POOL} for a simulated site")


def ruleset(site: SiteNet, dns: list[str], lan: list[str]) -> str:
    """The site's nft table (pure): masquerade out; containers reach the site, DNS and public space; DHCP in."""
    blocked = list(dict.fromkeys([*BLOCKED, *(n for n in lan if n != site.subnet)]))
    br = site.bridge
    allow_dns = f"        iifname \"{br}\" ip daddr {{ {', '.join(dns)} }} accept\n" if dns else ""
    return (
        f"table ip {site.table} {{\n"
        f"    chain ct_post {{\n        type nat hook postrouting priority srcnat; policy accept;\n"
        f"        ip saddr {site.subnet} oifname != \"{br}\" masquerade\n    }}\n"
        f"    chain ct_forward {{\n        type filter hook forward priority filter; policy accept;\n"
        f"        iifname \"{br}\" oifname \"{br}\" accept\n"
        f"        oifname \"{br}\" ct state established,related accept\n"
        f"        oifname \"{br}\" drop\n"
        f"{allow_dns}"
        f"        iifname \"{br}\" ip daddr {site.subnet} accept\n"
        f"        iifname \"{br}\" ip daddr {{ {', '.join(blocked)} }} drop\n    }}\n"
        f"    chain ct_input {{\n        type filter hook input priority filter; policy accept;\n"
        f"        iifname \"{br}\" udp sport 68 udp dport 67 accept\n"
        f"        iifname \"{br}\" ip daddr != {site.subnet} drop\n    }}\n"
        f"}}\n"
    )


def dnsmasq_argv(site: SiteNet, paths: SitePaths, dns: list[str]) -> list[str]:
    """Debian's dnsmasq as a DHCP server only (port 0: no DNS), bound to the site bridge alone, as libvirt runs
    one per network; leases and pid in <root>/site/."""
    first, last = site.dhcp_range
    argv = [shutil.which("dnsmasq") or "/usr/sbin/dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null",
            "--port=0", "--bind-dynamic", f"--interface={site.bridge}", "--except-interface=lo",
            f"--pid-file={paths.pid}", f"--dhcp-leasefile={paths.leases}", "--dhcp-authoritative",
            "--user=root", "--group=root", "--log-dhcp", "--log-facility=-",
            f"--dhcp-range={first},{last},{site.network.netmask},{LEASE_TIME}",
            f"--dhcp-option=option:router,{site.gateway}"]
    if dns:
        argv.append(f"--dhcp-option=option:dns-server,{','.join(dns)}")
    return argv


@contextmanager
def _fwd_lock() -> Iterator[None]:
    FWD_STATE.mkdir(parents=True, exist_ok=True)
    with open(FWD_STATE / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _bridge_exists(name: str) -> bool:
    return _run(["ip", "link", "show", name], check=False).returncode == 0


def site_up(root: Path, sim_id: str) -> SiteNet:
    """The root's site network, made if missing (idempotent): bridge, gateway address, nft table, DHCP server."""
    paths = SitePaths(root)
    paths.dir.mkdir(parents=True, exist_ok=True)
    with _fwd_lock():
        site = paths.load()
        if site is None or not _bridge_exists(site.bridge):
            if site is not None:
                _run(["nft", "delete", "table", "ip", site.table], check=False)
            site = site_for(sim_id, pick_subnet(sim_id, used_networks()))
            _run(["ip", "link", "add", site.bridge, "type", "bridge"])
            _run(["ip", "addr", "add", f"{site.gateway}/{site.prefixlen}", "dev", site.bridge])
            paths.record.write_text(json.dumps(asdict(site)) + "\n")
            paths.leases.unlink(missing_ok=True)
        _run(["ip", "link", "set", site.bridge, "up"])
        _run(["nft", "delete", "table", "ip", site.table], check=False)
        dns = nameservers()
        _run(["nft", "-f", "-"], stdin=ruleset(site, dns, local_subnets()))
        original = FWD_STATE / "ip_forward.original"
        if not original.exists():
            original.write_text(IP_FORWARD.read_text())
        (FWD_STATE / site.bridge).write_text(f"{Path(root).resolve()}\n")  # who owns it (check_bridge_free)
        IP_FORWARD.write_text("1\n")
    _start_dhcp(site, paths, dns)
    return site


def _start_dhcp(site: SiteNet, paths: SitePaths, dns: list[str]) -> None:
    if procs.read_pid(paths.pid) is not None:
        return
    proc = procs.start_detached(dnsmasq_argv(site, paths, dns), paths.log)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise NetError(f"the site's DHCP server (dnsmasq) exited at once; see {paths.log}")
        if procs.read_pid(paths.pid) == proc.pid:
            return
        time.sleep(0.05)
    proc.kill()
    raise NetError(f"the site's DHCP server (dnsmasq) wrote no pid file within 10 s; see {paths.log}")


def add_host_address(site: SiteNet, address: str) -> None:
    """A simulated host's own LAN address on the site bridge (idempotent)."""
    have = _run(["ip", "-o", "-4", "addr", "show", "dev", site.bridge]).stdout
    if f"inet {address}/" not in have:
        _run(["ip", "addr", "add", f"{address}/{site.prefixlen}", "dev", site.bridge])


def site_down(root: Path) -> None:
    """Stop the DHCP server, remove the bridge and nft table; restore ip_forward when no simulated bridge is left
    (idempotent). Leases and the record go too: the next `sim up` proves a subnet free again."""
    paths = SitePaths(root)
    procs.stop_tree(paths.pid)
    site = paths.load()
    if site is None:
        return
    _run(["ip", "link", "del", site.bridge], check=False)
    _run(["nft", "delete", "table", "ip", site.table], check=False)
    with _fwd_lock():
        (FWD_STATE / site.bridge).unlink(missing_ok=True)
        original = FWD_STATE / "ip_forward.original"
        live = [p for p in FWD_STATE.iterdir() if not p.name.startswith((".", "ip_forward"))]
        if not live and original.exists():
            IP_FORWARD.write_text(original.read_text())
            original.unlink()
    paths.record.unlink(missing_ok=True)
    paths.leases.unlink(missing_ok=True)


def leftovers(site: SiteNet) -> list[str]:
    """What of the site network still exists (for `sim down` checks)."""
    out = []
    if _bridge_exists(site.bridge):
        out.append(f"bridge {site.bridge}")
    if _run(["nft", "list", "table", "ip", site.table], check=False).returncode == 0:
        out.append(f"nft table {site.table}")
    return out


def lease_address(paths: SitePaths, hwaddr: str) -> str | None:
    """The address dnsmasq leased to `hwaddr` (its lease file: EXPIRY MAC IP NAME CLIENT-ID), None if none."""
    try:
        lines = paths.leases.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and parts[1].lower() == hwaddr.lower():
            return parts[2]
    return None
