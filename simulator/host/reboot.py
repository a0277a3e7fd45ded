"""`deploy sim reboot HOST`: what a PVE host's reboot does to it, in the order the real one does it.

Shutdown: pve-guests' `stopall` shuts the running containers down (clean, then killed), then SSH sessions and API
connections drop with their daemons (simulator.manager restarts them). Boot: a new boot id
(/proc/sys/kernel/random/boot_id in the host view) and uptime from 0 (the API's node `uptime`); the NVIDIA module is
loaded, every GPU back at its default power limit (a limit `nvidia-smi -pl` set is gone: simulator/gpu/powercap.py),
but the kernel module makes no device node and the `.run` driver ships no udev rule: every /dev/nvidia*
node (/dev/nvidia0..N, /dev/nvidiactl, /dev/nvidia-uvm(-tools), /dev/nvidia-modeset, /dev/nvidia-caps/*) stays
absent (and nvidia-uvm out of /proc/devices) until something runs `nvidia-modprobe` (or NVML, which runs it:
`nvidia-smi`, nvidia-persistenced). Then systemd starts the host's enabled units
(simulator.host.units): those ordered `Before=pve-guests.service` first, then pve-guests starts the `onboot: 1`
containers as pve-manager's `startall` does (by `startup` order, then VMID; `up=` delays; each start a `vzstart`
task, so a container whose `devN` path is missing fails with pve-container's own `Device … does not exist`), then
the other units. Inside each started container its own systemd brings its enabled units up, as on a real boot:
`pct start` returns once LXC says the container runs, not when its units are up.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from simulator import ctconf as confmod
from simulator import layout
from simulator.config import CtState, HostConfig, HostPaths
from simulator.gpu import health as gpu_health
from simulator.gpu import powercap as gpu_powercap
from simulator.host import units as hostunits
from simulator.pve import hardware, tasks
from simulator.pve.lxc import Node

BOOT_ID = "proc/sys/kernel/random/boot_id"
#: What the last boot did, as pve-guests and systemd would have logged it (hosts/<name>/boot.log).
BOOT_LOG = "boot.log"
SHUTDOWN_TIMEOUT_S = 30.0
#: A `startup` `up=` delay longer than this is cut short (a test bed must not sleep for minutes).
MAX_UP_DELAY_S = 30


@dataclass
class BootLog:
    """Lines of the reboot, kept in hosts/<name>/boot.log and returned to the caller."""

    path: Path
    lines: list[str] = field(default_factory=list)

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        with open(self.path, "a") as fh:
            fh.write(f"{time.strftime('%H:%M:%S')} {line}\n")


def boot_log(hp: HostPaths) -> BootLog:
    path = hp.dir / BOOT_LOG
    path.write_text("")
    return BootLog(path)


def new_boot(hp: HostPaths) -> str:
    """A new boot id; its file's mtime is the boot time (the API's node uptime counts from it)."""
    path = hp.fs / BOOT_ID
    path.parent.mkdir(parents=True, exist_ok=True)
    boot_id = str(uuid.uuid4())
    path.write_text(boot_id + "\n")
    return boot_id


def _startup(conf: confmod.CtConf) -> tuple[int, int]:
    """(order, up delay) of the `startup` property; no order sorts last (pve-manager: LONG_MAX)."""
    items = confmod.split_property(conf.options.get("startup", ""), "order")
    order = int(items["order"]) if items.get("order", "").isdigit() else 2**63 - 1
    up = int(items["up"]) if items.get("up", "").isdigit() else 0
    return order, up


def shutdown_guests(hp: HostPaths, log: BootLog) -> None:
    """pve-guests' stop at shutdown: every running container, in reverse start order, cleanly (then killed)."""
    node = Node(hp)
    running = [v for v in node.vmids() if node.running(v)]
    for vmid in sorted(running, key=lambda v: (_startup(node.read(v)[0])[0], v), reverse=True):
        log(f"Stopping CT {vmid}")
        node.lxc.shutdown(vmid, SHUTDOWN_TIMEOUT_S, force=True)

        def mark(s: CtState) -> None:
            s.status, s.started_at = "stopped", None

        hp.ct(vmid).update(mark)


def power_on(hp: HostPaths, cfg: HostConfig, log: BootLog) -> None:
    """The host comes up again: new boot id, driver loaded without its on-demand nodes, no unit active yet."""
    boot_id = new_boot(hp)
    hardware.boot_nodes(hp.dir, cfg)

    def unloaded(c: HostConfig) -> None:
        c.faults.missing_uvm = True  # nvidia-uvm is not loaded until `nvidia-modprobe -u -c0` runs
        # A reboot resets every GPU: a lost one is back, pending row remaps are applied (a failed remap stays),
        # the driver's recovery action is None again,
        # and the kernel log is the new boot's.
        c.faults.gpu_lost, c.faults.xid, c.faults.recovery = None, None, None
        c.faults.remap = ",".join(f"{g}:{v}" for g, v in gpu_health.per_gpu(c.faults.remap).items()
                                  if v != "pending") or None

    hp.update(unloaded)
    (hp.dir / gpu_health.KERNEL_LOG).unlink(missing_ok=True)
    gpu_powercap.clear(str(hp.dir))  # a fresh driver: every GPU at its default power limit again
    hostunits.clear_active(hp.fs / "etc/systemd/system")
    log(f"boot id {boot_id}: nvidia loaded; no /dev/nvidia* node (nvidiaN, nvidiactl, -uvm, -modeset, -caps)")


def _view_pid(hp: HostPaths) -> int:
    from simulator.host import sshd

    pid = sshd.view_running(hp)
    if pid is None:
        raise RuntimeError(f"{hp.name}: the host view is not running after the reboot")
    return pid


def _run_units(hp: HostPaths, cfg: HostConfig, log: BootLog, before_guests: bool) -> None:
    """Start the enabled units on one side of pve-guests, in the host view, as the host's systemd would."""

    early, late = hostunits.boot_order(hostunits.enabled_units(hp.fs / "etc/systemd/system"))
    for unit in early if before_guests else late:
        env = {**layout.session_env(cfg.name), "LANG": "C.UTF-8"}
        argv = [shutil.which("nsenter") or "/usr/bin/nsenter", "--target", str(_view_pid(hp)), "--mount", "--uts",
                "--wd", "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()), layout.VIEW_PYTHON, "-S", "-m",
                "simulator.host.units", "start", unit.name]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        text = " ".join((res.stdout + res.stderr).split())
        log(f"systemd: {unit.name}: " + ("started" if res.returncode == 0 else f"failed: {text}"))


def start_guests(hp: HostPaths, log: BootLog) -> None:
    """pve-manager's startall: `onboot: 1` containers by `startup` order then VMID, each a vzstart task."""
    node = Node(hp)
    wanted = []
    for vmid in node.vmids():
        conf, _ = node.read(vmid)
        if conf.options.get("onboot") == "1" and conf.options.get("template") != "1":
            wanted.append((*_startup(conf), vmid))
    for _order, up, vmid in sorted(wanted, key=lambda w: (w[0], w[2])):
        if node.running(vmid):
            continue
        log(f"Starting CT {vmid}")
        _upid, status = tasks.run(hp, "vzstart", str(vmid), "root@pam", functools.partial(node.start, vmid),
                                  background=False)
        if status != "OK":
            log(f"Starting CT {vmid} failed: {status}")
        if up > 0:
            log(f"Waiting for {up} seconds (startup delay)")
            time.sleep(min(up, MAX_UP_DELAY_S))


def boot(hp: HostPaths, cfg: HostConfig, log: BootLog) -> None:
    """systemd's order on a PVE host: units before pve-guests, pve-guests, the rest."""
    _run_units(hp, cfg, log, before_guests=True)
    start_guests(hp, log)
    _run_units(hp, cfg, log, before_guests=False)


__all__ = ["BOOT_ID", "BOOT_LOG", "BootLog", "boot", "boot_log", "new_boot", "power_on", "shutdown_guests"]
