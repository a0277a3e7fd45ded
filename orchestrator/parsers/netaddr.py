"""A container's address on the site network (pure): from `net0`'s static `ip=`, or from `ip -4 -o addr show dev
IFACE` run inside it (a DHCP address is only known there)."""

from __future__ import annotations

import ipaddress
import re
import shlex


def net0_items(net0: str) -> dict[str, str]:
    """PVE's property string `name=eth0,bridge=vmbr0,ip=dhcp` as a dict."""
    out = {}
    for part in net0.split(","):
        key, sep, value = part.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def net0_ifname(net0: str) -> str:
    return net0_items(net0).get("name", "eth0")


def net0_static_ip(net0: str) -> str | None:
    """The address of a static `ip=A/N` (None for dhcp, manual or no ip=)."""
    ip = net0_items(net0).get("ip", "")
    if "/" not in ip:
        return None
    try:
        return str(ipaddress.IPv4Interface(ip).ip)
    except ValueError:
        return None


def address_command(ifname: str) -> str:
    """What is run inside the container (the facts batch, router/addresses.py); parse_ip_addr reads its output."""
    return f"ip -4 -o addr show dev {shlex.quote(ifname)}"


def parse_ip_addr(text: str) -> str | None:
    """The first global IPv4 address in `ip -4 -o addr show dev IFACE` output; None when there is none (no lease
    yet, interface down)."""
    for line in text.splitlines():
        m = re.search(r"\binet (\d+\.\d+\.\d+\.\d+)/\d+\b.*\bscope global\b", line)
        if m:
            return m.group(1)
    return None
