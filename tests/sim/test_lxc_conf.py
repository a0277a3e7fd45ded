"""The lxc runtime's pure parts: PVE conf → LXC config, the container's /etc/network/interfaces, the site's nft rule
set and subnet choice, the mirror debootstrap uses."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from simulator import ctconf as confmod
from simulator import ctside
from simulator.lxc import ctnet, lxcconf, net, template

NET = lxcconf.Network("dssabc123")
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
                 "lxc.net.0.type = veth", "lxc.net.0.link = dssabc123", "lxc.net.0.name = eth0",
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


def test_no_address_in_the_lxc_config() -> None:
    """As on PVE, LXC sets no address: the container's own ifupdown does, from what pve-container wrote."""
    lines = render(conf(net0="name=eth0,bridge=vmbr0,ip=10.1.1.5/22,gw=10.1.0.1"), network=NET)
    assert not any("ipv4" in ln for ln in lines)


def test_site_names_rules_and_addresses() -> None:
    site = net.site_for("b00fab", "10.163.88.0/22")
    assert (site.bridge, site.table, site.gateway, site.host_address(0), site.static_address(7)) == (
        "dssb00fab", "dsite_b00fab", "10.163.88.1", "10.163.88.2", "10.163.89.7")
    assert site.dhcp_range == ("10.163.90.1", "10.163.91.254")
    with pytest.raises(net.NetError, match="at most 254"):
        site.host_address(254)
    rules = net.ruleset(site, ["10.255.255.53"], ["192.0.2.0/24", "10.163.88.0/22"])
    assert 'ip saddr 10.163.88.0/22 oifname != "dssb00fab" masquerade' in rules
    assert 'iifname "dssb00fab" ip daddr { 10.255.255.53 } accept' in rules
    blocked = next(ln for ln in rules.splitlines() if ln.strip().endswith("} drop"))
    assert "10.0.0.0/8" in blocked and "192.0.2.0/24" in blocked and "10.163.88.0/22" not in blocked
    assert rules.index('iifname "dssb00fab" ip daddr 10.163.88.0/22 accept') < rules.index(blocked.strip())
    assert 'iifname "dssb00fab" udp sport 68 udp dport 67 accept' in rules  # DHCP to the site's dnsmasq
    assert 'iifname "dssb00fab" ip daddr != 10.163.88.0/22 drop' in rules
    assert 'iifname "dssb00fab" oifname "dssb00fab" accept' in rules  # container to container (bridged)
    assert rules.index("ct state established,related accept") < rules.index('oifname "dssb00fab" drop')


def test_a_site_subnet_overlaps_nothing_on_the_machine() -> None:
    first = ipaddress.IPv4Network(net.pick_subnet("b00fab", []))
    assert first.prefixlen == net.SITE_PREFIX and first.subnet_of(net.SITE_POOL)
    used = [first, ipaddress.IPv4Network("10.0.0.0/9")]  # another root's site, and a LAN route overlapping the pool
    second = ipaddress.IPv4Network(net.pick_subnet("b00fab", used))
    assert not any(second.overlaps(u) for u in used)
    assert net.pick_subnet("b00fab", [ipaddress.IPv4Network("0.0.0.0/0")]) == str(first)  # a default route is no use


def test_dnsmasq_serves_dhcp_only_on_the_site_bridge(tmp_path: Path) -> None:
    site = net.site_for("b00fab", "10.163.88.0/22")
    argv = net.dnsmasq_argv(site, net.SitePaths(tmp_path), ["10.255.255.53"])
    for arg in ("--port=0", "--bind-dynamic", "--interface=dssb00fab", "--except-interface=lo",
                "--dhcp-range=10.163.90.1,10.163.91.254,255.255.252.0,1h", "--dhcp-option=option:router,10.163.88.1",
                "--dhcp-option=option:dns-server,10.255.255.53", f"--dhcp-leasefile={tmp_path}/site/dnsmasq.leases"):
        assert arg in argv, arg


def test_interfaces_as_pve_container_writes_them() -> None:
    """PVE::LXC::Setup::Debian::setup_network: dhcp, static with a dotted netmask and gateway, other stanzas kept."""
    dhcp = ctnet.iface_from_net({"name": "eth0", "bridge": "vmbr0", "ip": "dhcp"})
    assert dhcp is not None
    stock = "auto lo\niface lo inet loopback\n\nsource /etc/network/interfaces.d/*\n"
    assert ctnet.render_interfaces(stock, [dhcp]) == (
        "auto lo\niface lo inet loopback\n\nsource /etc/network/interfaces.d/*\n\nauto eth0\niface eth0 inet dhcp\n\n")
    static = ctnet.iface_from_net({"name": "eth0", "ip": "10.163.89.7/22", "gw": "10.163.88.1"})
    assert static is not None
    again = ctnet.render_interfaces(ctnet.render_interfaces(stock, [dhcp]), [static])
    assert again == ("auto lo\niface lo inet loopback\n\nsource /etc/network/interfaces.d/*\n\nauto eth0\n"
                     "iface eth0 inet static\n\taddress 10.163.89.7\n\tnetmask 255.255.252.0\n"
                     "\tgateway 10.163.88.1\n\n")
    assert ctnet.render_interfaces(again, [static]) == again  # every start writes it again: stable
    far = ctnet.iface_from_net({"name": "eth0", "ip": "10.163.89.7/24", "gw": "10.163.88.1"})
    assert far is not None and far.needs_route
    assert "\tpost-up ip route add default via 10.163.88.1 dev eth0\n" in ctnet.render_interfaces("", [far])
    assert ctnet.render_interfaces("", [dhcp]).startswith("auto lo\niface lo inet loopback\niface lo inet6 loopback\n")
    assert ctnet.iface_from_net({"name": "eth0", "bridge": "vmbr0"}) is None  # no ip=: no inet stanza


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


def test_trixie_mirror_is_the_machines_debian_archive_even_when_its_sources_name_bookworm_only(tmp_path: Path
                                                                                              ) -> None:
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text("Types: deb\nURIs: http://mirror.example/sec\nSuites: bookworm-security\n\n"
                                      "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm "
                                      "bookworm-updates\nComponents: main\n")
    # this machine's case: only bookworm is listed, and the same archive serves trixie
    assert template.apt_mirror(tmp_path, suite="trixie") == "http://mirror.example/debian"
    # a source that names trixie wins, whichever file lists it
    (d / "trixie.sources").write_text("Types: deb\nURIs: http://t.example/debian\nSuites: trixie\n")
    assert template.apt_mirror(tmp_path, suite="trixie") == "http://t.example/debian"
    assert template.apt_mirror(tmp_path, suite="bookworm") == "http://mirror.example/debian"
    for p in d.iterdir():
        p.unlink()
    with pytest.raises(template.TemplateError, match="no apt source for Debian trixie"):
        template.apt_mirror(tmp_path, suite="trixie")


def test_each_debian_release_has_its_own_template_file_and_python(tmp_path: Path) -> None:
    assert template.release_for("debian-13-standard_13.1-2_amd64.tar.zst") == template.TRIXIE
    assert template.release_for("debian-12-standard_12.12-1_amd64.tar.zst") == template.BOOKWORM
    assert template.release_for("ubuntu-24.04-standard_24.04-2_amd64.tar.zst") is None
    assert (template.BOOKWORM.python, template.TRIXIE.python) == ("3.11", "3.13")
    paths = {template.cached_path(tmp_path, r) for r in template.RELEASES}
    assert len(paths) == 2 and {p.parent for p in paths} == {template.cached_path(tmp_path).parent}
    # bookworm's file and lock stay where older checkouts look for them
    assert template.cached_path(tmp_path).name == "debian-12-standard_12.7-1_amd64.tar.zst"
    assert template.lock_path(tmp_path, template.BOOKWORM).name == ".build.lock"
    assert template.lock_path(tmp_path, template.TRIXIE).name == ".build-trixie.lock"


def test_an_mp_source_in_the_host_view_binds_that_hosts_directory() -> None:
    """/var/lib/deploy on a simulated host is its own fs/ (the host view binds it over the machine's): LXC, outside
    the view, must bind that real path, or every simulated host would share the machine's directory."""
    dirs = (("/var/lib/deploy", "/sim/hosts/sim-10/fs/var/lib/deploy"), ("/root", "/sim/hosts/sim-10/fs/root"))
    assert lxcconf.host_source("/var/lib/deploy/kernel-cache/120", dirs) == \
        "/sim/hosts/sim-10/fs/var/lib/deploy/kernel-cache/120"
    assert lxcconf.host_source("/var/lib/deployed", dirs) == "/var/lib/deployed"  # a prefix, not a parent
    assert lxcconf.host_source("/tank/models", dirs) == "/tank/models"  # the machine's own path
    text = render(conf(mp0="/var/lib/deploy/kernel-cache/120,mp=/var/cache/deploy/kernels"), host_dirs=dirs)
    assert ("lxc.mount.entry = /sim/hosts/sim-10/fs/var/lib/deploy/kernel-cache/120 var/cache/deploy/kernels none "
            "bind,create=dir 0 0") in text
