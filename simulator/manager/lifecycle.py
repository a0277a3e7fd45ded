"""Bring simulated Proxmox hosts up and down, reboot one, report them (`deploy sim up|down|status|reboot`, the
pytest fixture); their fault knobs are simulator/manager/faults.py, `python -m simulator.manager` is cli.py.

Host sim-N listens on 127.0.0.(N+1) (beyond sim-253: 127.0.1.1, …, see layout.host_address): a real sshd on :2222 and
the HTTPS API on :8006. Daemons are started detached (own session, stdio to log files) so they outlive the CLI;
`down` stops exactly what `up` started, plus every container, and is safe to repeat.
"""

from __future__ import annotations

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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator import layout, procs
from simulator.config import (
    API_PORT,
    DEFAULT_ROOT,
    DEFAULT_VMID,
    GPU_PROFILES,
    PROFILE_DRIVER,
    PROFILE_GPU_COUNT,
    SSH_PORT,
    VIEW_ALIAS,
    VIEW_PY,
    VIEW_REPO,
    VIEW_VENV,
    HostConfig,
    HostPaths,
    RetiredRuntime,
    RootConfig,
    SimPaths,
    sim_id_for,
    write_json,
    write_text_atomic,
)
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
    """The flat file the session shell reads instead of host.json/sim.json (see simulator/host/shell.py's docstring)."""
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


def stop_containers(hp: HostPaths) -> None:
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
        stop_containers(hp)  # first: lxc-* commands go through the daemons' mount namespace
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


__all__ = [
    "API_PORT",
    "SSH_PORT",
    "SimHostInfo",
    "sim_down",
    "sim_reboot",
    "sim_status",
    "sim_up",
    "write_inventory",
]
