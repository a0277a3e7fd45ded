"""Container addresses on the site network: net0's static ip=, `ip -4 -o addr` from inside the container, and the
plan's note for a server on the LAN without a key."""

from __future__ import annotations

from orchestrator.inventory.loader import load_inventory
from orchestrator.parsers.netaddr import net0_ifname, net0_static_ip, parse_ip_addr
from orchestrator.verdicts.exposure import keyless_on_lan, on_lan
from tests.shared import EXAMPLE_INVENTORY

#: `ip -4 -o addr show dev eth0` in a Debian 12 container with a DHCP lease (captured on the simulator's site).
DHCP_CAPTURE = ("2: eth0    inet 10.163.88.2/22 brd 10.163.91.255 scope global dynamic eth0\\       "
                "valid_lft 3587sec preferred_lft 3587sec\n")


def test_the_address_comes_from_inside_the_container() -> None:
    assert parse_ip_addr(DHCP_CAPTURE) == "10.163.88.2"
    assert parse_ip_addr("") is None  # no lease yet: no guess
    assert parse_ip_addr("1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever\n") is None


def test_a_static_ip_in_net0_is_the_address() -> None:
    assert net0_static_ip("name=eth0,bridge=vmbr0,ip=10.20.1.7/22,gw=10.20.0.1,hwaddr=BC:24:11:00:00:01") == "10.20.1.7"
    assert net0_static_ip("name=eth0,bridge=vmbr0,ip=dhcp") is None
    assert net0_static_ip("name=eth0,bridge=vmbr0") is None
    assert net0_ifname("bridge=vmbr0,name=eth1,ip=dhcp") == "eth1" and net0_ifname("bridge=vmbr0") == "eth0"


def test_plan_notes_a_keyless_server_on_the_lan() -> None:
    profile = load_inventory(EXAMPLE_INVENTORY).profiles["glm5-nvfp4"]
    assert profile.host == "0.0.0.0"  # the example binds where the router reaches it
    keyless = profile.model_copy(update={"api_key": None})
    note = keyless_on_lan("glm5-nvfp4", keyless)
    assert note is not None and "no api_key" in note and "profiles.glm5-nvfp4.api_key" in note
    assert keyless_on_lan("glm5-nvfp4", keyless.model_copy(update={"host": "127.0.0.1"})) is None
    assert on_lan("10.20.0.4") and not on_lan("localhost") and not on_lan("::1")
