"""What pve-container writes into a Debian container's /etc/network/interfaces at every start (pure).

PVE::LXC::Setup::Debian::setup_network: for each `netN` with a name, `ip=dhcp|manual` becomes `iface NAME inet
dhcp|manual`, a static `ip=A/N` becomes `iface NAME inet static` with `address`, a dotted `netmask` and `gateway`
from `gw=` (a gateway outside the subnet gets the post-up route lines instead). Sections of other interfaces and
lines outside sections are kept; an `auto NAME` is added once; a file without `auto lo` gets the loopback stanza
first. The container's own ifupdown (networking.service) then brings the interface up, with dhclient for dhcp,
so the address really comes from the site's DHCP server, as on a real node.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class IfaceV4:
    """One interface's IPv4 setting from a `netN` property string."""

    name: str
    method: str  # "dhcp", "manual" or "static"
    address: str | None = None
    netmask: str | None = None
    gateway: str | None = None
    needs_route: bool = False


def iface_from_net(items: dict[str, str]) -> IfaceV4 | None:
    """None when the netN has no name or no `ip=` (PVE writes no inet section then)."""
    name, ip = items.get("name"), items.get("ip")
    if not name or not ip:
        return None
    if ip in ("dhcp", "manual"):
        return IfaceV4(name, ip)
    iface = ipaddress.IPv4Interface(ip)
    gw = items.get("gw")
    needs_route = gw is not None and ipaddress.IPv4Address(gw) not in iface.network
    return IfaceV4(name, "static", str(iface.ip), str(iface.netmask), gw, needs_route)


def _gateway_lines(ifname: str, gw: str) -> list[str]:
    return ["# --- BEGIN PVE ---", f"\tpost-up ip route add {gw} dev {ifname}",
            f"\tpost-up ip route add default via {gw} dev {ifname}",
            f"\tpre-down ip route del default via {gw} dev {ifname}", f"\tpre-down ip route del {gw} dev {ifname}",
            "# --- END PVE ---"]


@dataclass
class _Section:
    ifname: str
    attrs: list[str] = field(default_factory=list)


def _stanza(net: IfaceV4, attrs: list[str]) -> list[str]:
    if net.method != "static":
        return [f"iface {net.name} inet {net.method}", ""]
    out = [f"iface {net.name} inet static", f"\taddress {net.address}", f"\tnetmask {net.netmask}"]
    if net.gateway is not None:
        out += _gateway_lines(net.name, net.gateway) if net.needs_route else [f"\tgateway {net.gateway}"]
    return [*out, *(f"\t{a}" for a in attrs), ""]


def render_interfaces(existing: str, nets: list[IfaceV4]) -> str:
    """The new /etc/network/interfaces from the old one and the container's netN settings."""
    by_name = {n.name: n for n in nets}
    out: list[str] = []
    done_auto: set[str] = set()
    done: set[str] = set()
    section: _Section | None = None
    in_pve_block = False

    def flush() -> None:
        nonlocal section
        if section is None:
            return
        if section.ifname not in done_auto:
            out.append(f"auto {section.ifname}")
            done_auto.add(section.ifname)
        out.extend(_stanza(by_name[section.ifname], section.attrs))
        done.add(section.ifname)
        section = None

    for line in existing.splitlines():
        if re.match(r"^# --- (BEGIN|END) PVE ---", line):
            in_pve_block = line.startswith("# --- BEGIN")
            continue
        if in_pve_block and section is not None:
            continue
        if line.startswith("#"):
            out.append(line)
            continue
        if not line.strip():
            if section is not None:
                flush()
            else:
                out.append(line)
            continue
        m = re.match(r"^\s*iface\s+(\S+)\s+inet\s+\S+\s*$", line)
        if m:
            flush()
            if m.group(1) in by_name:
                section = _Section(m.group(1))
            else:
                out.append(line)
            continue
        m = re.match(r"^\s*auto\s*(.*)$", line)
        if m:
            done_auto.update(m.group(1).split())
            flush()
            out.append(line)
            continue
        if re.match(r"^\s*(mapping\s|allow-|source\s|source-directory\s)", line):
            flush()
            out.append(line)
            continue
        if section is not None:
            attr = line.strip()
            if attr.split()[0] not in ("address", "netmask", "gateway", "broadcast"):
                section.attrs.append(attr)
            continue
        out.append(line)
    flush()
    text = "\n".join(out) + ("\n" if out else "")
    for net in sorted(nets, key=lambda n: n.name):
        if net.name in done:
            continue
        if text and not text.endswith("\n\n"):
            text += "\n"
        section = _Section(net.name)
        out = []
        flush()
        text += "\n".join(out) + "\n"
    if "lo" not in done_auto:
        text = "auto lo\niface lo inet loopback\niface lo inet6 loopback\n\n" + text
    return text
