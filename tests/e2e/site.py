"""Checks the fleet tests share: worker URLs are container addresses on the root's site network, and nothing on
a node's address answers the server's port (no relay, as on a real PVE node)."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from simulator.lxc import net


def assert_container_urls(root: Path, infos: list[Any], urls: list[str]) -> None:
    site = net.SitePaths(root).load()
    assert site is not None, f"{root} has no site network"
    nodes = {i.address for i in infos}
    for url in urls:
        host = urlsplit(url).hostname or ""
        assert host not in nodes and ipaddress.ip_address(host) in site.network, (url, site.subnet)


def assert_no_relay(infos: list[Any], port: int = 8000) -> None:
    """The node's ADDRESS:PORT refuses: a worker URL on the node's address would find nobody."""
    for info in infos:
        with socket.socket() as s:
            s.settimeout(5)
            assert s.connect_ex((info.address, port)) != 0, f"{info.address}:{port} answers: a relay is back"
