"""Bring simulated Proxmox hosts up and down (`deploy sim up|down|status`, the pytest fixture).

    python -m simulator.manager up [--hosts N] [--profile NAME] [--root DIR]
    python -m simulator.manager down|status [--root DIR]
    python -m simulator.manager faults sim-1 ssh_drop_after=2 task_fail=vzstart
    python -m simulator.manager ct-faults sim-1 120 crash_on_start=true
    python -m simulator.manager reboot sim-1

Host sim-N listens on 127.0.0.(N+1) (beyond sim-253: 127.0.1.1, …, see layout.host_address): a real sshd on :2222 and
the HTTPS API on :8006. Daemons are started detached (own session, stdio to log files) so they outlive the CLI;
`down` stops exactly what `up` started, plus every container, and is safe to repeat.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from simulator import layout, procs
from simulator.config import (
    API_PORT,
    DEFAULT_ROOT,
    DEFAULT_VMID,
    FATAL_FAULTS,
    GPU_PROFILES,
    KERNEL_SHAPES,
    OUTPUTS,
    PROFILE_DRIVER,
    PROFILE_GPU_COUNT,
    ROOT_ENV,
    SSH_PORT,
    VIEW_ALIAS,
    VIEW_PY,
    VIEW_REPO,
    VIEW_VENV,
    CtFaults,
    HostConfig,
    HostFaults,
    HostPaths,
    RetiredRuntime,
    RootConfig,
    SimPaths,
    sim_id_for,
    write_json,
    write_text_atomic,
)
from simulator.gpu import health as gpu_health
from simulator.gpu import powercap as gpu_powercap
from simulator.gpu.profiles import get_profile
from simulator.host import reboot, sshd
from simulator.host import services as hostsvc
from simulator.lxc import net as lxc_net
from simulator.lxc import runtime as lxc_runtime
from simulator.lxc import storage as lxc_storage
from simulator.lxc import template as lxc_template
from simulator.pve import hardware, lxc, tls

REPO = Path(__file__).resolve().parents[2]
SIM_SRC = Path(__file__).resolve().parents[1]
TOKEN_ID = "root@pam!deploy"


@dataclass
class SimHostInfo:
    """What a client needs to reach one simulated host, and whether its daemons run."""

    name: str
    address: str
    node: str
    ssh_port: int
    api_port: int
    host_dir: Path
    key_file: Path
    known_hosts: Path
    ca_file: Path
    token_id: str
    token_secret_file: Path
    root_password_file: Path
    gpu_profile: str
    driver_version: str
    sshd_pid: int | None
    api_pid: int | None
    containers: dict[int, str]
    #: Inventory `container:` options pointing at the host's own services (index and hub).
    container_options: dict[str, str] = field(default_factory=dict)
    #: The PVE cluster the node is in (`sim up --cluster NAME`), None for a standalone node.
    cluster: str | None = None

    @property
    def running(self) -> bool:
        return self.sshd_pid is not None and self.api_pid is not None

    def to_dict(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(self).items()}


# ----------------------------------------------------------------------------------------------- helpers


def _require_root() -> None:
    if os.geteuid() != 0:
        raise RuntimeError("the simulator needs root (sshd, mount and network namespaces, mknod)")
    if not sshd.SSHD.exists():
        raise RuntimeError(f"{sshd.SSHD} not found: install openssh-server")


MAX_HOST_NUMBER = layout.MAX_HOST_NUMBER


def _root_config(root: Path) -> RootConfig:
    exe = Path(sys.executable).resolve()
    base = Path(sys.base_prefix).resolve()
    try:
        rel = str(exe.relative_to(base))
    except ValueError:
        rel = f"bin/{exe.name}"
    venv = Path(sys.prefix).resolve() if sys.prefix != sys.base_prefix else None
    venv_site = None
    if venv is not None:
        site = next(iter(venv.glob("lib/python3*/site-packages")), None)
        venv_site = str(site.relative_to(venv)) if site else None
    return RootConfig(real_root=str(root.resolve()), python_prefix=str(base), python_exe_rel=rel,
                      venv_prefix=str(venv) if venv else None, venv_site=venv_site, repo=str(REPO))


def _install_bin(sp: SimPaths, rc: RootConfig) -> None:
    """<root>/bin/python launcher and <root>/bin/host/* links into the aliased repo (refreshed each up)."""
    pythonpath = str(VIEW_REPO)
    if rc.venv_prefix and rc.venv_site:
        pythonpath += f":{VIEW_VENV}/{rc.venv_site}"
    write_text_atomic(sp.python_launcher, (
        "#!/bin/sh\n"
        "# written by `deploy sim up`: this machine's Python, reached through the view aliases under "
        f"{VIEW_ALIAS}\n"
        f'LD_LIBRARY_PATH="{VIEW_PY}/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" PYTHONPATH="{pythonpath}" '
        f'exec "{VIEW_PY}/{rc.python_exe_rel}" "$@"\n'), mode=0o755)
    shutil.rmtree(sp.root / "bin" / "ct", ignore_errors=True)  # the retired view runtime's container stand-ins
    dest = sp.bin_host
    dest.mkdir(parents=True, exist_ok=True)
    src_dir = SIM_SRC / "bin" / "host"
    wanted = {p.name for p in src_dir.iterdir() if p.is_file()}
    for old in dest.iterdir():
        if old.name not in wanted:
            old.unlink()
    for name in wanted:
        link = dest / name
        target = VIEW_REPO / (src_dir / name).relative_to(REPO)
        if link.is_symlink() and os.readlink(link) == str(target):
            continue
        link.unlink(missing_ok=True)
        link.symlink_to(target)


def _layout_fs(hp: HostPaths) -> None:
    fs = hp.fs
    for d in ("etc/pve/lxc", "etc/pve/nodes", "etc/modprobe.d", "proc/driver", "sys/module", "root",
              "var/lib/vz/template/cache", "var/lib/vz/dump", "var/lib/deploy", "dev/pts", "dev/shm",
              "var/lib/prometheus/node-exporter",
              "etc/systemd/system", "etc/udev/rules.d", "proc/sys/kernel/random"):
        (fs / d).mkdir(parents=True, exist_ok=True)
    (fs / "tmp").mkdir(exist_ok=True)
    (fs / "tmp").chmod(0o1777)
    (fs / "dev" / "shm").chmod(0o1777)
    for name, (major, minor) in lxc.STD_DEV_NODES.items():
        node = fs / "dev" / name
        if not node.exists():
            os.mknod(node, 0o666 | 0o020000, os.makedev(major, minor))
            node.chmod(0o666)
    for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        if not (fs / "dev" / link).is_symlink():
            (fs / "dev" / link).symlink_to(target)
    for f in ("proc/devices", "proc/cmdline"):
        if not (fs / f).exists():
            (fs / f).write_text("")
    if not (fs / reboot.BOOT_ID).exists():
        reboot.new_boot(hp)
    for d in ("gpu", "ct", "tasks", "locks"):
        (hp.dir / d).mkdir(exist_ok=True)


def _secret_file(path: Path, nbytes: int, uuid_like: bool = False) -> None:
    if path.exists():
        return
    value = (f"{secrets.token_hex(4)}-{secrets.token_hex(2)}-{secrets.token_hex(2)}-{secrets.token_hex(2)}-"
             f"{secrets.token_hex(6)}") if uuid_like else secrets.token_urlsafe(nbytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # O_EXCL: never through a (dangling) link
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")


def _call_hook(name: str, *args: Any) -> None:
    try:
        import simulator.software as software
    except ImportError:
        return
    fn = getattr(software, name, None)
    if callable(fn):
        fn(*args)


def _wait_port(address: str, port: int, timeout_s: float = 10.0) -> bool:
    assert address.startswith("127."), "the simulator only connects to 127.0.0.0/8"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class AddressInUse(RuntimeError):
    """A simulated host's address:port is taken: said in the operator's words (commands, not Python arguments)."""

    def __init__(self, name: str, address: str, port: int) -> None:
        self.host, self.address, self.port = name, address, port
        self.what = (f"{address}:{port} is already in use, so {name} cannot start there: another simulated host "
                     f"(for example the one `bash scripts/demo.sh` or `deploy sim up` left running) or another "
                     f"program listens on it")
        self.fix = ("stop the running simulated hosts with `deploy sim down` (add `--root DIR` if they were started "
                    "with one), or put these hosts on other numbers: `deploy sim up --first N` (sim-N listens on "
                    "127.0.0.(N+1)); the test suite takes DEPLOY_SIM_FIRST=N")
        super().__init__(f"{self.what}\n  fix: {self.fix}")


def _require_free(name: str, address: str, port: int) -> None:
    if _wait_port(address, port, timeout_s=0.01):
        raise AddressInUse(name, address, port)


def _start_api(hp: HostPaths, cfg: HostConfig) -> int:
    pidfile = hp.api / "api.pid"
    pid = procs.read_pid(pidfile)
    if pid is not None:
        return pid
    _require_free(cfg.name, cfg.address, cfg.api_port)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    proc = procs.start_detached([str(Path(sys.executable).resolve()), "-m", "simulator.pve.server",
                                 str(hp.dir)], hp.api / "api.log", env=env, cwd=hp.dir)
    if not _wait_port(cfg.address, cfg.api_port):
        proc.kill()
        raise RuntimeError(f"API server of {cfg.name} did not come up; see {hp.api / 'api.log'}")
    pidfile.write_text(f"{proc.pid}\n")
    return proc.pid


def _write_session(hp: HostPaths, cfg: HostConfig, rc: RootConfig) -> None:
    """The flat file the session shell reads instead of host.json/sim.json (see hostshell's docstring)."""
    values = {"name": cfg.name, "node": cfg.node, "real_root": rc.real_root, "python_prefix": rc.python_prefix,
              "venv_prefix": rc.venv_prefix or "", "repo": rc.repo}
    write_text_atomic(hp.sshd / layout.SESSION_FILE, "".join(f"{k}={v}\n" for k, v in values.items()))
    drop = hp.sshd / layout.DROP_FILE
    if cfg.faults.ssh_drop_after is not None:
        write_text_atomic(drop, f"{cfg.faults.ssh_drop_after}\n")
    else:
        drop.unlink(missing_ok=True)


def _info(hp: HostPaths) -> SimHostInfo:
    cfg = hp.load()
    cts: dict[int, str] = {}
    if hp.lxc_conf_dir.is_dir():
        node = lxc.Node(hp)
        cts = {v: ("running" if node.running(v) else "stopped") for v in node.vmids()}
    return SimHostInfo(
        name=cfg.name, address=cfg.address, node=cfg.node, ssh_port=cfg.ssh_port, api_port=cfg.api_port,
        host_dir=hp.dir, key_file=hp.client / "id_ed25519", known_hosts=hp.client / "known_hosts",
        ca_file=hp.api / "ca.pem", token_id=TOKEN_ID, token_secret_file=hp.api / "token-secret",
        root_password_file=hp.api / "root-password", gpu_profile=cfg.gpu_profile,
        driver_version=cfg.driver_version, sshd_pid=sshd.running(hp),
        api_pid=procs.read_pid(hp.api / "api.pid"), containers=cts, container_options=hostsvc.container_options(cfg),
        cluster=cfg.cluster)


def _inventory_entry(info: SimHostInfo, vmid: int = DEFAULT_VMID) -> dict[str, Any]:
    return {
        "address": info.address,
        "ssh": {"user": "root", "port": info.ssh_port, "key_file": str(info.key_file),
                "known_hosts": str(info.known_hosts)},
        "pve": {"node": info.node, "root_ssh": True,
                "api": {"token_id": info.token_id, "token_secret": {"file": str(info.token_secret_file)},
                        "port": info.api_port, "verify": str(info.ca_file)}},
        "container": {"vmid": vmid, "hostname": "sglang-glm5",
                      "ostemplate": "local:vztmpl/debian-12-standard", "cores": 32, "memory_mb": 65536,
                      "rootfs_size_gb": 64, "unprivileged": False, "features": {"nesting": True},
                      "expected_gpus": PROFILE_GPU_COUNT[info.gpu_profile],
                      "driver_installer": f"/root/NVIDIA-Linux-x86_64-{info.driver_version}.run",
                      **info.container_options},
        "profile": "glm5-nvfp4",
    }


#: The group `deploy sim up` writes with every host it started: `deploy up group sim` converges them all.
SIM_GROUP = "sim"


def router_stub(runs_on: str) -> str:
    """A commented `router:` section for a simulated fleet: uncommented, `deploy up group sim` installs and
    converges sglang-router in `runs_on`'s container with the group's hosts as workers (docs/fleet.md)."""
    return ("# A managed router for these hosts: uncomment it, then `deploy up group sim` installs sglang-router in\n"
            f"# {runs_on}'s container with the hosts of group {SIM_GROUP} as its workers (docs/fleet.md).\n"
            f"# router:\n#   runs_on: {runs_on}\n#   workers: {SIM_GROUP}\n")


def _vmids(infos: list[SimHostInfo]) -> list[int]:
    """Each host's container VMID: DEFAULT_VMID on a standalone node; the nodes of one cluster share one VMID
    namespace, so each takes the next one (120, 121, …), as an operator must."""
    taken: dict[str, int] = {}
    out = []
    for info in infos:
        if info.cluster is None:
            out.append(DEFAULT_VMID)
            continue
        out.append(DEFAULT_VMID + taken.get(info.cluster, 0))
        taken[info.cluster] = taken.get(info.cluster, 0) + 1
    return out


def write_inventory(root: Path, infos: list[SimHostInfo], copy_to: Path | None = None) -> Path:
    """<root>/inventory.yaml and its copy `copy_to` (its directory made if missing): hosts only. The profile and
    presets the hosts use are the tool's (`deploy sim up` writes its example's beside the copy when needed)."""
    import yaml

    text = ("# written by `deploy sim up`: the simulated hosts (loopback only), removed by `deploy sim down`\n"
            + yaml.safe_dump({"hosts": {i.name: _inventory_entry(i, vmid)
                                        for i, vmid in zip(infos, _vmids(infos), strict=True)},
                              "groups": {SIM_GROUP: [i.name for i in infos]}}, sort_keys=False)
            + (router_stub(infos[0].name) if len(infos) > 1 else ""))
    path = SimPaths(root).inventory
    write_text_atomic(path, text)
    if copy_to is not None:
        copy_to.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(copy_to, text)
    return path


# ----------------------------------------------------------------------------------------------- public API


def sim_up(root: Path = DEFAULT_ROOT, hosts: int = 1, profile: str = "rtx-pro-6000-x8",
           driver_version: str | None = None, time_scale: float = 1.0,
           inventory_copy: Path | None = None, first: int = 1, ct_storage: str = "disk",
           cluster: str | None = None) -> list[SimHostInfo]:
    """Create (or keep) and start `hosts` simulated hosts under `root`; idempotent.

    Hosts are sim-<first>..: sim-N listens on 127.0.0.(N+1), whatever the root, so two roots that are up at the
    same time must use disjoint `first` ranges (tests use this to run a second root beside the session one).

    Existing hosts keep their keys, certificates, secrets, containers and faults, so a client's known_hosts and
    CA trust stay valid across `up`; already-running daemons are left alone. Returns one entry per host.
    `ct_storage="tmpfs"` keeps the container filesystems in memory (simulator/lxc/storage.py). A host made for the
    retired view runtime is refused (config.RetiredRuntime, a ValueError) before anything of it changes.
    `cluster="NAME"` joins these hosts into one PVE cluster (simulator/pve/cluster.py); hosts started without it
    keep what they were (a standalone node stays one).
    """
    if cluster is not None and not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]{0,14}", cluster):
        raise ValueError(f"cluster name {cluster!r}: PVE allows letters, digits and '-', at most 15, a letter first")
    _require_root()
    lxc_runtime.require_lxc()
    if profile not in GPU_PROFILES:
        raise ValueError(f"unknown GPU profile {profile!r} (known: {', '.join(GPU_PROFILES)})")
    if not (hosts >= 1 and first >= 1 and first + hosts - 1 <= MAX_HOST_NUMBER):
        raise ValueError(f"hosts must be >= 1 and sim-N must stay within sim-1..sim-{MAX_HOST_NUMBER} "
                         "(127.0.0.2-127.0.255.254)")
    root = Path(root).resolve()
    sp = SimPaths(root)
    lxc_net.check_bridge_free(root, sim_id_for(root))  # another root's bridge of that name: before any change
    root.mkdir(parents=True, exist_ok=True)
    VIEW_ALIAS.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    for name in sp.host_names():  # refuse a retired host before any daemon or mount changes
        if sp.host(name).config.exists():
            sp.host(name).load()
    lxc_storage.prepare(root / "lxc", ct_storage)  # before any daemon's view copies the root's mounts
    rc = _root_config(root)
    write_json(sp.root_config, dataclasses.asdict(rc))
    _install_bin(sp, rc)
    infos = []
    for i in range(first, first + hosts):
        name = f"sim-{i}"
        hp = sp.host(name)
        hp.dir.mkdir(parents=True, exist_ok=True)
        if hp.config.exists():
            cfg = hp.load()
        else:
            cfg = HostConfig(name=name, address=layout.host_address(i), node=name, sim_id=sim_id_for(root),
                             gpu_profile=profile, driver_version=driver_version or PROFILE_DRIVER[profile],
                             time_scale=time_scale)
            hp.save(cfg)
        if cluster is not None and cfg.cluster != cluster:
            def join(c: HostConfig) -> None:
                c.cluster = cluster

            cfg = hp.update(join)
        _layout_fs(hp)
        hardware.provision(hp.dir, cfg)
        cfg = _lxc_host_up(hp, cfg)
        _call_hook("provision_host", hp.dir, cfg)
        installer = hp.fs / "root" / f"NVIDIA-Linux-x86_64-{cfg.driver_version}.run"
        if not installer.exists():
            installer.write_text("#!/bin/sh\n# NVIDIA driver installer stand-in (deploy sim)\nexit 0\n")
            installer.chmod(0o755)
        hp.api.mkdir(exist_ok=True)
        tls.ensure_certs(hp.api, cfg.address, cfg.node)
        _secret_file(hp.api / "token-secret", 0, uuid_like=True)
        _secret_file(hp.api / "root-password", 18)
        sshd.prepare(hp, cfg, REPO)
        _write_session(hp, cfg, rc)
        if sshd.running(hp) is None:
            _require_free(cfg.name, cfg.address, cfg.ssh_port)
        sshd.start(hp)
        _start_api(hp, cfg)
        hostsvc.start(hp, cfg)
        infos.append(_info(hp))
    all_infos = [_info(sp.host(n)) for n in sp.host_names()]
    write_inventory(root, all_infos, inventory_copy)
    return infos


def _kill_view_processes(root: Path, host_names: list[str]) -> None:
    """Leftover SSH-session processes (e.g. `nohup` jobs) of these hosts: matched by env and mount view."""
    real = str(root.resolve())
    victims = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        host = next((e[len(b"DEPLOY_SIM_HOST="):].decode() for e in env if e.startswith(b"DEPLOY_SIM_HOST=")),
                    None)
        if host not in host_names:
            continue
        try:
            if real in Path(f"/proc/{entry}/mountinfo").read_text():
                victims.append(int(entry))
        except OSError:
            continue
    procs.kill_all(victims, timeout_s=1.0)


def _current_config(hp: HostPaths) -> HostConfig | None:
    """host.json, or None when there is none or it belongs to the retired view runtime (`sim down` still works)."""
    try:
        return hp.load() if hp.config.exists() else None
    except RetiredRuntime:
        return None


def _remove_view_netns(hp: HostPaths) -> None:
    """A host of the retired view runtime: its containers were named netns `dsim-<sim id>-<host>-<vmid>`."""
    if not hp.config.exists():
        return
    prefix = f"dsim-{json.loads(hp.config.read_text()).get('sim_id', '')}-{hp.name}-"
    for ns in os.listdir("/run/netns") if os.path.isdir("/run/netns") else []:
        if ns.startswith(prefix):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            procs.kill_all([int(p) for p in pids if p.isdigit()], timeout_s=1.0)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _stop_containers(hp: HostPaths) -> None:
    if not hp.config.exists():
        return
    cfg = _current_config(hp)
    if cfg is None:
        _remove_view_netns(hp)
    else:
        rt = lxc_runtime.LxcRuntime(hp, cfg)
        for vmid in rt.vmids():
            rt.stop(vmid)
    ct_root = hp.dir / "ct"
    for d in ct_root.iterdir() if ct_root.is_dir() else []:
        if d.name.isdigit() and (d / "state.json").exists():
            def mark(s: Any) -> None:
                s.status, s.started_at = "stopped", None

            hp.ct(int(d.name)).update(mark)


def sim_down(root: Path = DEFAULT_ROOT) -> None:
    """Stop every daemon and container process of the hosts under `root`. State on disk is kept."""
    root = Path(root).resolve()
    sp = SimPaths(root)
    names = sp.host_names()
    for name in names:
        hp = sp.host(name)
        _stop_containers(hp)  # first: lxc-* commands go through the daemons' mount namespace
        sshd.stop(hp)
        procs.stop_tree(hp.api / "api.pid")
        hostsvc.stop(hp)
    lxc_net.site_down(root)  # after every container: the site network goes with the root's last host
    if names:
        _kill_view_processes(root, names)
    if lxc_storage.release(root / "lxc"):
        for name in names:
            _forget_containers(sp.host(name))


def sim_reboot(root: Path, host: str) -> list[str]:
    """Reboot one simulated host (simulator/host/reboot.py): guests shut down, SSH and API connections drop, a new boot
    without the on-demand NVIDIA nodes, the host's enabled units, then its `onboot` guests. Returns the boot log."""
    root = Path(root).resolve()
    hp = SimPaths(root).host(host)
    if not hp.config.exists():
        raise ValueError(f"no simulated host {host!r} under {root}")
    cfg = hp.load()
    if sshd.running(hp) is None:
        raise ValueError(f"{host} is not running: start it with `deploy sim up --root {root}` first")
    log = reboot.boot_log(hp)
    reboot.shutdown_guests(hp, log)  # first: lxc-* commands go through the daemons' mount namespace
    sshd.stop(hp)
    procs.stop_tree(hp.api / "api.pid")
    _kill_view_processes(root, [host])
    log("SSH sessions and API connections closed")
    reboot.power_on(hp, cfg, log)
    sshd.start(hp)
    _start_api(hp, cfg)
    reboot.boot(hp, hp.load(), log)
    return log.lines


def _forget_containers(hp: HostPaths) -> None:
    """The containers' volumes were in memory and are gone: so are their configs and runtime state."""
    for conf in hp.lxc_conf_dir.glob("*.conf") if hp.lxc_conf_dir.is_dir() else []:
        conf.unlink()
    shutil.rmtree(hp.dir / "ct", ignore_errors=True)


def sim_status(root: Path = DEFAULT_ROOT) -> list[SimHostInfo]:
    """Every host under `root` with daemon pids (None = not running) and container states."""
    sp = SimPaths(Path(root).resolve())
    return [_info(sp.host(n)) for n in sp.host_names()]


def _coerce(cls: type, knobs: dict[str, Any]) -> dict[str, Any]:
    known = {f.name: f for f in fields(cls)}
    out = {}
    for key, value in knobs.items():
        if key not in known:
            raise ValueError(f"unknown fault {key!r} (known: {', '.join(known)})")
        out[key] = value
    return out


def set_faults(root: Path, host: str, **knobs: Any) -> HostFaults:
    """Set host fault knobs (see HostFaults); `missing_uvm` is applied to the host's /dev at once."""
    hp = SimPaths(Path(root).resolve()).host(host)
    values = _coerce(HostFaults, knobs)
    gpu_health.check_knobs(values, hp.load().gpu_count)
    xids = [(int(c), int(g)) for c, _, g in (x.strip().partition("@") for x in (values.get("xid") or "").split(","))
            if c]

    def apply(cfg: HostConfig) -> None:
        for k, v in values.items():
            setattr(cfg.faults, k, v)
        if any(code == 79 for code, _ in xids):
            cfg.faults.gpu_lost = next(g for code, g in xids if code == 79)

    cfg = hp.update(apply)
    recovery = gpu_health.per_gpu(values.get("recovery"))
    if xids or recovery:
        buses = [g.bus_id for g in get_profile(cfg.gpu_profile).gpus]
        gpu_health.append_kernel(str(hp.dir), [gpu_health.xid_line(code, buses[g]) for code, g in xids]
                                 + [gpu_health.recovery_line(a, buses[g]) for g, a in recovery.items()])
    if "missing_uvm" in values or "driver_reload" in values:
        hardware.set_uvm(hp.dir, cfg, present=not cfg.faults.missing_uvm)
    if values.get("driver_reload"):  # a reloaded module starts every GPU at its default power limit again
        gpu_powercap.clear(str(hp.dir))  # (no udev here: deploy's rule would restart deploy-gpu-power.service)
    if "ssh_drop_after" in values:
        write_text_atomic(hp.ssh_counter, "0\n")
        drop = hp.sshd / layout.DROP_FILE
        if cfg.faults.ssh_drop_after is None:
            drop.unlink(missing_ok=True)
        else:
            write_text_atomic(drop, f"{cfg.faults.ssh_drop_after}\n")
    return cfg.faults


def set_ct_faults(root: Path, host: str, vmid: int, **knobs: Any) -> CtFaults:
    """Set per-container fault knobs (see CtFaults) in ct/<vmid>/state.json."""
    hp = SimPaths(Path(root).resolve()).host(host)
    values = _coerce(CtFaults, knobs)
    if values.get("fatal") and values["fatal"] not in FATAL_FAULTS:
        raise ValueError(f"unknown fatal fault {values['fatal']!r} (known: {', '.join(FATAL_FAULTS)})")
    if values.get("output") and values["output"] not in OUTPUTS:
        raise ValueError(f"unknown output fault {values['output']!r} (known: {', '.join(OUTPUTS)})")
    if values.get("kernel_shape") and values["kernel_shape"] not in KERNEL_SHAPES:
        raise ValueError(f"unknown kernel_shape {values['kernel_shape']!r} (known: {', '.join(KERNEL_SHAPES)})")
    if not 0 <= float(values.get("drift") or 0) <= 1:
        raise ValueError("drift is a logprob change in nats between 0 and 1 (the gate tolerates about 0.1)")
    if not hp.conf(vmid).exists():
        raise ValueError(f"CT {vmid} does not exist on {host}")

    def apply(st: Any) -> None:
        for k, v in values.items():
            setattr(st.faults, k, v)

    if "full_disk" in values:
        # Before recording it: a knob that did not take effect must not say it did.
        previous = hp.ct(vmid).load().faults.full_disk
        _full_disk(hp, vmid, str(values["full_disk"] or ""), previous)
    if "small_disk" in values:
        _small_disk(hp, vmid, str(values["small_disk"] or ""), hp.ct(vmid).load().faults.small_disk)
    faults = hp.ct(vmid).update(apply).faults
    if values.get("driver_mismatch"):
        # Like a host driver upgrade under a running container: its userspace now differs, at once.
        _install_userspace(hp, vmid, str(values["driver_mismatch"]))
    return faults


#: Mounts a small tmpfs over DIR holding a copy of its files, filled to ENOSPC (in the CT's mount namespace).
_FULL_DISK = r"""set -e
D="$1"; mkdir -p "$D"
T=$(mktemp -d /run/deploy-sim-full.XXXXXX)
cp -a "$D"/. "$T"/
mount -t tmpfs -o size=512k,mode=0755 deploy-sim-full "$D"
cp -a "$T"/. "$D"/
rm -rf "$T"
dd if=/dev/zero of="$D/.deploy-sim-filler" bs=1k 2>/dev/null || true
"""


def _full_disk(hp: HostPaths, vmid: int, path: str, previous: str | None) -> None:
    """The `full_disk` knob: unmount the previous full tmpfs, then cover `path` (absolute, in the CT) with one."""
    if path and not path.startswith("/"):
        raise ValueError(f"full_disk {path!r} must be an absolute path in the container")
    pid = lxc_runtime.LxcRuntime(hp, hp.load()).init_pid(vmid)
    if not pid:
        raise ValueError(f"CT {vmid} is not running: full_disk needs a running container")
    enter = ["nsenter", "-t", str(pid), "-m", "-p", "-r", "-w", "--"]  # -p: the CT's /proc/self is ours
    if previous:
        res = subprocess.run([*enter, "umount", "-l", previous], capture_output=True, text=True, timeout=30)
        if res.returncode != 0 and "not mounted" not in res.stderr:
            raise ValueError(f"full_disk: unmounting {previous}: {res.stderr.strip() or res.returncode}")
    if path:
        res = subprocess.run([*enter, "sh", "-c", _FULL_DISK, "full_disk", path], capture_output=True, text=True,
                             timeout=60)
        if res.returncode != 0:
            raise ValueError(f"full_disk {path}: {res.stderr.strip() or res.returncode}")


#: DIR becomes a tmpfs of SIZE holding a copy of its files, or, when it is one already, grows to SIZE in place.
_SMALL_DISK = r"""set -e
D="$1"; SIZE="$2"; mkdir -p "$D"
if awk -v d="$D" '$5 == d && $0 ~ / - tmpfs deploy-sim-disk / {found=1} END {exit !found}' /proc/self/mountinfo; then
  mount -o remount,size="$SIZE" "$D"
else
  T=$(mktemp -d /run/deploy-sim-disk.XXXXXX)
  cp -a "$D"/. "$T"/
  mount -t tmpfs -o size="$SIZE",mode=0755 deploy-sim-disk "$D"
  cp -a "$T"/. "$D"/
  rm -rf "$T"
fi
"""


def _small_disk(hp: HostPaths, vmid: int, value: str, previous: str | None) -> None:
    """The `small_disk` knob (CtFaults): `DIR:SIZE` mounts or grows DIR's own small filesystem; "" unmounts it."""
    path, _, size = value.rpartition(":")
    if value and (not path.startswith("/") or not re.fullmatch(r"[1-9][0-9]*[kmg]?", size)):
        raise ValueError(f"small_disk {value!r} must be DIR:SIZE, an absolute directory and a size like 3m or 512k")
    pid = lxc_runtime.LxcRuntime(hp, hp.load()).init_pid(vmid)
    if not pid:
        raise ValueError(f"CT {vmid} is not running: small_disk needs a running container")
    enter = ["nsenter", "-t", str(pid), "-m", "-p", "-r", "-w", "--"]
    old = (previous or "").rpartition(":")[0]
    if old and old != path:
        res = subprocess.run([*enter, "umount", "-l", old], capture_output=True, text=True, timeout=30)
        if res.returncode != 0 and "not mounted" not in res.stderr:
            raise ValueError(f"small_disk: unmounting {old}: {res.stderr.strip() or res.returncode}")
    if path:
        res = subprocess.run([*enter, "sh", "-c", _SMALL_DISK, "small_disk", path, size], capture_output=True,
                             text=True, timeout=60)
        if res.returncode != 0:
            raise ValueError(f"small_disk {value}: {res.stderr.strip() or res.returncode}")


def _install_userspace(hp: HostPaths, vmid: int, version: str) -> None:
    """A real container gets userspace `version`: what the `.run` of that version leaves in its rootfs."""
    from simulator.software import nvrun, runfile

    rootfs = lxc_runtime.LxcRuntime(hp, hp.load()).dirs(vmid).rootfs
    with tempfile.TemporaryDirectory(prefix="nvidia-installer.") as tmp:
        for name, data in runfile.payload_files().items():
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_bytes(data)
        nvrun.uninstall(rootfs)
        nvrun.install(rootfs, version, Path(tmp))


def reset_host(root: Path, host: str) -> None:
    """Back to a fresh host for the next test: faults cleared, uvm present, all containers destroyed, no deploy
    lock lease left by an earlier (killed) run, and the stock template back in `local:vztmpl` (a test may delete
    it from the storage, as an operator does; the next test must not depend on which test ran before it); the
    kernel log holds no Xid line of an earlier test, and no kernel cache of an earlier test's container is left."""
    hp = SimPaths(Path(root).resolve()).host(host)
    lxc_template.install_into(lxc_template.ensure().path, hp.template_cache)  # a hard link; nothing when present
    set_faults(root, host, **{f.name: f.default for f in fields(HostFaults)})
    (hp.dir / gpu_health.KERNEL_LOG).unlink(missing_ok=True)  # the Xid lines a test wrote: a new boot's log
    _stop_containers(hp)
    for load in hp.gpu.glob("load-*.json"):  # a killed server's GPU load (telemetry.py) ends with the test
        load.unlink(missing_ok=True)
    gpu_powercap.clear(str(hp.dir))  # a power limit a test set (nvidia-smi -pl): every GPU at its default again
    for rule in (hp.fs / "etc/udev/rules.d").glob("*"):  # udev rules a test (deploy power) wrote
        rule.unlink()
    for name in ("deploy.lease", "deploy.lease.tmp"):
        (hp.fs / "var/lib/deploy" / name).unlink(missing_ok=True)
    # the kernel caches deploy keeps for its containers (a rebuilt CT would start warm on an earlier test's)
    shutil.rmtree(hp.fs / "var/lib/deploy" / "kernel-cache", ignore_errors=True)
    for conf in hp.lxc_conf_dir.glob("*.conf"):
        conf.unlink()
    for cfg_file in ("user.cfg", "priv/token.cfg"):  # tokens and ACLs a test made (simulator.pve.acl)
        (hp.fs / "etc/pve" / cfg_file).unlink(missing_ok=True)
    shutil.rmtree(hp.dir / "ct", ignore_errors=True)
    (hp.dir / "ct").mkdir()
    shutil.rmtree(hp.dir.parent.parent / "lxc" / host, ignore_errors=True)
    units = hp.fs / "etc/systemd/system"  # units a test (or `deploy up`) installed, and every on-demand node back
    units.mkdir(parents=True, exist_ok=True)
    for entry in units.iterdir():  # the directory itself stays: the host view has it bind-mounted
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    hardware.provision(hp.dir, hp.load())


def _lxc_host_up(hp: HostPaths, cfg: HostConfig) -> HostConfig:
    """The real template in `local:vztmpl`; the root's site network (made by its first host); the host's own
    address on it, recorded in host.json as `bridge_address` (where its services for containers listen)."""
    built = lxc_template.ensure()
    lxc_template.install_into(built.path, hp.template_cache)
    root = hp.dir.parent.parent
    site = lxc_net.site_up(root, cfg.sim_id)
    address = cfg.bridge_address
    if address is None or ipaddress.ip_address(address) not in site.network:
        others = {c.bridge_address for n in SimPaths(root).host_names() if n != hp.name
                  if (c := _current_config(SimPaths(root).host(n))) is not None}
        address = next(a for a in (site.host_address(i) for i in range(254)) if a not in others)

        def apply(c: HostConfig) -> None:
            c.bridge_address = address

        cfg = hp.update(apply)
    lxc_net.add_host_address(site, address)
    return cfg


# ----------------------------------------------------------------------------------------------- CLI


def _parse_knob(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep:
        raise SystemExit(f"fault knob {text!r}: write KEY=VALUE")
    value: Any
    if raw.lower() in ("true", "yes", "on"):
        value = True
    elif raw.lower() in ("false", "no", "off"):
        value = False
    elif raw.lower() in ("none", "null", ""):
        value = None
    else:
        try:
            value = int(raw)
        except ValueError:
            try:
                value = float(raw)
            except ValueError:
                value = raw
    return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator.manager", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT))
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up")
    up.add_argument("--hosts", type=int, default=1)
    up.add_argument("--profile", choices=GPU_PROFILES, default="rtx-pro-6000-x8")
    up.add_argument("--driver", default=None)
    up.add_argument("--time-scale", type=float, default=1.0)
    up.add_argument("--inventory-copy", type=Path, default=None)
    up.add_argument("--first", type=int, default=1)
    up.add_argument("--ct-storage", choices=lxc_storage.STORAGES, default="disk")
    up.add_argument("--cluster", default=None)
    sub.add_parser("down")
    sub.add_parser("status")
    f = sub.add_parser("faults")
    f.add_argument("host")
    f.add_argument("knobs", nargs="*")
    rb = sub.add_parser("reboot")
    rb.add_argument("host")
    cf = sub.add_parser("ct-faults")
    cf.add_argument("host")
    cf.add_argument("vmid", type=int)
    cf.add_argument("knobs", nargs="*")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "up":
            before = {i.name for i in sim_status(args.root) if i.running}
            infos = sim_up(args.root, args.hosts, args.profile, args.driver, args.time_scale, args.inventory_copy,
                           first=args.first, ct_storage=args.ct_storage, cluster=args.cluster)
            _report(infos, args.json, before)
        elif args.cmd == "down":
            sim_down(args.root)
            if not args.json:
                print(f"simulated hosts under {args.root} stopped")
        elif args.cmd == "status":
            _report(sim_status(args.root), args.json, set())
        elif args.cmd == "faults":
            print(json.dumps(dataclasses.asdict(set_faults(args.root, args.host,
                                                           **dict(map(_parse_knob, args.knobs))))))
        elif args.cmd == "reboot":
            print("\n".join(sim_reboot(args.root, args.host)))
        elif args.cmd == "ct-faults":
            print(json.dumps(dataclasses.asdict(set_ct_faults(args.root, args.host, args.vmid,
                                                              **dict(map(_parse_knob, args.knobs))))))
    except (RuntimeError, ValueError) as exc:  # StorageError, AddressInUse … are RuntimeErrors
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _report(infos: list[SimHostInfo], as_json: bool, already: set[str]) -> None:
    if as_json:
        print(json.dumps([i.to_dict() for i in infos], indent=2))
        return
    if not infos:
        print("no simulated hosts")
    for i in infos:
        state = "running" if i.running else "stopped"
        note = " (already running)" if i.name in already else ""
        cts = ", ".join(f"{v}:{s}" for v, s in i.containers.items()) or "none"
        print(f"{i.name}: {state}{note}  ssh root@{i.address} -p {i.ssh_port} -i {i.key_file}  "
              f"api https://{i.address}:{i.api_port}  profile {i.gpu_profile}  containers {cts}")


__all__ = [
    "API_PORT",
    "SSH_PORT",
    "SimHostInfo",
    "reset_host",
    "set_ct_faults",
    "set_faults",
    "sim_down",
    "sim_reboot",
    "sim_status",
    "sim_up",
    "write_inventory",
]

if __name__ == "__main__":
    sys.exit(main())
