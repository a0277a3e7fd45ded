"""A container's `net0` checked against PVE's own `net[n]` grammar when the inventory loads (pure).

PVE parses `name=eth0,bridge=vmbr0,ip=dhcp` with its JSONSchema property-string format (pve-container's
`net[n]`, docs/reference: `name=<string> [,bridge=<bridge>] [,firewall=<1|0>] [,gw=<GatewayIPv4>] …`): `name` is
required, every other key optional, a key given twice, a key it does not know or a value of the wrong form is
refused (HTTP 400, "Parameter verification failed."). Unchecked, such a net0 passed every local check and failed
on the node, after the plan was shown and the lock taken; `net0_problem` refuses it first, with PVE's reason.
The CIDR prefix bounds are PVE's (pve-common `pve_verify_cidrv4`/`v6`: /8../32, /8../128). One rule beyond the
schema: an interface name longer than 15 bytes (Linux IFNAMSIZ) PVE stores, but the container cannot start.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

from orchestrator.errors import did_you_mean

GRAMMAR = ("name=<string> [,bridge=<bridge>] [,firewall=<1|0>] [,gw=<IPv4>] [,gw6=<IPv6>] [,host-managed=<1|0>] "
           "[,hwaddr=<XX:XX:XX:XX:XX:XX>] [,ip=<IPv4/CIDR|dhcp|manual>] [,ip6=<IPv6/CIDR|auto|dhcp|manual>] "
           "[,link_down=<1|0>] [,mtu=<64-65535>] [,rate=<mbps>] [,tag=<1-4094>] [,trunks=<vlanid[;vlanid...]>] "
           "[,type=veth]")
IFNAMSIZ = 15
_WORD = re.compile(r"[-_.\w]+")
_BOOL = {"1", "0", "true", "false", "yes", "no", "on", "off"}


def _pattern(rx: re.Pattern[str], what: str) -> Callable[[str], str | None]:
    return lambda v: None if rx.fullmatch(v) else f"is not {what}"


def _name(v: str) -> str | None:
    if not _WORD.fullmatch(v):
        return "is not an interface name (letters, digits, - _ .)"
    return f"is longer than {IFNAMSIZ} bytes (a Linux interface name)" if len(v.encode()) > IFNAMSIZ else None


def _boolean(v: str) -> str | None:
    return None if v.lower() in _BOOL else "is not a boolean (1 or 0)"


def _integer(low: int, high: int) -> Callable[[str], str | None]:
    def check(v: str) -> str | None:
        if not re.fullmatch(r"[+-]?\d+", v):
            return "is not an integer"
        return None if low <= int(v) <= high else f"is not between {low} and {high}"
    return check


def _number(v: str) -> str | None:
    return None if re.fullmatch(r"[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?", v) else "is not a number (Mbit/s)"


def _address(version: int) -> Callable[[str], str | None]:
    def check(v: str) -> str | None:
        try:
            ipaddress.IPv4Address(v) if version == 4 else ipaddress.IPv6Address(v)
        except ValueError:
            return f"is not an IPv{version} address"
        return None
    return check


def _ip_config(version: int, words: tuple[str, ...]) -> Callable[[str], str | None]:
    top = 32 if version == 4 else 128

    def check(v: str) -> str | None:
        if v in words:
            return None
        addr, sep, prefix = v.partition("/")
        try:
            ipaddress.IPv4Address(addr) if version == 4 else ipaddress.IPv6Address(addr)
            ok = bool(sep) and prefix.isdigit() and 8 <= int(prefix) <= top
        except ValueError:
            ok = False
        return None if ok else f"is not {' or '.join(words)} or an IPv{version} address with a /8../{top} prefix"
    return check


def _mac(v: str) -> str | None:
    ok = re.fullmatch(r"[a-f0-9][02468ace](?::[a-f0-9]{2}){5}", v, re.I)
    return None if ok else "is not a unicast MAC address (XX:XX:XX:XX:XX:XX, the first byte even)"


CHECKS: dict[str, Callable[[str], str | None]] = {
    "name": _name,
    "bridge": _pattern(_WORD, "a bridge name (letters, digits, - _ .)"),
    "firewall": _boolean,
    "gw": _address(4),
    "gw6": _address(6),
    "host-managed": _boolean,
    "hwaddr": _mac,
    "ip": _ip_config(4, ("dhcp", "manual")),
    "ip6": _ip_config(6, ("auto", "dhcp", "manual")),
    "link_down": _boolean,
    "mtu": _integer(64, 65535),
    "rate": _number,
    "tag": _integer(1, 4094),
    "trunks": _pattern(re.compile(r"\d+(;\d+)*"), "VLAN ids separated by ';'"),
    "type": lambda v: None if v == "veth" else "is not veth (the only type PVE has)",
}


def net0_problem(text: str) -> str | None:
    """Why PVE would refuse `text` as a container's net0 (None when it would take it)."""
    seen: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue  # PVE skips empty items (a trailing comma)
        key, sep, value = part.partition("=")
        if not sep:
            return f"{part!r} has no key (every item is key=value)"
        if key in seen:
            return f"key {key!r} is given twice"
        if key not in CHECKS:
            guess = did_you_mean(key, CHECKS)
            return f"unknown key {key!r}" + (f" (did you mean {guess!r}?)" if guess else "")
        seen[key] = value
        problem = CHECKS[key](value)
        if problem:
            return f"{key}={value!r} {problem}"
    if "name" not in seen:
        return "name= is required (the interface in the container, e.g. name=eth0)"
    return None
