"""The site network of a simulator root: two hosts' containers on one bridge, DHCP from dnsmasq for `ip=dhcp`, a
static `ip=A/N,gw=G` as PVE writes it, this machine reaching container addresses as from a LAN, no relay on node
addresses, and distinct roots on distinct, free subnets."""

from __future__ import annotations

import ipaddress
import json
import shlex
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from simulator.lxc import net
from tests import sim_hosts
from tests.conftest import sim_root
from tests.sim.conftest import Ssh
from tests.sim.lxc_support import TEMPLATE, create_and_start, lxc_skip_reason
from tests.sim.test_lxc_runtime import ANSWER, SOCKET, ct_address

pytestmark = pytest.mark.timeout(600)


@dataclass
class Site:
    root: Path
    infos: list[Any]
    ssh: list[Ssh]
    site: net.SiteNet


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    reason = lxc_skip_reason()
    if reason:
        pytest.skip(reason)
    # two numbers that no other module's root holds while this one runs (modules run one after the other)
    with sim_root(tmp_path_factory, "site-net", sim_hosts.OFFSET_ROUTER_API, hosts=2) as (root, infos):
        record = net.SitePaths(root).load()
        assert record is not None
        conns = [Ssh(i) for i in infos]
        try:
            yield Site(root, infos, conns, record)
        finally:
            for c in conns:
                c.close()


def _serve_hostname(ssh: Ssh, vmid: int) -> None:
    for path, text in (("/etc/systemd/system/name.socket", SOCKET), ("/etc/systemd/system/name@.service", ANSWER)):
        assert ssh.run(f"pct exec {vmid} -- sh -c {shlex.quote(f'cat > {path}')}", stdin=text).rc == 0
    res = ssh.run(f"pct exec {vmid} -- sh -c 'systemctl daemon-reload && systemctl enable --now name.socket'")
    assert res.rc == 0, res


def _read(address: str, port: int = 8000) -> str:
    with socket.create_connection((address, port), timeout=10) as s:
        return s.makefile().read().strip()


def test_hosts_of_one_root_share_one_site(site: Site) -> None:
    addresses = [json.loads((Path(i.host_dir) / "host.json").read_text())["bridge_address"] for i in site.infos]
    assert len(set(addresses)) == 2
    assert all(ipaddress.ip_address(a) in site.site.network for a in addresses)
    assert net.leftovers(site.site) == [f"bridge {site.site.bridge}", f"nft table {site.site.table}"]
    # the hosts' services for containers listen on their own site addresses (the inventory points at them)
    inv = (site.root / "inventory.yaml").read_text()
    assert all(f"http://{a}:" in inv for a in addresses)


def test_dhcp_and_static_addresses_across_two_hosts(site: Site) -> None:
    a, b = site.ssh
    create_and_start(a, 120)  # net0: ip=dhcp
    static = site.site.static_address(5)
    try:
        res = b.run(f"pct create 120 {TEMPLATE} --hostname ct120 --unprivileged 0 --net0 name=eth0,bridge=vmbr0,"
                    f"ip={static}/{site.site.prefixlen},gw={site.site.gateway} && pct start 120", timeout=120)
        assert res.rc == 0, res
        # what pve-container writes, so the container's own ifupdown asks DHCP / sets the static address
        assert "iface eth0 inet dhcp" in a.run("pct exec 120 -- cat /etc/network/interfaces").out
        conf = b.run("pct exec 120 -- cat /etc/network/interfaces").out
        assert (f"iface eth0 inet static\n\taddress {static}\n\tnetmask {site.site.network.netmask}\n"
                f"\tgateway {site.site.gateway}\n") in conf
        leased = ct_address(a, 120)
        first, last = site.site.dhcp_range
        assert ipaddress.ip_address(first) <= ipaddress.ip_address(leased) <= ipaddress.ip_address(last)
        assert leased in net.SitePaths(site.root).leases.read_text()  # dnsmasq's lease file in the root
        assert "dhclient" in a.run("pct exec 120 -- ps -eo comm").out  # the container's own DHCP client
        assert ct_address(b, 120) == static
        # the PVE API's interfaces call reports what the container has
        node = site.infos[0].node
        ifaces = json.loads(a.run(f"pvesh get /nodes/{node}/lxc/120/interfaces --output-format json").out)
        assert any(i["name"] == "eth0" and i.get("inet") == f"{leased}/{site.site.prefixlen}" for i in ifaces)
        for s in (a, b):
            _serve_hostname(s, 120)
        # this machine reaches both containers as from the LAN; the node addresses forward nothing
        assert _read(leased) == "ct120" and _read(static) == "ct120"
        for info in site.infos:
            with pytest.raises(ConnectionRefusedError):
                _read(info.address)
        # a container on host A reaches one on host B over the site network
        res = a.run(f"pct exec 120 -- timeout 10 bash -c 'exec 3<>/dev/tcp/{static}/8000 && cat <&3'")
        assert res.rc == 0 and res.out.strip() == "ct120", res
    finally:
        for s in (a, b):
            s.run("pct stop 120; pct destroy 120", timeout=60)


def test_another_root_gets_another_free_subnet(site: Site, tmp_path_factory: pytest.TempPathFactory) -> None:
    with sim_root(tmp_path_factory, "site-net-2", sim_hosts.OFFSET_SECOND_ROOT) as (root, _infos):
        other = net.SitePaths(root).load()
        assert other is not None and other.bridge != site.site.bridge
        assert not other.network.overlaps(site.site.network)
    assert net.leftovers(other) == [] and net.SitePaths(root).load() is None  # `sim down` removed that site only
    assert net.leftovers(site.site) == [f"bridge {site.site.bridge}", f"nft table {site.site.table}"]


def test_a_bridge_name_taken_by_another_root_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    """Issue 38: a root whose bridge name already existed failed `sim up` with `RTNETLINK answers: File exists`
    and a fix that said only "see docs/simulator.md". Now: exit 2 before any change, naming the bridge, who left
    it and what to run."""
    reason = lxc_skip_reason()
    if reason:
        pytest.skip(reason)
    import os
    import subprocess
    import sys

    from simulator.config import sim_id_for

    root = tmp_path / "root"
    bridge = net.bridge_name(sim_id_for(root))
    assert net._run(["ip", "link", "add", bridge, "type", "bridge"], check=False).returncode == 0
    try:
        env = {**os.environ, "DEPLOY_STATE_DIR": str(tmp_path / "state")}
        res = subprocess.run([sys.executable, "-m", "orchestrator", "--inventory", str(tmp_path / "inv"), "sim", "up",
                              "--root", str(root), "--first", str(sim_hosts.sim_number(sim_hosts.OFFSET_SECOND_ROOT))],
                             capture_output=True, text=True, env=env, timeout=120)
    finally:
        net._run(["ip", "link", "del", bridge], check=False)
    text = " ".join(res.stderr.split())
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"the site bridge {bridge} of root {root.resolve()} already exists" in text and "File exists" not in text
    assert f"`ip link del {bridge}`" in text and "Traceback" not in text
    assert not root.exists() and not (tmp_path / "inv").exists()  # nothing was made
