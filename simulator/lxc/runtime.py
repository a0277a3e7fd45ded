"""The LXC runtime: one narrow interface (create, start, stop, shutdown, reboot, status, exec, push, pull,
destroy) over the real lxc-* tools, called by simulator/pve/lxc.py (lifecycle tasks) and simulator/pve/pushpull.py
(`pct exec/push/pull/enter`).

LXC finds a running container through an abstract socket named after its lxcpath, and SSH sessions of the
simulated host see the sim root under another path (/run/deploy-sim/root). So every lxc-* command runs in the
simulator's real mount namespace (`nsenter`) with real paths, and Python file access
uses this process's view of the same directories.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from simulator import ctconf as confmod
from simulator import procs
from simulator.config import HostConfig, HostPaths
from simulator.lxc.attach import mount_prefix

if TYPE_CHECKING:
    from simulator.lxc import lxcconf, net

# The network and LXC-config modules are imported where a container is made or started: `pct exec`, the most
# frequent command on a host, builds a runtime only to attach, and every import costs each of its calls.

CT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STOP_TIMEOUT_S = 30
#: Host files a container needs for package access through NAT (the spike: pip needs both).
HOST_FILES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pip.conf", "/etc/resolv.conf")


class RuntimeFailure(RuntimeError):
    """An lxc-* command failed; the message names the command and LXC's own error lines."""


class MissingTools(RuntimeError):
    """The tools the simulator's LXC containers need are not installed."""


#: Each program `sim up` runs on this machine, and the Debian package that has it (dnsmasq: the site LAN's DHCP).
REQUIRED_TOOLS = {"lxc-start": "lxc", "lxc-attach": "lxc", "debootstrap": "debootstrap", "nft": "nftables",
                  "zstd": "zstd", "dnsmasq": "dnsmasq-base"}


def require_lxc() -> None:
    """Refuse `sim up` on a machine without the tools, saying how to get them."""
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
    if missing:
        raise MissingTools(f"the simulator's containers need {', '.join(missing)}: run scripts/install.sh "
                           f"(apt-get install {' '.join(dict.fromkeys(REQUIRED_TOOLS[t] for t in missing))})")


@dataclass(frozen=True)
class CtDirs:
    """One container's LXC directory, as this process sees it (view) and as LXC sees it (real)."""

    view: Path
    real: Path

    @property
    def rootfs(self) -> Path:
        return self.view / "rootfs"

    @property
    def config(self) -> Path:
        return self.view / "config"


def cgroup2_only() -> bool:
    return not Path("/sys/fs/cgroup/devices").is_dir() and Path("/sys/fs/cgroup/cgroup.controllers").exists()


class LxcRuntime:
    """Containers of one simulated host: <root>/lxc/<host>/<vmid>/{config,rootfs}."""

    def __init__(self, hp: HostPaths, cfg: HostConfig) -> None:
        self.hp = hp
        self.cfg = cfg
        self.view_root = hp.dir.parent.parent
        sim_json = self.view_root / "sim.json"
        real = json.loads(sim_json.read_text())["real_root"] if sim_json.is_file() else str(self.view_root)
        self.real_root = Path(real)

    @property
    def site_paths(self) -> net.SitePaths:
        from simulator.lxc import net

        return net.SitePaths(self.view_root)

    # ---------------------------------------------------------------------------------------- paths, commands

    @property
    def lxcpath(self) -> str:
        return str(self.real_root / "lxc" / self.hp.name)

    def vmids(self) -> list[int]:
        d = self.view_root / "lxc" / self.hp.name
        return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else []

    def dirs(self, vmid: int) -> CtDirs:
        return CtDirs(self.view_root / "lxc" / self.hp.name / str(vmid),
                      self.real_root / "lxc" / self.hp.name / str(vmid))

    def real_host_path(self, view_path: Path) -> str:
        """A path under the sim root as LXC (the real mount namespace) sees it."""
        try:
            return str(self.real_root / view_path.relative_to(self.view_root))
        except ValueError:
            return str(view_path)

    def _prefix(self) -> list[str]:
        return mount_prefix(str(self.hp.dir))

    def _lxc(self, tool: str, vmid: int, *args: str) -> list[str]:
        return [*self._prefix(), tool, "-P", self.lxcpath, "-n", str(vmid), *args]

    def _run(self, argv: list[str], what: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeFailure(f"{what}: no answer within {timeout:.0f} s") from None
        if res.returncode != 0:
            lines = [ln for ln in (res.stderr or res.stdout).strip().splitlines() if ln.strip()]
            raise RuntimeFailure(f"{what} failed (exit {res.returncode}): {' '.join(lines[-3:])}")
        return res

    # ---------------------------------------------------------------------------------------- lifecycle

    def create(self, vmid: int, template: Path, ssh_keys: str | None = None) -> None:
        """Unpack the template into a fresh rootfs and add what PVE's create does (hostname, host keys)."""
        d = self.dirs(vmid)
        if d.view.exists():
            shutil.rmtree(d.view)
        d.rootfs.mkdir(parents=True)
        self._run(["tar", "--numeric-owner", "--zstd", "-xpf", str(template), "-C", str(d.rootfs)],
                  f"extracting {template.name}")
        for src in HOST_FILES:
            if os.path.isfile(src):
                dest = d.rootfs / src.lstrip("/")
                dest.parent.mkdir(parents=True, exist_ok=True)
                if dest.is_symlink():
                    dest.unlink()
                shutil.copyfile(src, dest)
        if ssh_keys:
            ssh = d.rootfs / "root" / ".ssh"
            ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
            (ssh / "authorized_keys").write_text(ssh_keys.rstrip("\n") + "\n")
        if shutil.which("ssh-keygen") and (d.rootfs / "etc/ssh").is_dir():
            for old in (d.rootfs / "etc/ssh").glob("ssh_host_*"):
                old.unlink()  # a site template dumped from a container carries that container's keys
            key = d.rootfs / "etc/ssh/ssh_host_ed25519_key"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], capture_output=True,
                           stdin=subprocess.DEVNULL)

    def set_hostname(self, vmid: int, hostname: str) -> None:
        etc = self.dirs(vmid).rootfs / "etc"
        (etc / "hostname").write_text(hostname + "\n")
        hosts = etc / "hosts"
        text = hosts.read_text() if hosts.is_file() else "127.0.0.1\tlocalhost\n"
        if f"\t{hostname}\n" not in text:
            hosts.write_text(text.rstrip("\n") + f"\n127.0.1.1\t{hostname}\n")

    def setup_network(self, vmid: int, conf: confmod.CtConf) -> None:
        """/etc/network/interfaces as pve-container writes it at every start (ctnet.py), owner kept."""
        from simulator.lxc import ctnet

        nets = [n for k in sorted(conf.options) if re.fullmatch(r"net\d+", k)
                if (n := ctnet.iface_from_net(confmod.split_property(conf.options[k], "name"))) is not None]
        path = self.dirs(vmid).rootfs / "etc/network/interfaces"
        if not nets or not path.parent.is_dir():
            return
        old = path.read_text() if path.is_file() else ""
        owner = path.parent.stat()
        path.write_text(ctnet.render_interfaces(old, nets))
        os.chown(path, owner.st_uid, owner.st_gid)

    def write_config(self, vmid: int, conf: confmod.CtConf, devices: list[lxcconf.Device]) -> None:
        """Render the LXC config from the PVE conf (at every start, as pve-container does)."""
        from simulator.lxc import lxcconf

        if conf.options.get("unprivileged") == "1":
            self._check_searchable(vmid)
            self._delegate_ids()
            self._shift_rootfs(vmid)
            os.chown(self.hp.gpu, lxcconf.IDMAP_BASE, lxcconf.IDMAP_BASE)  # the CT's root writes its load file
        ct = self.hp.ct(vmid)
        vmid_file = ct.dir / "vmid"
        vmid_file.write_text(f"{vmid}\n")
        self.hp.gpu.mkdir(parents=True, exist_ok=True)
        mounts = lxcconf.SimMounts(host_dir=self.real_host_path(self.hp.dir), ct_dir=self.real_host_path(ct.dir),
                                   gpu_dir=self.real_host_path(self.hp.gpu),
                                   vmid_file=self.real_host_path(vmid_file),
                                   proc_driver=self.real_host_path(self.hp.fs / "proc" / "driver"))
        site = self.site_paths.load()
        if site is None:
            raise RuntimeFailure(f"CT {vmid}: the site network of {self.view_root} is not up (run `deploy sim up`)")
        network = lxcconf.Network(site.bridge)
        d = self.dirs(vmid)
        text = lxcconf.render(conf, lxcconf.LxcInputs(
            vmid=vmid, rootfs=str(d.real / "rootfs"), devices=devices, network=network, mounts=mounts,
            cgroup2=cgroup2_only(), host_dirs=self.host_dirs()))
        self.set_hostname(vmid, conf.options.get("hostname", f"CT{vmid}"))
        self.setup_network(vmid, conf)
        d.config.write_text(text)

    def host_dirs(self) -> tuple[tuple[str, str], ...]:
        """Each directory of this host's view (layout.HOST_OVERLAYS) with its real path."""
        from simulator.layout import HOST_OVERLAYS

        return tuple((target, self.real_host_path(self.hp.fs / src)) for src, target, kind in HOST_OVERLAYS
                     if kind == "dir" and (self.hp.fs / src).is_dir())

    def _check_searchable(self, vmid: int) -> None:
        """An unprivileged container's root (host uid 100000) must be able to walk down to its rootfs."""
        from simulator.lxc import lxcconf

        d = self.dirs(vmid)
        for view, real in zip([d.view, *d.view.parents], [d.real, *d.real.parents], strict=False):
            if not os.stat(view).st_mode & stat.S_IXOTH:
                raise RuntimeFailure(
                    f"unprivileged CT {vmid}: {real} is not searchable by the container's mapped root (host uid "
                    f"{lxcconf.IDMAP_BASE}), so LXC cannot reach the rootfs; use a sim root whose directories are "
                    "o+x (e.g. the default /var/lib/deploy-sim) or set unprivileged: 0")

    @staticmethod
    def _delegate_ids() -> None:
        """Give root the id range unprivileged containers map to, as a PVE host has it (/etc/subuid, /etc/subgid);
        LXC maps ids through newuidmap, which checks these files."""
        from simulator.lxc import lxcconf

        line = f"root:{lxcconf.IDMAP_BASE}:{lxcconf.IDMAP_SIZE}"
        for name in ("/etc/subuid", "/etc/subgid"):
            path = Path(name)
            text = path.read_text() if path.exists() else ""
            if line not in text.splitlines():
                path.write_text(text + ("" if not text or text.endswith("\n") else "\n") + line + "\n")

    def _shift_rootfs(self, vmid: int) -> None:
        """Unprivileged: own the rootfs by the mapped ids once (PVE does this at create with its idmap)."""
        from simulator.lxc import lxcconf

        d = self.dirs(vmid)
        marker = d.view / "shifted"
        if marker.exists():
            return
        base = lxcconf.IDMAP_BASE
        for dirpath, dirnames, filenames in os.walk(d.rootfs):
            for name in [*dirnames, *filenames, ""]:
                path = os.path.join(dirpath, name) if name else dirpath
                st = os.lstat(path)
                if st.st_uid < base:
                    mode = stat.S_IMODE(st.st_mode)
                    os.lchown(path, st.st_uid + base, st.st_gid + base)
                    if not stat.S_ISLNK(st.st_mode) and mode & (stat.S_ISUID | stat.S_ISGID):
                        os.chmod(path, mode)  # chown clears set-id bits
        marker.touch()

    def start(self, vmid: int) -> None:
        """Returns when LXC says the container runs (`lxc-start -d` waits for RUNNING), as `pct start` does: its
        systemd is still booting then, and `systemctl` inside may not answer yet."""
        self._run(self._lxc("lxc-start", vmid, "-d", "-o", str(self.dirs(vmid).real / "lxc.log"), "-l", "INFO"),
                  f"startup for container '{vmid}'")

    def shutdown(self, vmid: int, timeout_s: float, force: bool) -> bool:
        """Clean shutdown via systemd; True when it stopped. With force, kill what is left after the timeout."""
        res = subprocess.run(self._lxc("lxc-stop", vmid, "--nokill", "--timeout", str(int(timeout_s))),
                             capture_output=True, text=True)
        if res.returncode == 0 or not self.is_running(vmid):
            self._forget_gpu_load(vmid)
            return True
        if force:
            self.stop(vmid)
            return True
        return False

    def stop(self, vmid: int) -> None:
        """Hard stop, like `pct stop` (lxc-stop --kill); returns once LXC's monitor of the CT has gone too."""
        if self.is_running(vmid):
            self._run(self._lxc("lxc-stop", vmid, "--kill"), f"stopping CT {vmid}", timeout=STOP_TIMEOUT_S)
        self._wait_monitor_gone(vmid)
        self._forget_gpu_load(vmid)

    def _forget_gpu_load(self, vmid: int) -> None:
        """A killed CT's processes never remove their load files (simulator/gpu/telemetry.py); on a real GPU the
        load ends with them, so nvidia-smi must not show it for the files' few seconds of freshness."""
        for name in (f"load-{vmid}.json", f"load-p2p-{vmid}.json"):
            (self.hp.gpu / name).unlink(missing_ok=True)

    def _wait_monitor_gone(self, vmid: int, timeout_s: float = 5.0) -> None:
        """`lxc-stop` returns when the container is down; its `[lxc monitor] PATH VMID` process exits just after."""
        title = f"[lxc monitor] {self.lxcpath} {vmid}".encode()
        monitor = next((int(e.name) for e in os.scandir("/proc") if e.name.isdigit() and _cmdline(e.name) == title),
                       None)
        deadline = time.monotonic() + timeout_s
        while monitor is not None and procs.alive(monitor) and time.monotonic() < deadline:
            time.sleep(0.05)

    def reboot(self, vmid: int, timeout_s: float) -> None:
        """`pct reboot`: a clean shutdown, then a start (what pve-container's vm_reboot does)."""
        self.shutdown(vmid, timeout_s, force=True)
        self.start(vmid)

    def status(self, vmid: int) -> str:
        res = subprocess.run(self._lxc("lxc-info", vmid, "-s", "-H"), capture_output=True, text=True)
        return "running" if res.returncode == 0 and res.stdout.strip() == "RUNNING" else "stopped"

    def is_running(self, vmid: int) -> bool:
        return self.status(vmid) == "running"

    def init_pid(self, vmid: int) -> int:
        res = subprocess.run(self._lxc("lxc-info", vmid, "-p", "-H"), capture_output=True, text=True)
        return int(res.stdout.strip()) if res.stdout.strip().isdigit() else 0

    def destroy(self, vmid: int) -> None:
        self.stop(vmid)
        shutil.rmtree(self.dirs(vmid).view, ignore_errors=True)

    # ---------------------------------------------------------------------------------------- attach

    def _attach_argv(self, vmid: int, argv: list[str]) -> list[str]:
        env = {"PATH": CT_PATH, "HOME": "/root", "USER": "root", "LOGNAME": "root", "container": "lxc",
               "LANG": "C.UTF-8", **({"TERM": os.environ["TERM"]} if "TERM" in os.environ else {})}
        sets = [a for k, v in env.items() for a in ("--set-var", f"{k}={v}")]
        return self._lxc("lxc-attach", vmid, "--clear-env", *sets, "--", *argv)

    def run(self, vmid: int, argv: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(self._attach_argv(vmid, argv), input=stdin, capture_output=True)

    def push(self, vmid: int, src: str, dst: str, mode: int, uid: int, gid: int) -> None:
        """Copy a host file in through the container's own view (mounts included), then set owner and mode."""
        data = Path(src).read_bytes()
        script = 'cat > "$1" && chown "$2:$3" "$1" && chmod "$4" "$1"'
        res = self.run(vmid, ["/bin/sh", "-c", script, "sh", dst, str(uid), str(gid), f"{mode:o}"], stdin=data)
        if res.returncode != 0:
            raise RuntimeFailure(f"failed to open '{dst}' for writing: "
                                 f"{res.stderr.decode(errors='replace').strip()}")

    def pull(self, vmid: int, src: str, dst: str) -> None:
        res = self.run(vmid, ["/bin/sh", "-c", 'test -f "$1" && cat "$1"', "sh", src])
        if res.returncode != 0:
            raise RuntimeFailure(f"failed to open {src}: No such file or directory")
        Path(dst).write_bytes(res.stdout)


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").strip()
    except OSError:
        return b""
