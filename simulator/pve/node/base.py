"""The base of a simulated node's container logic (simulator/pve/lxc.py's `Node`): its host dir, its LXC runtime,
the CT config files and their locks (`lock: backup` …), and what every other part asks of them.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from simulator import ctconf as confmod
from simulator.config import CtState, HostConfig, HostPaths, locked
from simulator.pve.errors import PveError
from simulator.pve.tasks import TaskError

if TYPE_CHECKING:
    from simulator.lxc.runtime import LxcRuntime


Log = Callable[[str], None]

#: pve-container's `lock` property (PVE::LXC::Config confdesc): a running task's claim on the CT.
LOCKS = ("backup", "create", "destroyed", "disk", "fstrim", "migrate", "mounted", "rollback", "snapshot",
         "snapshot-delete")
STD_DEV_NODES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9),
                 "tty": (5, 0), "ptmx": (5, 2)}


class NodeBase:
    """Container state of one simulated node (its host dir)."""

    def __init__(self, hp: HostPaths):
        self.hp = hp
        self.cfg: HostConfig = hp.load()
        self._rt: LxcRuntime | None = None

    @property
    def lxc(self) -> LxcRuntime:
        """The LXC runtime that runs this node's containers (made on first use: most callers only read confs)."""
        if self._rt is None:
            from simulator.lxc.runtime import LxcRuntime

            self._rt = LxcRuntime(self.hp, self.cfg)
        return self._rt

    @property
    def name(self) -> str:
        return self.cfg.node

    # ------------------------------------------------------------------------------------------ conf access

    @contextmanager
    def lock(self, vmid: int) -> Iterator[None]:
        with locked(self.hp.dir / "locks" / f"lxc-{vmid}"):
            yield

    def vmids(self) -> list[int]:
        d = self.hp.lxc_conf_dir
        return sorted(int(p.stem) for p in d.glob("*.conf") if p.stem.isdigit()) if d.is_dir() else []

    def exists(self, vmid: int) -> bool:
        return self.hp.conf(vmid).is_file()

    def read(self, vmid: int) -> tuple[confmod.CtConf, str]:
        try:
            return confmod.read(self.hp.conf(vmid))
        except FileNotFoundError:
            raise PveError(f"Configuration file 'nodes/{self.name}/lxc/{vmid}.conf' does not exist") from None

    def write(self, vmid: int, conf: confmod.CtConf) -> None:
        path = self.hp.conf(vmid)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(conf.render())
        os.replace(tmp, path)

    # ------------------------------------------------------------------------------------------ config locks

    @staticmethod
    def lock_message(conf: confmod.CtConf) -> str | None:
        """PVE::AbstractConfig::check_lock's text for a locked CT (guest type CT), None when it is not locked."""
        lock = conf.options.get("lock")
        return f"CT is locked ({lock})" if lock else None

    def check_lock(self, conf: confmod.CtConf) -> None:
        """check_lock outside a worker: the API call itself fails (HTTP 500, the message as its status line)."""
        msg = self.lock_message(conf)
        if msg:
            raise PveError(msg)

    @classmethod
    def check_lock_in_task(cls, conf: confmod.CtConf, skiplock: bool = False, mounted_ok: bool = False) -> None:
        """check_lock inside a worker (start, stop, shutdown, destroy): the task fails with the same text.
        vm_start and vm_stop skip it with `skiplock` (root only) and for the `mounted` lock."""
        lock = conf.options.get("lock")
        if skiplock or (mounted_ok and lock == "mounted"):
            return
        msg = cls.lock_message(conf)
        if msg:
            raise TaskError(msg)

    def set_lock(self, vmid: int, lock: str) -> None:
        """AbstractConfig::set_lock: refused on a CT that holds another lock (vzdump's `backup`)."""
        with self.lock(vmid):
            conf, _ = self.read(vmid)
            self.check_lock(conf)
            conf.options["lock"] = lock
            self.write(vmid, conf)

    def remove_lock(self, vmid: int, lock: str | None = None) -> None:
        """AbstractConfig::remove_lock (`pct unlock` passes no lock name: any lock goes)."""
        with self.lock(vmid):
            conf, _ = self.read(vmid)
            have = conf.options.get("lock")
            if not have:
                which = f"'{lock}' " if lock is not None else "any"  # PVE's text, its double space included
                raise PveError(f"no lock found trying to remove {which} lock")
            if lock is not None and have != lock:
                raise PveError(f"found lock '{have}' trying to remove '{lock}' lock")
            del conf.options["lock"]
            self.write(vmid, conf)

    def state(self, vmid: int) -> CtState:
        return self.hp.ct(vmid).load()

    def running(self, vmid: int) -> bool:
        return self.exists(vmid) and self.lxc.is_running(vmid)

    def precheck_running(self, vmid: int) -> None:
        self.read(vmid)
        if not self.running(vmid):
            raise PveError(f"CT {vmid} not running")

    def _host_dev(self, path: str) -> Path:
        return self.hp.fs / path.lstrip("/")

    @staticmethod
    def _fill_net(spec: str) -> str:
        items = confmod.split_property(spec, "name")
        if "hwaddr" not in items:
            items["hwaddr"] = "BC:24:11:" + ":".join(f"{random.randrange(256):02X}" for _ in range(3))
        items.setdefault("type", "veth")
        name = items.pop("name", "eth0")
        return confmod.join_property({"name": name, **dict(sorted(items.items()))}, None)
