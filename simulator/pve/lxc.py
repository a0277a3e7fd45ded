"""The one implementation of container lifecycle and config on a simulated node.

Both the HTTPS API server and the host's `pct`/`pvesh` call these functions, so every view of a container
(conf file, API, CLI, `pct exec`) always agrees. Error texts are PVE's. Operations that PVE runs as worker tasks
take a `log` callable and raise `TaskError`; synchronous pre-checks raise `PveError` (HTTP 500 unless stated).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from simulator.config import CtState, HostConfig, HostPaths, locked
from simulator.lxc import net as lxc_net
from simulator.pve import conf as confmod
from simulator.pve.acl import ROOT_USER
from simulator.pve.errors import PveError as PveError
from simulator.pve.schema import ParamError
from simulator.pve.tasks import TaskError, hold_point

if TYPE_CHECKING:
    from simulator.lxc.runtime import LxcRuntime

Log = Callable[[str], None]
#: How a stop checks the CT's lock: vm_stop unless it is `mounted`, vm_shutdown always, vzdump's own stop never.
LockCheck = Literal["unless-mounted", "always", "skip"]

#: Keys the API takes on create that are not stored in the conf file.
CREATE_ONLY = {"vmid", "node", "ostemplate", "password", "ssh-public-keys", "start", "storage", "restore",
               "force", "unique", "pool", "ignore-unpack-errors", "bwlimit", "ha-managed"}
#: pve-container's `lock` property (PVE::LXC::Config confdesc): a running task's claim on the CT.
LOCKS = ("backup", "create", "destroyed", "disk", "fstrim", "migrate", "mounted", "rollback", "snapshot",
         "snapshot-delete")
STD_DEV_NODES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9),
                 "tty": (5, 0), "ptmx": (5, 2)}


def perm_error(what: str) -> PveError:
    return PveError(f"Permission check failed ({what})", 403)


class Node:
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

    # ------------------------------------------------------------------------------------------ permissions

    def check_modify_perm(self, user: str, vmid: int, keys: list[str], values: dict[str, Any], unprivileged: bool,
                          old: dict[str, str] | None = None) -> None:
        """pve-container check_ct_modify_config_perm: only root@pam may pass devices, touch privileged features;
        nesting needs VM.Allocate on the CT, a netN bridge SDN.Use on its zone (check_bridge_access, for the old
        and the new value). The per-key VM.Config.* privileges are checked by the API first (api._config_perms)."""
        if user == ROOT_USER:
            return
        from simulator.pve import acl

        old = old or {}
        for key in keys:
            if re.fullmatch(r"dev\d+", key):
                raise perm_error("configuring device passthrough is only allowed for root@pam")
            if key == "hookscript":
                raise perm_error("changing the hookscript is only allowed for root@pam")
            if key == "features":
                if not unprivileged:
                    raise perm_error("changing feature flags for privileged container is only allowed for root@pam")
                new = confmod.split_property(str(values.get(key, "")), "")
                was = confmod.split_property(old.get(key, ""), "")
                changed = {k for k in set(new) | set(was) if new.get(k) != was.get(k)}
                if changed - {"nesting"}:
                    raise perm_error("changing feature flags (except nesting) is only allowed for root@pam")
                if changed:
                    acl.require(self.hp, user, f"/vms/{vmid}", ["VM.Allocate"])
            if re.fullmatch(r"net\d+", key):
                for raw in (old.get(key), values.get(key)):
                    if raw:
                        self._check_bridge_access(user, str(raw))

    def _check_bridge_access(self, user: str, raw: str) -> None:
        """pve-guest-common check_vnet_access: a plain bridge is a vnet of the `localnetwork` zone; SDN.Use on
        the bridge, or on each VLAN tag (`tag=`, `trunks=`) below it."""
        from simulator.pve import acl

        net = confmod.split_property(raw, "name")
        bridge = net.get("bridge")
        if not bridge:
            return
        zone = f"/sdn/zones/localnetwork/{bridge}"
        tags: set[str] = set()
        for part in (net.get("trunks") or "").split(";"):
            lo, _, hi = part.partition("-")
            if lo.isdigit():
                tags.update(str(t) for t in range(int(lo), int(hi or lo) + 1))
        if net.get("tag"):
            acl.require(self.hp, user, f"{zone}/{net['tag']}", ["SDN.Use"])
        for tag in sorted(tags):
            acl.require(self.hp, user, f"{zone}/{tag}", ["SDN.Use"])
        if not (net.get("tag") or tags):
            acl.require(self.hp, user, zone, ["SDN.Use"])

    # ------------------------------------------------------------------------------------------ create

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

    @staticmethod
    def _fill_net(spec: str) -> str:
        items = confmod.split_property(spec, "name")
        if "hwaddr" not in items:
            items["hwaddr"] = "BC:24:11:" + ":".join(f"{random.randrange(256):02X}" for _ in range(3))
        items.setdefault("type", "veth")
        name = items.pop("name", "eth0")
        return confmod.join_property({"name": name, **dict(sorted(items.items()))}, None)

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

    # ------------------------------------------------------------------------------------------ config

    def config_get(self, vmid: int, current: bool = False) -> dict[str, Any]:
        """GET config: pending values by default, like PVE (`current=1`: the values the container runs with)."""
        from simulator.pve import pending

        conf, digest = self.read(vmid)
        conf = conf if current else pending.with_pending(conf)
        data: dict[str, Any] = dict(conf.options)
        if conf.description:
            data["description"] = conf.description
        data["digest"] = digest
        if conf.lxc:
            data["lxc"] = [[k, v] for k, v in conf.lxc]
        return data

    def config_set(self, vmid: int, values: dict[str, str], delete: list[str], digest: str | None,
                   user: str) -> None:
        for opt in delete:
            if opt in values:
                raise ParamError({"delete": f"you can't use '-{opt}' and -delete {opt}' at the same time"})
        with self.lock(vmid):
            conf, current = self.read(vmid)
            self.check_lock(conf)  # update_vm: before the digest and every other check
            if digest and digest != current:
                raise PveError("detected modified configuration - file changed by other user? Try again.")
            unpriv = conf.options.get("unprivileged") == "1"
            self.check_modify_perm(user, vmid, [*values, *delete], values, unpriv, conf.options)
            values = {k: self._fill_net(v) if re.fullmatch(r"net\d+", k) else v for k, v in values.items()}
            self.check_devices(values)
            from simulator.pve import pending

            pending.update(conf, values, delete, running=self.running(vmid))
            self.write(vmid, conf)

    def check_devices(self, values: dict[str, Any]) -> None:
        """update_pct_config stats every devN path on the host when it is set (Tools::get_device_mode_and_rdev)."""
        for key, spec in values.items():
            if re.fullmatch(r"dev\d+", key):
                path = confmod.split_property(str(spec), "path").get("path", "")
                try:
                    mode = self._host_dev(path).stat().st_mode
                except FileNotFoundError:
                    raise PveError(f"Device {path} does not exist") from None
                if not stat.S_ISCHR(mode) and not stat.S_ISBLK(mode):
                    raise PveError(f"{path} is not a device")

    # ------------------------------------------------------------------------------------------ start/stop

    def precheck_start(self, vmid: int) -> None:
        self.read(vmid)
        if self.running(vmid):
            raise PveError(f"CT {vmid} already running")

    def precheck_running(self, vmid: int) -> None:
        self.read(vmid)
        if not self.running(vmid):
            raise PveError(f"CT {vmid} not running")

    def _host_dev(self, path: str) -> Path:
        return self.hp.fs / path.lstrip("/")

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

    # ------------------------------------------------------------------------------------------ read-only

    def status(self, vmid: int) -> dict[str, Any]:
        conf, _ = self.read(vmid)
        st = self.state(vmid)
        run = self.running(vmid)
        o = conf.options
        mem = int(o.get("memory", "512")) * 1024 * 1024
        size = confmod.split_property(o.get("rootfs", ""), "volume").get("size", "4G")
        return {
            "vmid": vmid, "name": o.get("hostname", f"CT{vmid}"), "status": "running" if run else "stopped",
            "type": "lxc", "cpus": int(o.get("cores", "1")), "maxmem": mem,
            "maxswap": int(o.get("swap", "512")) * 1024 * 1024, "maxdisk": _size_bytes(size),
            "mem": mem // 20 if run else 0, "swap": 0, "disk": _size_bytes(size) // 10 if run else 0,
            "cpu": 0.01 if run else 0, "uptime": int(time.time() - st.started_at) if run and st.started_at else 0,
            "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0,
            "ha": {"managed": int(st.faults.ha_managed)},
            "template": 0 if "template" not in o else int(o["template"]),
            **({"pid": self.lxc.init_pid(vmid)} if run else {}),
            **({"lock": o["lock"]} if o.get("lock") else {}),
        }

    def _inet(self, items: dict[str, str]) -> str | None:
        """The interface's address as the container has it: a static `ip=`, else its lease on the site's DHCP
        server (None before it has one)."""
        ip = items.get("ip", "")
        if "/" in ip:
            return ip
        if ip != "dhcp" or not items.get("hwaddr"):
            return None
        site = self.lxc.site_paths.load()
        leased = lxc_net.lease_address(self.lxc.site_paths, items["hwaddr"])
        return f"{leased}/{site.prefixlen}" if leased and site else None

    def interfaces(self, vmid: int) -> list[dict[str, Any]]:
        self.precheck_running(vmid)
        conf, _ = self.read(vmid)
        out: list[dict[str, Any]] = [{"name": "lo", "hwaddr": "00:00:00:00:00:00", "inet": "127.0.0.1/8",
                                      "inet6": "::1/128", "ip-addresses": [
                                          {"ip-address": "127.0.0.1", "prefix": 8, "ip-address-type": "inet"},
                                          {"ip-address": "::1", "prefix": 128, "ip-address-type": "inet6"}]}]
        for key in sorted(k for k in conf.options if re.fullmatch(r"net\d+", k)):
            items = confmod.split_property(conf.options[key], "name")
            entry: dict[str, Any] = {"name": items.get("name", "eth0"), "hwaddr": items.get("hwaddr", "").lower(),
                                     "ip-addresses": []}
            cidr = self._inet(items)
            if cidr is not None:
                ip, prefix = cidr.split("/")
                entry["inet"] = cidr
                entry["ip-addresses"] = [{"ip-address": ip, "prefix": int(prefix), "ip-address-type": "inet"}]
            out.append(entry)
        return out


def _size_bytes(size: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", size)
    if not m:
        return 0
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2)]
    return int(float(m.group(1)) * mult)

