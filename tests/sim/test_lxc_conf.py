"""The lxc runtime's pure parts: PVE conf → LXC config, the nft rule set, the mirror debootstrap uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator import ctside
from simulator.lxc import lxcconf, net, template
from simulator.pve import conf as confmod

NET = lxcconf.Network("dsbabc12310", "172.30.10.122/24", "172.30.10.1")
MOUNTS = lxcconf.SimMounts("/r/hosts/sim-10", "/r/hosts/sim-10/ct/120", "/r/hosts/sim-10/gpu",
                           "/r/hosts/sim-10/ct/120/vmid")


def conf(**options: str) -> confmod.CtConf:
    return confmod.CtConf(options={"hostname": "ct120", "arch": "amd64", **options})


def render(c: confmod.CtConf, **kw: object) -> list[str]:
    inp = lxcconf.LxcInputs(vmid=120, rootfs="/r/lxc/sim-10/120/rootfs", **kw)  # type: ignore[arg-type]
    return lxcconf.render(c, inp).splitlines()


def test_base_config_boots_systemd_without_apparmor() -> None:
    lines = render(conf())
    assert lines[1] == f"lxc.include = {lxcconf.COMMON_INCLUDE}"
    for line in ("lxc.apparmor.profile = unconfined", "lxc.mount.auto = proc:mixed sys:mixed cgroup:mixed",
                 "lxc.uts.name = ct120", "lxc.rootfs.path = dir:/r/lxc/sim-10/120/rootfs",
                 "lxc.net.0.type = empty"):
        assert line in lines
    assert not any(ln.startswith("lxc.idmap") for ln in lines)


def test_limits_network_devices_and_mounts() -> None:
    c = conf(cores="4", memory="2048", net0="name=eth0,bridge=vmbr0,hwaddr=BC:24:11:AA:BB:CC,ip=dhcp,type=veth",
             mp0="/srv/models,mp=/models,ro=1", features="nesting=1")
    dev = lxcconf.Device("/r/hosts/sim-10/fs/dev/nvidia0", "/dev/nvidia0", 195, 0)
    lines = render(c, devices=[dev], network=NET, mounts=MOUNTS)
    for line in ("lxc.cgroup.memory.limit_in_bytes = 2147483648", "lxc.cgroup.cpu.cfs_quota_us = 400000",
                 "lxc.cgroup.cpu.cfs_period_us = 100000", f"lxc.include = {lxcconf.NESTING_INCLUDE}",
                 "lxc.net.0.type = veth", "lxc.net.0.link = dsbabc12310", "lxc.net.0.name = eth0",
                 "lxc.net.0.ipv4.address = 172.30.10.122/24", "lxc.net.0.ipv4.gateway = 172.30.10.1",
                 "lxc.net.0.hwaddr = bc:24:11:aa:bb:cc",
                 "lxc.mount.entry = /srv/models models none bind,create=dir,ro 0 0",
                 "lxc.mount.entry = /r/hosts/sim-10/fs/dev/nvidia0 dev/nvidia0 none bind,create=file 0 0",
                 "lxc.cgroup.devices.allow = c 195:0 rwm"):
        assert line in lines, line
    # The simulator's GPU-side state: exactly the ctside contract, /run mounted first so systemd keeps it.
    sim = [ln for ln in lines if "deploy-sim" in ln and " tmpfs " not in ln]
    hidden = [ln.split()[3].rsplit("/", 1)[1] for ln in lines if "deploy-sim/host/" in ln and " tmpfs " in ln]
    assert {"api", "client", "sshd", "fs", "ct"} <= set(hidden)
    assert sim == [
        f"lxc.mount.entry = /r/hosts/sim-10 {ctside.HOST_DIR[1:]} none bind,create=dir,ro 0 0",
        f"lxc.mount.entry = /r/hosts/sim-10/ct/120 {ctside.CT_DIR[1:]} none bind,create=dir,ro 0 0",
        f"lxc.mount.entry = /r/hosts/sim-10/gpu {ctside.GPU_DIR[1:]} none bind,create=dir 0 0",
        f"lxc.mount.entry = /r/hosts/sim-10/ct/120/vmid {ctside.VMID_FILE[1:]} none bind,create=file,ro 0 0",
    ]
    assert lines.index("lxc.mount.entry = tmpfs run tmpfs rw,nosuid,nodev,mode=755,create=dir 0 0") < \
        lines.index(sim[0])


def test_cgroup2_keys_and_unprivileged_idmap() -> None:
    lines = render(conf(cores="2", memory="512", unprivileged="1"), cgroup2=True,
                   devices=[lxcconf.Device("/d/nvidia-uvm", "/dev/nvidia-uvm", 511, 0)])
    for line in ("lxc.cgroup2.memory.max = 536870912", "lxc.cgroup2.cpu.max = 200000 100000",
                 "lxc.cgroup2.devices.allow = c 511:0 rwm", "lxc.idmap = u 0 100000 65536",
                 "lxc.idmap = g 0 100000 65536", f"lxc.include = {lxcconf.USERNS_INCLUDE}"):
        assert line in lines, line


def test_raw_lxc_keys_pass_through_and_bad_mounts_are_refused() -> None:
    c = conf()
    c.lxc.append(("lxc.mount.entry", "/dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir"))
    assert render(c)[-1] == "lxc.mount.entry = /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir"
    with pytest.raises(lxcconf.ConfError, match="only bind mounts"):
        render(conf(mp0="local-lvm:vm-120-disk-1,mp=/data"))
    with pytest.raises(lxcconf.ConfError, match="absolute path"):
        render(conf(mp0="/srv/a b,mp=/data"))


def test_network_names_rules_and_addresses() -> None:
    hn = net.host_net("127.0.0.11", "b00fab")
    assert (hn.bridge, hn.table, hn.bridge_ip, hn.ct_ip(120)) == ("dsbb00fab10", "dsim_b00fab_10", "172.30.10.1",
                                                                  "172.30.10.122")
    assert len(net.host_net("127.0.0.254", "ffffff").bridge) <= 15  # IFNAMSIZ
    rules = net.ruleset(hn, ["10.255.255.53"], ["192.0.2.0/24", "172.30.10.0/24"])
    assert 'ip saddr 172.30.10.0/24 oifname != "dsbb00fab10" masquerade' in rules
    assert 'iifname "dsbb00fab10" ip daddr { 10.255.255.53 } accept' in rules
    blocked = next(ln for ln in rules.splitlines() if ln.strip().endswith("} drop"))
    assert "10.0.0.0/8" in blocked and "192.0.2.0/24" in blocked and "172.30.10.0/24" not in blocked
    assert 'iifname "dsbb00fab10" ip daddr != 172.30.10.1 drop' in rules
    assert 'iifname "dsbb00fab10" oifname "dsbb00fab10" accept' in rules  # container to container (bridged)
    assert rules.index("ct state established,related accept") < rules.index('oifname "dsbb00fab10" drop')


def test_mirror_comes_from_apt_sources(tmp_path: Path) -> None:
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text("Types: deb\nURIs: http://mirror.example/sec\nSuites: bookworm-security\n\n"
                                      "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm "
                                      "bookworm-updates\nComponents: main\n")
    assert template.apt_mirror(tmp_path) == "http://mirror.example/debian"
    (d / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("# c\ndeb [arch=amd64] http://m.example/debian bookworm main\n")
    assert template.apt_mirror(tmp_path) == "http://m.example/debian"
    (tmp_path / "sources.list").write_text("")
    with pytest.raises(template.TemplateError, match="no apt source"):
        template.apt_mirror(tmp_path)
