"""A container's net0 is checked at load against PVE's `net[n]` grammar (issue 38): what PVE refuses is exit 2
before any connection, with the reason; what PVE takes loads. Each case is also run through the simulator's
validator of the bundled PVE API schema, so the two agree on what PVE would refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.net0 import net0_problem
from simulator.pve import schema

ACCEPTED = [
    "name=eth0,bridge=vmbr0,ip=dhcp",
    "name=eth0,bridge=vmbr0,ip=10.0.0.5/24,gw=10.0.0.1",
    "name=eth0,bridge=vmbr0,ip=manual,ip6=auto",
    "name=eth1,bridge=vmbr0.20,ip=192.168.1.9/8,ip6=fd00::5/64,gw6=fd00::1,hwaddr=BC:24:11:0A:0B:0C",
    "name=eth0,bridge=vmbr0,firewall=1,link_down=off,host-managed=yes,mtu=9000,rate=12.5,tag=30,trunks=10;20,type=veth",
    "name=eth0,bridge=vmbr0,ip=dhcp,",  # PVE skips an empty item
    "name=eth0",  # no bridge: PVE takes it (an unconnected interface)
]
REFUSED = [
    ("bridge=vmbr0,ip=dhcp", "name= is required"),
    ("eth0,bridge=vmbr0", "'eth0' has no key"),
    ("name=eth0,brigde=vmbr0", "unknown key 'brigde' (did you mean 'bridge'?)"),
    ("name=eth0,name=eth1", "key 'name' is given twice"),
    ("name=eth0,ip=10.0.0.5", "ip='10.0.0.5' is not dhcp or manual or an IPv4 address with a /8../32 prefix"),
    ("name=eth0,ip=10.0.0.5/33", "/8../32 prefix"),
    ("name=eth0,ip=10.0.0.5/4", "/8../32 prefix"),  # pve_verify_cidrv4: the prefix is 8 to 32
    ("name=eth0,ip=static", "ip='static'"),
    ("name=eth0,ip6=fd00::5", "ip6='fd00::5' is not auto or dhcp or manual or an IPv6 address"),
    ("name=eth0,gw=10.0.0.256", "gw='10.0.0.256' is not an IPv4 address"),
    ("name=eth0,hwaddr=BD:24:11:00:00:01", "not a unicast MAC address"),
    ("name=eth0,tag=5000", "tag='5000' is not between 1 and 4094"),
    ("name=eth0,mtu=63", "mtu='63' is not between 64 and 65535"),
    ("name=eth0,mtu=1500.5", "mtu='1500.5' is not an integer"),
    ("name=eth0,firewall=maybe", "firewall='maybe' is not a boolean"),
    ("name=eth0,rate=fast", "rate='fast' is not a number"),
    ("name=eth0,trunks=10,20", "'20' has no key"),
    ("name=eth0,trunks=10;x", "trunks='10;x' is not VLAN ids"),
    ("name=eth0,type=macvlan", "type='macvlan' is not veth"),
    ("name=eth 0,bridge=vmbr0", "name='eth 0' is not an interface name"),
    ("name=eth0,bridge=vmbr0 ", "bridge='vmbr0 ' is not a bridge name"),
    ("name=eth0,bridge=", "bridge='' is not a bridge name"),
]


def _pve_refuses(text: str) -> bool:
    fmt = schema.schema_for_key(schema.find("POST", "/nodes/n/lxc").properties, "net0")  # type: ignore[union-attr]
    assert fmt is not None
    try:
        schema.parse_property_string(fmt["format"], text)
    except ValueError:
        return True
    return False


@pytest.mark.parametrize("text", ACCEPTED)
def test_what_pve_takes_is_taken(text: str) -> None:
    assert net0_problem(text) is None and not _pve_refuses(text)


@pytest.mark.parametrize(("text", "reason"), REFUSED)
def test_what_pve_refuses_is_refused_with_the_reason(text: str, reason: str) -> None:
    problem = net0_problem(text)
    assert problem is not None and reason in problem
    assert _pve_refuses(text)


def test_an_interface_name_linux_cannot_have_is_refused_although_pve_stores_it() -> None:
    assert "longer than 15 bytes" in (net0_problem("name=eth0123456789abc,bridge=vmbr0") or "")
    assert net0_problem("name=eth0123456789ab,bridge=vmbr0") is None  # 15: the longest Linux takes


def test_a_bad_net0_stops_the_inventory_load_naming_the_field_and_the_grammar(inv: Path) -> None:
    hosts = inv / "hosts.yaml"
    hosts.write_text(hosts.read_text().replace("net0: name=eth0,bridge=vmbr0,ip=dhcp",
                                               "net0: name=eth0,brigde=vmbr0,ip=dhcp"))
    with pytest.raises(ConfigError) as exc:
        load_inventory(inv)
    what = exc.value.what
    assert "hosts.pve-gpu-1.container.net0" in what and "unknown key 'brigde' (did you mean 'bridge'?)" in what
    assert "PVE takes name=<string> [,bridge=<bridge>]" in what
