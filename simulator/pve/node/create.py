"""Creating a CT (vzcreate): the VMID claim, the config built from the API's parameters, the rootfs from the
template, and the error path that removes a half-made CT.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulator import ctconf as confmod
from simulator.config import CtState
from simulator.pve.errors import PveError
from simulator.pve.node.base import Log, NodeBase
from simulator.pve.tasks import TaskError, hold_point

#: Keys the API takes on create that are not stored in the conf file.
CREATE_ONLY = {"vmid", "node", "ostemplate", "password", "ssh-public-keys", "start", "storage", "restore",
               "force", "unique", "pool", "ignore-unpack-errors", "bwlimit", "ha-managed"}


class NodeCreate(NodeBase):
    """vzcreate and its pre-checks."""

    def precheck_create(self, vmid: int) -> None:
        """pve-cluster's check_vmid_unused: a VMID is unique across the cluster, whichever node has it."""
        from simulator.pve import cluster

        owner = self.name if self.exists(vmid) else cluster.vmid_owner(self.hp, vmid)
        if owner is not None:
            raise PveError(f"CT {vmid} already exists on node '{owner}'")

    def create_and_lock(self, vmid: int) -> None:
        """AbstractConfig::create_and_lock_config, run by the API call before its worker starts: the CT's config
        is nothing but `lock: create` until the worker has unpacked the archive and written the real one. The
        check and the write hold the cluster's VMID lock, so two nodes cannot both take one VMID."""
        from simulator.pve import cluster

        with cluster.vmid_lock(self.hp), self.lock(vmid):
            self.precheck_create(vmid)
            self.write(vmid, confmod.CtConf(options={"lock": "create"}))

    def discard_failed_create(self, vmid: int) -> None:
        """create_vm's error path: a CT still locked `create` when its task fails is destroyed, its volume first
        and its config last, under the config lock (as PVE's destroy_disks, then destroy_config): until the disk
        is gone the VMID stays taken, so a new create of it cannot unpack into a root filesystem being removed."""
        with self.lock(vmid):
            try:
                conf, _ = self.read(vmid)
            except PveError:
                return
            if conf.options.get("lock") != "create":
                return  # created already (a later `start` of the same task failed): the CT stays
            try:
                self.lxc.destroy(vmid)
            except Exception:  # a rootfs that was never made
                pass
            shutil.rmtree(self.hp.ct(vmid).dir, ignore_errors=True)
            self.hp.conf(vmid).unlink(missing_ok=True)

    def template_path(self, volid: str) -> Path:
        m = re.fullmatch(r"([a-zA-Z0-9][\w.-]*):vztmpl/(.+)", volid)
        if not m:
            raise TaskError(f"unable to parse volume ID '{volid}'")
        storage, name = m.groups()
        if storage != "local":
            raise TaskError(f"storage '{storage}' does not support container templates")
        return self.hp.template_cache / name

    def build_conf(self, params: dict[str, Any], normalise: Callable[[str, Any], str]) -> confmod.CtConf:
        opts: dict[str, str] = {}
        for key, value in params.items():
            if key in CREATE_ONLY or value is None:
                continue
            opts[key] = normalise(key, value)
        vmid = int(params["vmid"])
        opts.setdefault("arch", "amd64")
        tmpl = str(params.get("ostemplate", "")).rsplit("/", 1)[-1]
        ostype = next((o for o in ("debian", "ubuntu", "alpine", "centos", "fedora", "archlinux") if
                       tmpl.startswith(o)), "unmanaged")
        opts.setdefault("ostype", ostype)
        if "unprivileged" not in params:
            opts["unprivileged"] = "1"  # PVE 9: API default for create is unprivileged
        if opts.get("unprivileged") == "0":
            del opts["unprivileged"]
        if "rootfs" in opts:
            opts["rootfs"] = self._allocate_volume(opts["rootfs"], vmid, 0)
        else:
            opts["rootfs"] = f"local:{vmid}/vm-{vmid}-disk-0.raw,size=4G"
        for key in sorted(k for k in opts if re.fullmatch(r"net\d+", k)):
            opts[key] = self._fill_net(opts[key])
        return confmod.CtConf(options=opts, description=str(params.get("description", "")))

    @staticmethod
    def _allocate_volume(spec: str, vmid: int, index: int) -> str:
        items = confmod.split_property(spec, "volume")
        m = re.fullmatch(r"([\w.-]+):(\d+(?:\.\d+)?)", items.get("volume", ""))
        if m:  # STORAGE:SIZE_GiB -> allocate a new volume
            storage, size = m.groups()
            items["volume"] = f"{storage}:vm-{vmid}-disk-{index}"
            items["size"] = f"{size.rstrip('0').rstrip('.') if '.' in size else size}G"
        return confmod.join_property(items, "volume")

    def create(self, params: dict[str, Any], conf: confmod.CtConf, log: Log) -> None:
        """Task body of vzcreate: check the template, unpack it, then write the conf (which drops the create lock
        that create_and_lock set). A failure leaves the lock for the task's error path."""
        vmid = int(params["vmid"])
        volid = str(params.get("ostemplate", ""))
        tmpl = self.template_path(volid)
        if not tmpl.is_file():
            raise TaskError(f"unable to create CT {vmid} - volume '{volid}' does not exist")
        rootfs = confmod.split_property(conf.options["rootfs"], "volume")
        size = rootfs.get("size", "4G")
        if rootfs.get("volume", "").startswith("local-lvm:"):
            log(f'  Logical volume "{rootfs["volume"].split(":", 1)[1]}" created.')
        blocks = int(float(size.rstrip("G")) * 262144)
        log(f"Creating filesystem with {blocks} 4k blocks and {blocks // 4} inodes")
        log(f"extracting archive '/var/lib/vz/template/cache/{tmpl.name}'")
        self._create_rootfs(vmid, tmpl, params, log)
        log(f"Total bytes read: 524595200 (501MiB, {random.randint(150, 400)}MiB/s)")
        distro = str(conf.options.get("ostype", "debian"))
        ver = re.search(r"-(\d+(?:\.\d+)?)-", tmpl.name)
        log(f"Detected OS distribution '{distro}' version '{ver.group(1) if ver else 'unknown'}'")
        hold_point(self.hp, "vzcreate")  # the task_hold fault: still `lock: create` here
        with self.lock(vmid):  # "safe config (after OS detection)": the real config, without the create lock
            self.write(vmid, conf)
        log("Creating SSH host key 'ssh_host_ed25519_key' - this may take some time ...")
        log(f"done: SHA256:{os.urandom(16).hex()} root@{conf.options.get('hostname', f'CT{vmid}')}")

    def _create_rootfs(self, vmid: int, tmpl: Path, params: dict[str, Any], log: Log) -> None:
        """Real rootfs from the template; nothing is pre-installed: a fresh container is as bare as PVE's. A
        failure is the task's: its error path (discard_failed_create) removes what was made."""
        from simulator.lxc.runtime import RuntimeFailure

        cp = self.hp.ct(vmid)
        cp.dir.mkdir(parents=True, exist_ok=True)
        cp.save(CtState(vmid=vmid, status="stopped"))
        try:
            self.lxc.create(vmid, tmpl, str(params.get("ssh-public-keys") or "") or None)
        except (RuntimeFailure, OSError) as exc:
            raise TaskError(f"unable to create CT {vmid} - {exc}") from None
