"""`sim down` of an lxc-runtime host leaves no container, bridge, veth, nft table or namespace, and puts
ip_forward back."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from simulator.lxc import net
from simulator.manager.lifecycle import sim_down
from tests.sim.lxc_support import create_and_start, lxc_host

# 600 s: the first module on a fresh machine also builds the template (debootstrap, ~3 min on 2 busy cores)
pytestmark = pytest.mark.timeout(600)


def _sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True).stdout


def _in_netns(inode: int) -> set[tuple[str, str]]:
    """The processes in the network namespace `inode`, each as (pid, start time): a namespace inode number freed
    by `sim down` is soon reused by another simulated container on this machine, so the inode alone cannot say
    that this container's namespace is gone; its processes can."""
    found = set()
    for ns in Path("/proc").glob("[0-9]*/ns/net"):
        try:
            if ns.stat().st_ino == inode:
                found.add((ns.parent.parent.name, (ns.parent.parent / "stat").read_text().split()[21]))
        except OSError:  # the process ended meanwhile
            continue
    return found


def test_sim_down_removes_everything_it_made(tmp_path_factory: pytest.TempPathFactory) -> None:
    before = net.IP_FORWARD.read_text()
    with lxc_host(tmp_path_factory, "lxc-down") as (root, info, ssh):
        create_and_start(ssh, 120)
        hn = net.SitePaths(root).load()
        assert hn is not None
        dhcp_pid = int(net.SitePaths(root).pid.read_text())
        lxcpath = str(root / "lxc" / info.name)
        init = _sh("lxc-info", "-P", lxcpath, "-n", "120", "-p", "-H").strip()
        assert init.isdigit()
        ct_netns = Path(f"/proc/{init}/ns/net").stat().st_ino
        in_ct = _in_netns(ct_netns)
        assert any(pid == init for pid, _start in in_ct)
        assert net.IP_FORWARD.read_text().strip() == "1"
        assert net.leftovers(hn) == [f"bridge {hn.bridge}", f"nft table {hn.table}"]
        assert f"master {hn.bridge}" in _sh("ip", "-o", "link", "show", "type", "veth")
        sim_down(root)
        assert _sh("lxc-ls", "-P", lxcpath, "--running").split() == []
        assert not Path(f"/proc/{init}").exists()
        assert net.leftovers(hn) == []
        assert not Path(f"/proc/{dhcp_pid}").exists() and not net.SitePaths(root).record.exists()  # dnsmasq gone
        assert f"master {hn.bridge}" not in _sh("ip", "-o", "link", "show", "type", "veth")
        assert not in_ct & _in_netns(ct_netns)  # no process of the container's namespace is left in it
        others = [p for p in net.FWD_STATE.iterdir() if not p.name.startswith((".", "ip_forward"))]
        if not others:  # no other simulated bridge on this machine: the value from before is back
            assert net.IP_FORWARD.read_text() == before
