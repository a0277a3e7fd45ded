"""sim-N addressing: 127.0.0.(N+1) up to sim-253, then on in the next /24s without .0/.255 (fleets of 256+)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from simulator.layout import MAX_HOST_NUMBER
from simulator.layout import host_address as _address
from simulator.manager import sim_up


def test_first_hosts_keep_their_addresses() -> None:
    assert [_address(n) for n in (1, 2, 70, 253)] == ["127.0.0.2", "127.0.0.3", "127.0.0.71", "127.0.0.254"]


def test_addresses_past_sim_253_are_unique_loopback_host_addresses() -> None:
    assert [_address(n) for n in (254, 255, 507, 508)] == ["127.0.1.1", "127.0.1.2", "127.0.1.254", "127.0.2.1"]
    numbers = range(1, MAX_HOST_NUMBER + 1)
    addresses = [_address(n) for n in numbers]
    assert len(set(addresses)) == len(addresses)
    for a in addresses:
        ip = ipaddress.ip_address(a)
        assert ip in ipaddress.ip_network("127.0.0.0/8") and a.rsplit(".", 1)[1] not in ("0", "255")


def test_numbers_past_the_last_address_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must stay within"):
        sim_up(tmp_path, hosts=2, first=MAX_HOST_NUMBER)
