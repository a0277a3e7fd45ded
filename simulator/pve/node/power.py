"""Starting, stopping, rebooting and destroying a CT (vzstart, vzstop, vzshutdown, vzreboot, vzdestroy) with the
devices it is passed.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from typing import Literal

from simulator import ctconf as confmod
from simulator.config import CtState
from simulator.pve.errors import PveError
from simulator.pve.node.base import Log, NodeBase
from simulator.pve.tasks import TaskError

#: How a stop checks the CT's lock: vm_stop unless it is `mounted`, vm_shutdown always, vzdump's own stop never.
LockCheck = Literal["unless-mounted", "always", "skip"]


class NodePower(NodeBase):
    """The CT's power tasks."""

    def precheck_start(self, vmid: int) -> None:
        self.read(vmid)
        if self.running(vmid):
            raise PveError(f"CT {vmid} already running")

    def _passed_devices(self, vmid: int, conf: confmod.CtConf) -> list[tuple[str, int, int, int]]:
        """(container path, major, minor, mode) for every devN entry and every present lxc.mount.entry node."""
        out: list[tuple[str, int, int, int]] = []
        for _key, spec in conf.dev_entries().items():
            items = confmod.split_property(spec, "path")
            path = items.get("path", "")
            node = self._host_dev(path)
            try:
                st = node.stat()
            except FileNotFoundError:
                raise TaskError(f"Device {path} does not exist") from None
            if not stat.S_ISCHR(st.st_mode) and not stat.S_ISBLK(st.st_mode):
                raise TaskError(f"{path} is not a device")
            mode = int(items.get("mode", "0660"), 8)
            out.append((path, os.major(st.st_rdev), os.minor(st.st_rdev), mode))
        for key, value in conf.lxc:
            if key != "lxc.mount.entry":
                continue
            fields = value.split()
            if len(fields) < 4 or not fields[0].startswith("/dev/"):
                continue
            src, dst, opts = fields[0], fields[1], fields[3].split(",")
            node = self._host_dev(src)
            if not node.exists():
                if "optional" in opts:
                    continue  # like LXC: a missing optional bind source is skipped silently
                raise TaskError(f"startup for container '{vmid}' failed")
            nodes = [node] if not node.is_dir() else [p for p in node.rglob("*") if not p.is_dir()]
            for n in nodes:
                st = n.stat()
                if stat.S_ISCHR(st.st_mode):
                    rel = "/" + dst.strip("/") + str(n)[len(str(node)):]
                    out.append((rel, os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode)))
        return out

    def start(self, vmid: int, log: Log, skiplock: bool = False) -> None:
        """Task body of vzstart: check the lock, check/copy passed devices, create the network namespace, mark
        running. `skiplock`: the API's root-only option, and PVE's own starts (vm_reboot, vzdump) that skip it."""
        with self.lock(vmid):
            conf, _ = self.read(vmid)
            self.check_lock_in_task(conf, skiplock=skiplock, mounted_ok=True)
            if self.running(vmid):
                raise TaskError(f"CT {vmid} already running")
            if conf.pending or conf.pending_delete:  # vm_start: "apply pending changes while starting"
                from simulator.pve import pending

                pending.apply(conf)
                self.write(vmid, conf)
            self._start_lxc(vmid, conf, self._passed_devices(vmid, conf))

    def _start_lxc(self, vmid: int, conf: confmod.CtConf, devices: list[tuple[str, int, int, int]]) -> None:
        from simulator.lxc.lxcconf import ConfError, Device
        from simulator.lxc.runtime import RuntimeFailure

        rt = self.lxc
        devs = [Device(rt.real_host_path(self._host_dev(path)), path, major, minor)
                for path, major, minor, _mode in devices]
        try:
            rt.write_config(vmid, conf, devs)
            rt.start(vmid)
        except ConfError as exc:
            raise TaskError(f"startup for container '{vmid}' failed: {exc}") from None
        except RuntimeFailure as exc:
            raise TaskError(str(exc)) from None

        def mark(st: CtState) -> None:
            st.status, st.started_at = "running", time.time()

        self.hp.ct(vmid).update(mark)

    def reboot(self, vmid: int, log: Log, timeout_s: float = 60.0) -> None:
        """Task body of vzreboot: shutdown, then start again (pve-container's vm_reboot)."""
        with self.lock(vmid):
            self.lxc.shutdown(vmid, timeout_s, force=True)
        self.start(vmid, log, skiplock=True)  # PVE::LXC::vm_reboot checks no lock

    def stop(self, vmid: int, log: Log, graceful_timeout_s: float = 0.0, force: bool = True,
             lock_check: LockCheck = "unless-mounted") -> None:
        """Task body of vzstop/vzshutdown: `lxc-stop` (kill) or a clean shutdown of the container's systemd.

        Shutdown waits up to graceful_timeout_s; without force a container that is still running then makes the
        task fail like `lxc-stop --nokill` does. `lock_check`: vm_stop checks the lock unless it is `mounted`
        ("unless-mounted"), vm_shutdown always ("always"), vzdump's own stop never ("skip").
        """
        with self.lock(vmid):
            conf, _ = self.read(vmid)
            self.check_lock_in_task(conf, skiplock=lock_check == "skip", mounted_ok=lock_check == "unless-mounted")
            if graceful_timeout_s > 0:
                if not self.lxc.shutdown(vmid, graceful_timeout_s, force):
                    raise TaskError(f"command 'lxc-stop -n {vmid} --nokill --timeout "
                                    f"{int(graceful_timeout_s)}' failed: exit code 1")
            else:
                self.lxc.stop(vmid)

            def mark(s: CtState) -> None:
                s.status, s.started_at = "stopped", None

            self.hp.ct(vmid).update(mark)

    def destroy(self, vmid: int, log: Log) -> None:
        with self.lock(vmid):
            conf, _ = self.read(vmid)
            self.check_lock_in_task(conf)  # destroy_vm checks again once it holds the config lock
            if self.running(vmid):
                raise TaskError(f"CT {vmid} is running - destroy failed")
            rootfs = confmod.split_property(conf.options.get("rootfs", ""), "volume").get("volume", "")
            if rootfs.startswith("local-lvm:"):
                log(f'  Logical volume "{rootfs.split(":", 1)[1]}" successfully removed.')
            self.lxc.destroy(vmid)  # the volume first, the config last: the VMID is taken until both are gone
            shutil.rmtree(self.hp.ct(vmid).dir, ignore_errors=True)
            self.hp.conf(vmid).unlink()
