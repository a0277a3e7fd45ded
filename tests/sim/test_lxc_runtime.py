"""Real LXC containers behind `pct` (lxc runtime): the stock template boots systemd, devices, mounts, attach,
reboot and the per-container network. One host and two containers for the whole module."""

from __future__ import annotations

import json
import os
import shlex
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simulator.lxc import template
from tests.sim.conftest import Ssh
from tests.sim.lxc_support import TEMPLATE, create_and_start, lxc_host, wait_booted

# 600 s: the first module on a fresh machine also builds the template (debootstrap, ~3 min on 2 busy cores)
pytestmark = pytest.mark.timeout(600)


class Ct:
    """A running container of the module's host, driven through the host's `pct` over SSH."""

    def __init__(self, root: Path, info: Any, ssh: Ssh, models: Path):
        self.root, self.info, self.ssh, self.models = root, info, ssh, models

    def sh(self, script: str, vmid: int = 120, stdin: str | None = None) -> Any:
        return self.ssh.run(f"pct exec {vmid} -- sh -c {shlex.quote(script)}", stdin=stdin, timeout=60)


@pytest.fixture(scope="module")
def ct(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ct]:
    with lxc_host(tmp_path_factory, "lxc-runtime") as (root, info, ssh):
        models = tmp_path_factory.mktemp("models")
        (models / "config.json").write_text('{"model": "bind-mounted"}\n')
        create_and_start(ssh, 120, "--cores 2 --memory 1024 --dev0 /dev/nvidia0 --dev1 /dev/nvidiactl",
                         f"--mp0 {models},mp=/models,ro=1")
        yield Ct(root, info, ssh, models)


def test_template_is_bare_debian_12(ct: Ct) -> None:
    listing = subprocess.run(["tar", "--zstd", "-tf", str(template.cached_path())],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    names = {n.removeprefix("./") for n in listing}
    assert "usr/lib/systemd/systemd" in names and "usr/bin/apt-get" in names
    for absent in ("usr/bin/nvidia-smi", "usr/bin/python3", "root/ml-env/", "models/", "var/lib/apt/lists/lock"):
        assert absent not in names, absent
    assert not [n for n in names if n.startswith("var/cache/apt/archives/") and n.endswith(".deb")]
    assert not [n for n in names if "sglang" in n or "nvidia" in n.lower()]
    res = ct.sh(". /etc/os-release; echo $VERSION_ID; test ! -e /root/ml-env; command -v nvidia-smi python3 curl")
    assert res.rc != 0 and res.out.split() == ["12"], res  # `command -v` finds none of them


def test_pve_conf_becomes_lxc_config(ct: Ct) -> None:
    cfg = (ct.root / "lxc" / ct.info.name / "120" / "config").read_text().splitlines()
    for line in ("lxc.include = /usr/share/lxc/config/debian.common.conf", "lxc.apparmor.profile = unconfined",
                 "lxc.cgroup.memory.limit_in_bytes = 1073741824", "lxc.cgroup.cpu.cfs_quota_us = 200000",
                 "lxc.cgroup.devices.allow = c 195:0 rwm", "lxc.cgroup.devices.allow = c 195:255 rwm",
                 f"lxc.mount.entry = {ct.models} models none bind,create=dir,ro 0 0"):
        assert line in cfg, line
    res = ct.sh("cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max")
    assert res.out.strip() == "1073741824"
    ifaces = json.loads(ct.ssh.run(f"pvesh get /nodes/{ct.info.node}/lxc/120/interfaces --output-format json").out)
    eth0 = next(i for i in ifaces if i["name"] == "eth0")
    inside = ct.sh("ip -4 -o addr show dev eth0").out.split()
    assert eth0["inet"] == inside[inside.index("inet") + 1]


def test_systemd_is_pid_1_and_running(ct: Ct) -> None:
    res = ct.sh("cat /proc/1/comm; systemctl is-system-running; hostname; journalctl -b --no-pager -q -n 1 "
                ">/dev/null && echo journal-ok")
    assert res.out.split() == ["systemd", "running", "ct120", "journal-ok"], res
    assert ct.ssh.run("pct status 120").out.strip() == "status: running"


def test_only_the_simulators_gpu_side_is_visible(ct: Ct) -> None:
    res = ct.sh("cat /run/deploy-sim/vmid; ls /run/deploy-sim; test -f /run/deploy-sim/host/host.json && echo h; "
                "touch /run/deploy-sim/gpu/probe && echo gpu-rw; touch /run/deploy-sim/host/x 2>/dev/null || "
                "echo host-ro; mount | grep -c -e /etc/pve -e deploy-sim/repo || true")
    assert res.out.split() == ["120", "ct", "gpu", "host", "vmid", "h", "gpu-rw", "host-ro", "0"], res
    assert (ct.root / "hosts" / ct.info.name / "gpu" / "probe").exists()
    # the host dir is there for host.json only: no token secret, client key, host files or other containers
    res = ct.sh("grep -c ' /run/deploy-sim/host/[a-z]* tmpfs ' /proc/mounts; ls -A /run/deploy-sim/host/api "
                "/run/deploy-sim/host/client /run/deploy-sim/host/fs /run/deploy-sim/host/ct | grep -v : | grep -c . "
                "|| true")
    assert res.out.split() == ["7", "0"], res


def test_device_nodes_have_host_majors_and_others_are_denied(ct: Ct) -> None:
    host = os.stat(ct.root / "hosts" / ct.info.name / "fs" / "dev" / "nvidia0")
    res = ct.sh("stat -c '%t %T' /dev/nvidia0; head -c0 /dev/nvidia0")
    assert res.out.split() == [f"{os.major(host.st_rdev):x}", f"{os.minor(host.st_rdev):x}"], res
    # allowed: the open reaches the (absent) driver, ENXIO; a node the cgroup does not allow stops at EPERM
    assert "No such device or address" in res.err, res
    denied = ct.sh("mknod /tmp/other c 195 7 && head -c0 /tmp/other")  # nvidia7: not passed in
    assert denied.rc != 0 and "Operation not permitted" in denied.err, denied


def test_mp_bind_mount_is_visible_read_only(ct: Ct) -> None:
    res = ct.sh("cat /models/config.json; touch /models/x 2>/dev/null || echo ro")
    assert res.out.splitlines() == ['{"model": "bind-mounted"}', "ro"], res


def test_exec_push_pull_keep_bytes_exit_codes_and_quoting(ct: Ct, tmp_path: Path) -> None:
    odd = "a b 'c' \"d\" $HOME %s \\e ü"
    res = ct.ssh.run(f"pct exec 120 -- printf '%s|' {shlex.quote(odd)} x")
    assert res.rc == 0 and res.out == odd + "|x|"
    assert ct.ssh.run("pct exec 120 -- sh -c 'exit 42'").rc == 42
    assert ct.sh("cat", stdin="piped\n").out == "piped\n"
    missing = ct.ssh.run("pct exec 120 -- /no/such/program")
    assert missing.rc != 0
    env = ct.sh("env | sort").out.split()
    assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in env
    # pct's keep-env: the SSH session's own variables come along; nothing of the simulator's does
    assert [e for e in env if e.startswith("SSH_CONNECTION=")], env
    assert not [e for e in env if e.startswith(("DEPLOY_SIM", "SSH_ORIGINAL", "PYTHON", "LD_LIBRARY"))], env
    host_root = ct.root / "hosts" / ct.info.name / "fs" / "root"  # the host's /root as its SSH sessions see it
    (host_root / "push-src").write_bytes(bytes(range(256)))
    remote = "/root/with space.bin"
    res = ct.ssh.run(f"pct push 120 /root/push-src {shlex.quote(remote)} --perms 0600 && pct exec 120 -- stat -c "
                     f"'%a %U' {shlex.quote(remote)} && pct pull 120 {shlex.quote(remote)} /root/pulled")
    assert res.rc == 0 and res.out.strip() == "600 root", res
    assert (host_root / "pulled").read_bytes() == bytes(range(256))
    bad = ct.ssh.run("pct pull 120 /no/such /root/x")
    assert bad.rc != 0 and "/no/such" in bad.err


UNIT = "[Unit]\nDescription=boot probe\n[Service]\nType=oneshot\nRemainAfterExit=yes\n" \
       "ExecStart=/bin/sh -c 'cat /proc/sys/kernel/random/boot_id > /root/probe-boot'\n" \
       "[Install]\nWantedBy=multi-user.target\n"


def test_enabled_unit_starts_at_boot_and_after_pct_reboot(ct: Ct) -> None:
    res = ct.sh("cat > /etc/systemd/system/probe.service && systemctl enable probe.service 2>/dev/null && "
                "systemctl is-active probe.service || true", stdin=UNIT)
    assert res.out.strip() == "inactive"  # enabled, not started
    boot = ct.sh("cat /proc/sys/kernel/random/boot_id").out
    t0 = time.monotonic()
    assert ct.ssh.run("pct reboot 120", timeout=120).rc == 0
    took = time.monotonic() - t0
    assert wait_booted(ct.ssh, 120) in ("running", "degraded")  # pct reboot, like pct start, does not wait
    res = ct.sh("systemctl is-active probe.service; cat /root/probe-boot; journalctl --list-boots --no-pager -q | "
                "wc -l")
    state, probe, boots = res.out.split()
    assert state == "active" and probe != boot.strip() and int(boots) >= 2, (res, took)
    assert ct.ssh.run("pct shutdown 120 && pct status 120 && pct start 120", timeout=120).out.strip() == \
        "status: stopped"
    assert wait_booted(ct.ssh, 120) in ("running", "degraded")
    assert ct.sh("systemctl is-active probe.service").out.strip() == "active"


SOCKET = "[Socket]\nListenStream=8000\nAccept=yes\n[Install]\nWantedBy=sockets.target\n"
ANSWER = "[Service]\nExecStart=/bin/hostname\nStandardOutput=socket\n"


def _serve_hostname(ct: Ct, vmid: int) -> None:
    """A real systemd socket unit answers each connection on :8000 with the hostname (minbase has no server)."""
    res = ct.sh("cat > /etc/systemd/system/name.socket", vmid=vmid, stdin=SOCKET)
    assert res.rc == 0
    res = ct.ssh.run(f"pct exec {vmid} -- sh -c {shlex.quote('cat > /etc/systemd/system/name@.service')}",
                     stdin=ANSWER)
    assert res.rc == 0
    assert ct.sh("systemctl daemon-reload && systemctl enable --now name.socket 2>/dev/null && "
                 "systemctl is-active name.socket", vmid=vmid).out.strip() == "active"


def _read(address: str, port: int = 8000) -> str:
    with socket.create_connection((address, port), timeout=10) as s:
        return s.makefile().read().strip()


def ct_address(ssh: Any, vmid: int, timeout_s: float = 30.0) -> str:
    """The container's address as the tool reads it: from inside, once its ifupdown has set it (a DHCP lease or
    the static address). Right after `pct start` eth0 may have none yet, as on a real node."""
    from orchestrator.parsers.netaddr import parse_ip_addr
    from tests.e2e.conftest import until

    address = until(lambda: parse_ip_addr(ssh.run(f"pct exec {vmid} -- ip -4 -o addr show dev eth0").out), timeout_s)
    assert address is not None, f"CT {vmid} has no IPv4 address on eth0 after {timeout_s:.0f} s"
    return str(address)


def test_two_containers_each_serve_port_8000(ct: Ct) -> None:
    """Each container has its own DHCP address on the site network, where this machine reaches it as from a LAN;
    nothing on the node's address forwards into a container."""
    create_and_start(ct.ssh, 121)
    try:
        for vmid in (120, 121):
            _serve_hostname(ct, vmid)
        a, b = ct_address(ct.ssh, 120), ct_address(ct.ssh, 121)
        assert a != b
        assert _read(a) == "ct120" and _read(b) == "ct121"
        with pytest.raises(ConnectionRefusedError):
            _read(ct.info.address)  # no relay: the node's ADDRESS:8000 is nobody's
        res = ct.ssh.run(f"pct exec 120 -- timeout 10 bash -c 'exec 3<>/dev/tcp/{b}/8000 && cat <&3'")
        assert res.out.strip() == "ct121"  # same bridge
    finally:
        ct.ssh.run("pct stop 121; pct destroy 121", timeout=60)
    assert not (ct.root / "lxc" / ct.info.name / "121").exists()


def test_unprivileged_ct_under_a_private_root_is_refused_with_the_reason(ct: Ct) -> None:
    # pytest's base temp dir is 0700: the mapped root (uid 100000) of an unprivileged CT cannot reach the rootfs
    assert not os.stat(ct.root.parent).st_mode & stat.S_IXOTH
    res = ct.ssh.run(f"pct create 130 {TEMPLATE} --hostname u130 --unprivileged 1 && pct start 130", timeout=120)
    try:
        assert res.rc != 0 and "not searchable by the container's mapped root" in res.err, res
        assert "unprivileged: 0" in res.err and ct.ssh.run("pct status 130").out.strip() == "status: stopped"
    finally:
        ct.ssh.run("pct destroy 130", timeout=60)


def test_vzdump_archive_is_a_template_for_new_containers(ct: Ct) -> None:
    """vzdump --mode stop stops, dumps and restarts the CT; `pct create` from the archive gets its files, fresh host
    keys, and the dumped PVE config only as etc/vzdump/pct.conf. Other modes and options are refused by name."""
    assert ct.sh("echo provisioned > /root/site-marker && mkdir -p /opt/weights /srv/keep/ && "
                 "echo w > /opt/weights/shard && echo k > /srv/keep/file && echo t > /tmp/scratch").rc == 0
    keys_before = ct.sh("cat /etc/ssh/ssh_host_ed25519_key.pub").out
    refused = ct.ssh.run("vzdump 120 --dumpdir /var/lib/vz/template/cache")
    assert refused.rc != 0 and "only `--mode stop`" in refused.err, refused
    refused = ct.ssh.run("vzdump 120 --mode frozen")
    assert refused.rc != 0 and "mode: value 'frozen'" in refused.err, refused
    refused = ct.ssh.run("vzdump 120 --mode stop --compress 1")  # 1 is lzo on PVE: not simulated, not zstd
    assert refused.rc != 0 and "not '1'" in refused.err, refused
    # the weights stay out of the archive with --exclude-path (anchored at the CT's root, as PVE passes it to
    # tar); a trailing slash matches nothing in tar, and vzdump says so; /tmp is a standard exclude
    res = ct.ssh.run("vzdump 120 --mode stop --compress zstd --dumpdir /var/lib/vz/template/cache "
                     "--exclude-path /opt/weights --exclude-path /srv/keep/", timeout=300)
    assert res.rc == 0, res.err
    assert "WARN: tar does not match exclusion with a trailing slash '/srv/keep/'" in res.out
    assert "INFO: stopping virtual guest" in res.out and "INFO: Backup job finished successfully" in res.out
    assert ct.ssh.run("pct status 120").out.strip() == "status: running"
    name = next(line.split("'")[1].rsplit("/", 1)[1] for line in res.out.splitlines()
                if "creating vzdump archive" in line)
    assert name.startswith("vzdump-lxc-120-") and name.endswith(".tar.zst")
    archive = ct.root / "hosts" / ct.info.name / "fs/var/lib/vz/template/cache" / name
    conf = subprocess.run(["tar", "--zstd", "-xOf", str(archive), "./etc/vzdump/pct.conf"], capture_output=True,
                          text=True, check=True).stdout
    assert "hostname: ct120" in conf
    members = set(subprocess.run(["tar", "--zstd", "-tf", str(archive)], capture_output=True, text=True,
                                 check=True).stdout.split())
    assert "./opt/weights/shard" not in members and "./opt/weights/" not in members and "./opt/" in members
    assert "./srv/keep/file" in members and "./tmp/scratch" not in members and "./tmp/" in members
    create_and_start(ct.ssh, 124, template=f"local:vztmpl/{name}")
    try:
        assert ct.sh("cat /root/site-marker", vmid=124).out.strip() == "provisioned"
        assert ct.sh("cat /etc/ssh/ssh_host_ed25519_key.pub", vmid=124).out != keys_before
        assert ct.sh("hostname", vmid=124).out.strip() == "ct124"
    finally:
        ct.ssh.run("pct stop 124; pct destroy 124", timeout=60)
        archive.unlink(missing_ok=True)
