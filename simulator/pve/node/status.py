"""What a node reports of a CT without changing it: its status (`pct status`, GET status/current) and its network
interfaces.
"""

from __future__ import annotations

import re
import time
from typing import Any

from simulator import ctconf as confmod
from simulator.lxc import net as lxc_net
from simulator.pve.node.base import NodeBase


class NodeStatus(NodeBase):
    """Read-only views of a CT."""

    def status(self, vmid: int) -> dict[str, Any]:
        conf, _ = self.read(vmid)
        st = self.state(vmid)
        run = self.running(vmid)
        o = conf.options
        mem = int(o.get("memory", "512")) * 1024 * 1024
        size = confmod.split_property(o.get("rootfs", ""), "volume").get("size", "4G")
        return {
            "vmid": vmid, "name": o.get("hostname", f"CT{vmid}"), "status": "running" if run else "stopped",
            "type": "lxc", "cpus": int(o.get("cores", "1")), "maxmem": mem,
            "maxswap": int(o.get("swap", "512")) * 1024 * 1024, "maxdisk": _size_bytes(size),
            "mem": mem // 20 if run else 0, "swap": 0, "disk": _size_bytes(size) // 10 if run else 0,
            "cpu": 0.01 if run else 0, "uptime": int(time.time() - st.started_at) if run and st.started_at else 0,
            "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0,
            "ha": {"managed": int(st.faults.ha_managed)},
            "template": 0 if "template" not in o else int(o["template"]),
            **({"pid": self.lxc.init_pid(vmid)} if run else {}),
            **({"lock": o["lock"]} if o.get("lock") else {}),
        }

    def _inet(self, items: dict[str, str]) -> str | None:
        """The interface's address as the container has it: a static `ip=`, else its lease on the site's DHCP
        server (None before it has one)."""
        ip = items.get("ip", "")
        if "/" in ip:
            return ip
        if ip != "dhcp" or not items.get("hwaddr"):
            return None
        site = self.lxc.site_paths.load()
        leased = lxc_net.lease_address(self.lxc.site_paths, items["hwaddr"])
        return f"{leased}/{site.prefixlen}" if leased and site else None

    def interfaces(self, vmid: int) -> list[dict[str, Any]]:
        self.precheck_running(vmid)
        conf, _ = self.read(vmid)
        out: list[dict[str, Any]] = [{"name": "lo", "hwaddr": "00:00:00:00:00:00", "inet": "127.0.0.1/8",
                                      "inet6": "::1/128", "ip-addresses": [
                                          {"ip-address": "127.0.0.1", "prefix": 8, "ip-address-type": "inet"},
                                          {"ip-address": "::1", "prefix": 128, "ip-address-type": "inet6"}]}]
        for key in sorted(k for k in conf.options if re.fullmatch(r"net\d+", k)):
            items = confmod.split_property(conf.options[key], "name")
            entry: dict[str, Any] = {"name": items.get("name", "eth0"), "hwaddr": items.get("hwaddr", "").lower(),
                                     "ip-addresses": []}
            cidr = self._inet(items)
            if cidr is not None:
                ip, prefix = cidr.split("/")
                entry["inet"] = cidr
                entry["ip-addresses"] = [{"ip-address": ip, "prefix": int(prefix), "ip-address-type": "inet"}]
            out.append(entry)
        return out


def _size_bytes(size: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", size)
    if not m:
        return 0
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2)]
    return int(float(m.group(1)) * mult)
