"""PVE API dispatcher shared by the HTTPS server and `pvesh`/`pct`: schema validation, then one handler per
(method, path template). Handlers return the `data` of PVE's `{"data": ...}` envelope.

The caller's identity decides what is allowed: `root@pam` (the CLI over SSH, or a root@pam ticket) may pass
devices; an API token (`root@pam!deploy`) gets PVE's root@pam-only permission errors.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulator import ctconf as confmod
from simulator.config import HostPaths
from simulator.pve import acl, cluster, ha, hardware, pending, schema, tasks
from simulator.pve import lxc as lxcmod
from simulator.pve.lxc import Node, PveError
from simulator.pve.tasks import TaskError

REPOID = "b6b7d3a1c6e5f0a2"
#: The system templates Proxmox's appliance index lists now (it lists one version per template and moves on:
#: debian-12-standard_12.7-1, which sim hosts still have in their storage, is gone from it). The host fault
#: `aplinfo=NAME,…` starts a node with another index.
APLINFO = [
    ("debian-12-standard_12.12-1_amd64.tar.zst", "debian-12-standard", "12.12-1", "debian-12",
     "Debian 12 Bookworm (standard)"),
    ("debian-13-standard_13.1-2_amd64.tar.zst", "debian-13-standard", "13.1-2", "debian-13",
     "Debian 13 Trixie (standard)"),
    ("ubuntu-24.04-standard_24.04-2_amd64.tar.zst", "ubuntu-24.04-standard", "24.04-2", "ubuntu-24.04",
     "Ubuntu 24.04 Noble (standard)"),
    ("ubuntu-22.04-standard_22.04-1_amd64.tar.zst", "ubuntu-22.04-standard", "22.04-1", "ubuntu-22.04",
     "Ubuntu 22.04 Jammy (standard)"),
]
TEMPLATE_SIZE = 123_456_789 // 1000  # bytes actually written for a "downloaded" template (kept small)


class TaskFailed(Exception):
    """A foreground (CLI) task ended with an error; the CLI prints it and exits 255."""

    def __init__(self, upid: str, exitstatus: str):
        super().__init__(exitstatus)
        self.upid = upid
        self.exitstatus = exitstatus


@dataclass
class Caller:
    user: str = "root@pam"
    background: bool = True  # API server: tasks run in a thread; CLI: in the foreground
    echo: Callable[[str], None] | None = None  # CLI: print task log lines as they happen

    #: Result attributes PVE puts next to `data` in the envelope (`total` of a task log).
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def is_token(self) -> bool:
        return "!" in self.user


@dataclass
class Ctx:
    hp: HostPaths
    node: Node
    caller: Caller
    ep: schema.Endpoint

    def task(self, typ: str, id_: str, body: Callable[[tasks.TaskLog], None],
             on_error: Callable[[], None] | None = None) -> str:
        upid, exitstatus = tasks.run(self.hp, typ, id_, self.caller.user, body,
                                     background=self.caller.background, echo=self.caller.echo, on_error=on_error)
        if not self.caller.background and exitstatus != "OK":
            raise TaskFailed(upid, exitstatus)
        return upid


Handler = Callable[[Ctx, dict[str, Any]], Any]
ROUTES: dict[tuple[str, str], Handler] = {}


def route(method: str, template: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        ROUTES[(method, template)] = fn
        return fn

    return deco


def handle(hp: HostPaths, method: str, path: str, params: dict[str, Any], caller: Caller) -> Any:
    """Validate and dispatch one API call. Raises ParamError (400), PveError, or TaskFailed (CLI only)."""
    method = method.upper()
    ep = schema.find(method, path)
    if ep is None:
        raise PveError(f"Method '{method} /{path.strip('/')}' not implemented", 501)
    p = schema.validate(ep, params)
    node = Node(hp)
    if "node" in p and p["node"] != node.name:
        # pveproxy proxies `/nodes/<other>/…` to that node of the cluster; a name outside it does not resolve.
        other = cluster.member(hp, str(p["node"]))
        if other is None:
            raise PveError(f"hostname lookup '{p['node']}' failed - failed to get address info for: "
                           f"{p['node']}: Name or service not known", 595)
        node = Node(other)
    fn = ROUTES.get((method, ep.template))
    if fn is None:
        raise PveError(f"Method '{method} {ep.template}' not implemented by the simulator", 501)
    acl.check_schema(hp, caller.user, (ep.info.get("permissions") or {}).get("check") or [],
                     {**ep.path_params, **p})
    if method != "GET" and not cluster.quorate(node.hp):  # /etc/pve is read-only without quorum
        raise PveError(cluster.NO_QUORUM)
    return fn(Ctx(node.hp, node, caller, ep), p)


def normaliser(ep: schema.Endpoint) -> Callable[[str, Any], str]:
    """Render a validated value the way PVE writes it to the conf (booleans 0/1, property strings re-ordered)."""

    def norm(key: str, value: Any) -> str:
        sch = schema.schema_for_key(ep.properties, key) or {}
        if sch.get("type") == "boolean":
            return str(schema.parse_bool(value))
        fmt = sch.get("format")
        if isinstance(fmt, dict):
            parsed = schema.parse_property_string(fmt, str(value), key)
            default_key = next((k for k, s in fmt.items() if s.get("default_key")), None)
            parts = []
            if default_key and default_key in parsed:
                parts.append(str(parsed.pop(default_key)))
            if re.fullmatch(r"net\d+", key) and "name" in parsed:
                parts.append(f"name={parsed.pop('name')}")
            parts.extend(f"{k}={v}" for k, v in sorted(parsed.items()))
            return ",".join(parts)
        return str(value)

    return norm


# ---------------------------------------------------------------------------------------------- cluster


@route("GET", "/version")
def _version(ctx: Ctx, p: dict[str, Any]) -> Any:
    v = ctx.node.cfg.pve_version
    return {"version": v, "release": ".".join(v.split(".")[:2]), "repoid": REPOID[:8], "console": "xtermjs"}


@route("GET", "/nodes")
def _nodes(ctx: Ctx, p: dict[str, Any]) -> Any:
    return [_node_entry(Node(m)) for m in cluster.members(ctx.node.hp)]


def _uptime_s(hp: HostPaths) -> int:
    """Seconds since the host's boot: the boot id file is written at each boot (simulator/host/reboot.py)."""
    try:
        return max(0, int(time.time() - (hp.fs / "proc/sys/kernel/random/boot_id").stat().st_mtime))
    except OSError:
        return 0


def _node_entry(node: Node) -> dict[str, Any]:
    return {"node": node.name, "id": f"node/{node.name}", "type": "node", "status": "online",
            "maxcpu": 128, "cpu": 0.01, "maxmem": 1 << 40, "mem": 1 << 34, "maxdisk": 1 << 40,
            "disk": 1 << 35, "uptime": _uptime_s(node.hp), "level": "", "ssl_fingerprint": ""}


@route("GET", "/cluster/status")
def _cluster_status(ctx: Ctx, p: dict[str, Any]) -> Any:
    """pve-manager's ClusterStatus: a `cluster` entry (name, nodes, quorate) and one `node` entry per member; a
    standalone node lists only itself (nodeid 0)."""
    nodes = [Node(m) for m in cluster.members(ctx.node.hp)]
    name = ctx.node.cfg.cluster
    out: list[dict[str, Any]] = []
    if name:
        out.append({"type": "cluster", "id": "cluster", "name": name, "nodes": len(nodes),
                    "quorate": int(cluster.quorate(ctx.node.hp)), "version": len(nodes)})
    for index, n in enumerate(nodes, start=1):
        out.append({"type": "node", "id": f"node/{n.name}", "name": n.name, "nodeid": index if name else 0,
                    "ip": n.cfg.address, "online": 1, "local": int(n.name == ctx.node.name), "level": ""})
    return out


@route("GET", "/cluster/nextid")
def _nextid(ctx: Ctx, p: dict[str, Any]) -> Any:
    used = cluster.used_vmids(ctx.node.hp)
    if "vmid" in p:
        if p["vmid"] in used:
            raise schema.ParamError({"vmid": f"VM {p['vmid']} already exists"})
        return str(p["vmid"])
    vmid = 100
    while vmid in used:
        vmid += 1
    return str(vmid)


def _guest_entry(node: Node, vmid: int) -> dict[str, Any]:
    st = node.status(vmid)
    return {"id": f"lxc/{vmid}", "type": "lxc", "vmid": vmid, "node": node.name, "name": st["name"],
            "status": st["status"], "maxmem": st["maxmem"], "mem": st["mem"], "maxcpu": st["cpus"],
            "cpu": st["cpu"], "maxdisk": st["maxdisk"], "disk": st["disk"], "uptime": st["uptime"],
            "template": st["template"], "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0,
            **({"lock": st["lock"]} if "lock" in st else {})}


@route("GET", "/cluster/resources")
def _resources(ctx: Ctx, p: dict[str, Any]) -> Any:
    """Every member's guests, node and storages (pmxcfs shares the resource list across the cluster)."""
    kind = p.get("type")
    out: list[dict[str, Any]] = []
    nodes = [Node(m) for m in cluster.members(ctx.node.hp)]
    if kind in (None, "vm"):
        out += [_guest_entry(n, v) for n in nodes for v in _visible(ctx, n)]
    if kind in (None, "node"):
        out += [_node_entry(n) for n in nodes]
    if kind in (None, "storage"):
        out += [{"id": f"storage/{n.name}/{s['storage']}", "type": "storage", "storage": s["storage"],
                 "node": n.name, "status": "available", "content": s["content"],
                 "plugintype": s["type"], "maxdisk": s["total"], "disk": s["used"], "shared": 0}
                for n in nodes for s in _storages()]
    return out


# ---------------------------------------------------------------------------------------------- lxc


def _visible(ctx: Ctx, node: Node | None = None) -> list[int]:
    """Lists show only the CTs the caller has VM.Audit on (pve-container's vmlist, cluster/resources)."""
    return [v for v in (node or ctx.node).vmids()
            if acl.allowed(ctx.hp, ctx.caller.user, f"/vms/{v}", ["VM.Audit"])]


@route("GET", "/nodes/{node}/lxc")
def _lxc_list(ctx: Ctx, p: dict[str, Any]) -> Any:
    out = []
    for vmid in _visible(ctx):
        st = ctx.node.status(vmid)
        out.append({k: st[k] for k in ("vmid", "name", "status", "type", "cpus", "maxmem", "maxswap", "maxdisk",
                                       "mem", "disk", "cpu", "uptime", "netin", "netout", "lock") if k in st})
    return out


@route("POST", "/nodes/{node}/lxc")
def _lxc_create(ctx: Ctx, p: dict[str, Any]) -> Any:
    vmid = int(p["vmid"])
    if p.get("restore"):
        raise PveError("restore is not supported by the simulator", 501)
    if "ostemplate" not in p:
        raise schema.ParamError({"ostemplate": schema.MSG_MISSING})
    unpriv = bool(schema.parse_bool(p.get("unprivileged", 1)))
    _create_perms(ctx, p, vmid, unpriv)
    ctx.node.precheck_create(vmid)
    ctx.node.check_modify_perm(ctx.caller.user, vmid, [k for k in p if k not in ("vmid", "node")], p, unpriv)
    conf = ctx.node.build_conf(p, normaliser(ctx.ep))
    ctx.node.check_devices(conf.options)  # update_pct_config runs before the worker: the call itself fails
    start = bool(p.get("start"))
    ctx.node.create_and_lock(vmid)  # `lock: create` from here until the worker has written the real config

    def body(log: tasks.TaskLog) -> None:
        ctx.node.create(p, conf, log)
        if start:
            ctx.node.start(vmid, log)

    return ctx.task("vzcreate", str(vmid), body, on_error=lambda: ctx.node.discard_failed_create(vmid))


def _create_perms(ctx: Ctx, p: dict[str, Any], vmid: int, unpriv: bool) -> None:
    """create_vm: Sys.Modify on / for a privileged CT, VM.Allocate on the CT (a bare "Permission check failed"),
    then the per-key config privileges; a new rootfs volume needs Datastore.AllocateSpace on its storage."""
    user = ctx.caller.user
    if user == acl.ROOT_USER:
        return
    if not unpriv:
        acl.require(ctx.hp, user, "/", ["Sys.Modify"])
    if not acl.allowed(ctx.hp, user, f"/vms/{vmid}", ["VM.Allocate"]):
        raise PveError("Permission check failed", 403)
    _config_perms(ctx, vmid, [k for k in p if k not in lxcmod.CREATE_ONLY])
    m = re.match(r"([\w.-]+):\d", str(p.get("rootfs", "local-lvm:4")))
    if m:
        acl.require(ctx.hp, user, f"/storage/{m.group(1)}", ["Datastore.AllocateSpace"])


def _config_perms(ctx: Ctx, vmid: int, keys: list[str]) -> None:
    if ctx.caller.user == acl.ROOT_USER:
        return
    for key in sorted(keys):
        priv = acl.config_privilege(key)
        if priv:
            acl.require(ctx.hp, ctx.caller.user, f"/vms/{vmid}", [priv])


@route("GET", "/nodes/{node}/lxc/{vmid}")
def _lxc_index(ctx: Ctx, p: dict[str, Any]) -> Any:
    ctx.node.read(int(p["vmid"]))
    return [{"subdir": s} for s in ("config", "status", "interfaces", "pending", "rrd", "rrddata", "snapshot",
                                    "firewall", "vncproxy", "termproxy", "migrate", "feature", "clone")]


@route("DELETE", "/nodes/{node}/lxc/{vmid}")
def _lxc_destroy(ctx: Ctx, p: dict[str, Any]) -> Any:
    vmid = int(p["vmid"])
    conf, _ = ctx.node.read(vmid)
    ctx.node.check_lock(conf)  # destroy_vm's early checks, before the worker
    if ctx.node.running(vmid):
        raise PveError(f"CT {vmid} is running - destroy failed")
    return ctx.task("vzdestroy", str(vmid), lambda log: ctx.node.destroy(vmid, log))


@route("GET", "/nodes/{node}/lxc/{vmid}/config")
def _config_get(ctx: Ctx, p: dict[str, Any]) -> Any:
    data = ctx.node.config_get(int(p["vmid"]), current=bool(p.get("current")))
    for key in list(data):
        sch = schema.schema_for_key(ctx.ep.info.get("returns", {}).get("properties", {}), key) or {}
        if sch.get("type") in ("integer", "boolean") and re.fullmatch(r"-?\d+", str(data[key])):
            data[key] = int(data[key])
        elif sch.get("type") == "number":
            try:
                data[key] = float(data[key])
            except ValueError:
                pass
    return data


@route("PUT", "/nodes/{node}/lxc/{vmid}/config")
def _config_put(ctx: Ctx, p: dict[str, Any]) -> Any:
    vmid = int(p["vmid"])
    norm = normaliser(ctx.ep)
    skip = {"node", "vmid", "delete", "digest", "revert"}
    values = {k: norm(k, v) for k, v in p.items() if k not in skip}
    delete = [d for d in re.split(r"[,;\s]+", str(p.get("delete", ""))) if d]
    _config_perms(ctx, vmid, [*values, *delete])
    ctx.node.config_set(vmid, values, delete, p.get("digest"), ctx.caller.user)
    return None


@route("GET", "/nodes/{node}/lxc/{vmid}/pending")
def _pending(ctx: Ctx, p: dict[str, Any]) -> Any:
    conf, digest = ctx.node.read(int(p["vmid"]))
    return pending.pending_list(conf, digest)


@route("GET", "/nodes/{node}/lxc/{vmid}/status")
def _status_index(ctx: Ctx, p: dict[str, Any]) -> Any:
    ctx.node.read(int(p["vmid"]))
    return [{"subdir": s} for s in ("current", "start", "stop", "shutdown", "reboot", "suspend", "resume")]


@route("GET", "/nodes/{node}/lxc/{vmid}/status/current")
def _status_current(ctx: Ctx, p: dict[str, Any]) -> Any:
    return ctx.node.status(int(p["vmid"]))


def _ha_request(ctx: Ctx, vmid: int, state: ha.State) -> str | None:
    """pve-container's vm_start/vm_stop/vm_shutdown for an HA-managed CT: a `hastart`/`hastop` task that only asks
    the HA manager (`ha-manager set ct:VMID --state …`) and ends before the CT changes; None when not HA-managed."""
    faults = ctx.node.state(vmid).faults
    if not faults.ha_managed:
        return None
    word, typ = ("start", "hastart") if state == "started" else ("stop", "hastop")

    def body(log: tasks.TaskLog) -> None:
        log(f"Requesting HA {word} for CT {vmid}")
        ha.request(ctx.node.hp, vmid, state, faults.ha_delay_s)

    return ctx.task(typ, str(vmid), body)


@route("POST", "/nodes/{node}/lxc/{vmid}/status/start")
def _start(ctx: Ctx, p: dict[str, Any]) -> Any:
    vmid = int(p["vmid"])
    skiplock = _skiplock(ctx, p)
    ctx.node.precheck_start(vmid)
    return _ha_request(ctx, vmid, "started") or ctx.task(
        "vzstart", str(vmid), lambda log: ctx.node.start(vmid, log, skiplock=skiplock))


def _skiplock(ctx: Ctx, p: dict[str, Any]) -> bool:
    """vm_start/vm_stop's `skiplock`: root@pam only (raise_param_exc, a 400)."""
    skiplock = bool(p.get("skiplock"))
    if skiplock and ctx.caller.user != acl.ROOT_USER:
        raise schema.ParamError({"skiplock": "Only root may use this option."})
    return skiplock


@route("POST", "/nodes/{node}/lxc/{vmid}/status/stop")
def _stop(ctx: Ctx, p: dict[str, Any]) -> Any:
    vmid = int(p["vmid"])
    check: lxcmod.LockCheck = "skip" if _skiplock(ctx, p) else "unless-mounted"
    ctx.node.precheck_running(vmid)
    return _ha_request(ctx, vmid, "stopped") or ctx.task(
        "vzstop", str(vmid), lambda log: ctx.node.stop(vmid, log, lock_check=check))


@route("POST", "/nodes/{node}/lxc/{vmid}/status/shutdown")
def _shutdown(ctx: Ctx, p: dict[str, Any]) -> Any:
    vmid = int(p["vmid"])
    ctx.node.precheck_running(vmid)
    timeout = float(p.get("timeout", 60))
    force = bool(p.get("forceStop", 0))
    return _ha_request(ctx, vmid, "stopped") or ctx.task("vzshutdown", str(vmid),
                    lambda log: ctx.node.stop(vmid, log, graceful_timeout_s=timeout, force=force,
                                              lock_check="always"))


@route("POST", "/nodes/{node}/lxc/{vmid}/status/reboot")
def _reboot(ctx: Ctx, p: dict[str, Any]) -> Any:
    vmid = int(p["vmid"])
    ctx.node.precheck_running(vmid)
    timeout = float(p.get("timeout", 60))
    return ctx.task("vzreboot", str(vmid), lambda log: ctx.node.reboot(vmid, log, timeout))


@route("GET", "/nodes/{node}/lxc/{vmid}/interfaces")
def _interfaces(ctx: Ctx, p: dict[str, Any]) -> Any:
    return ctx.node.interfaces(int(p["vmid"]))


# ---------------------------------------------------------------------------------------------- storage


def _storages() -> list[dict[str, Any]]:
    return [
        {"storage": "local", "type": "dir", "content": "vztmpl,iso,backup", "active": 1, "enabled": 1,
         "shared": 0, "total": 100 << 30, "used": 10 << 30, "avail": 90 << 30, "used_fraction": 0.1},
        {"storage": "local-lvm", "type": "lvmthin", "content": "rootdir,images", "active": 1, "enabled": 1,
         "shared": 0, "total": 3 << 40, "used": 1 << 40, "avail": 2 << 40, "used_fraction": 0.333},
    ]


@route("GET", "/nodes/{node}/storage")
def _storage_list(ctx: Ctx, p: dict[str, Any]) -> Any:
    want = p.get("content")
    return [s for s in _storages() if not want or any(c in s["content"].split(",") for c in want.split(","))]


@route("GET", "/nodes/{node}/storage/{storage}/content")
def _content(ctx: Ctx, p: dict[str, Any]) -> Any:
    storage = p["storage"]
    if storage not in {s["storage"] for s in _storages()}:
        raise PveError(f"storage '{storage}' does not exist")
    out: list[dict[str, Any]] = []
    if storage == "local" and p.get("content") in (None, "vztmpl"):
        cache = ctx.hp.template_cache
        for f in sorted(cache.iterdir()) if cache.is_dir() else []:
            m = re.search(r"\.tar\.(zst|xz|gz)$", f.name)
            if not m or not f.is_file():
                continue
            st = f.stat()
            out.append({"volid": f"local:vztmpl/{f.name}", "format": {"zst": "tzst", "xz": "txz", "gz": "tgz"}[
                m.group(1)], "content": "vztmpl", "size": st.st_size, "ctime": int(st.st_mtime)})
    if storage == "local-lvm" and p.get("content") in (None, "rootdir", "images"):
        for vmid in ctx.node.vmids():
            conf, _ = ctx.node.read(vmid)
            for key, val in conf.options.items():
                if key == "rootfs" or re.fullmatch(r"mp\d+", key):
                    items = confmod.split_property(val, "volume")
                    if items.get("volume", "").startswith("local-lvm:"):
                        out.append({"volid": items["volume"], "format": "raw", "content": "rootdir",
                                    "vmid": vmid, "size": _gib(items.get("size", "4G")), "ctime": 0})
    return out


def _gib(size: str) -> int:
    m = re.fullmatch(r"(\d+)G", size)
    return int(m.group(1)) << 30 if m else 0


def _index(ctx: Ctx) -> list[tuple[str, str, str, str, str]]:
    """The node's appliance index: today's, or the names the host's `aplinfo` fault lists."""
    names = ctx.hp.load().faults.aplinfo
    if names is None:
        return APLINFO
    out = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        package, _, rest = name.partition("_")
        os_ = package.rsplit("-", 1)[0]
        out.append((name, package, rest.split("_", 1)[0], os_, f"{os_} ({package.rsplit('-', 1)[-1]})"))
    return out


@route("GET", "/nodes/{node}/aplinfo")
def _aplinfo(ctx: Ctx, p: dict[str, Any]) -> Any:
    out = []
    for template, package, version, os_, headline in _index(ctx):
        out.append({
            "template": template, "package": package, "version": version, "os": os_, "type": "lxc",
            "section": "system", "headline": headline, "architecture": "amd64",
            "description": f"{headline}. A small system with basic tools.",
            "infopage": "https://pve.proxmox.com/wiki/Linux_Container#pct_supported_distributions",
            "location": f"http://download.proxmox.com/images/system/{template}",
            "maintainer": "Proxmox Support Team <support@proxmox.com>", "source": "http://download.proxmox.com",
            "sha512sum": hashlib.sha512(template.encode()).hexdigest(),
        })
    return out


@route("POST", "/nodes/{node}/aplinfo")
def _apl_download(ctx: Ctx, p: dict[str, Any]) -> Any:
    storage, template = p["storage"], p["template"]
    if storage not in {s["storage"] for s in _storages()}:
        raise PveError(f"storage '{storage}' does not exist")
    if storage != "local":
        raise PveError(f"storage '{storage}' does not support templates")
    if template not in {a[0] for a in _index(ctx)}:
        raise schema.ParamError({"template": "no such template"})

    def body(log: tasks.TaskLog) -> None:
        url = f"http://download.proxmox.com/images/system/{template}"
        target = ctx.hp.template_cache / template
        log(f"starting template download from: {url}")
        log(f"target file: /var/lib/vz/template/cache/{template}")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{template}.tmp_dwnl.{int(time.time())}")
        size = TEMPLATE_SIZE
        from simulator.lxc import template as lxc_template

        release = lxc_template.release_for(template)
        if release is not None:
            # the real, locally built Debian 12 or 13 template, under whichever version the index lists
            try:
                built = lxc_template.ensure(release=release)
            except lxc_template.TemplateError as exc:  # the task's error, as a failed download is on PVE
                raise TaskError(f"download of {template} failed: {exc}") from None
            shutil.copyfile(built.path, tmp)
            size = built.size_bytes
        else:  # Ubuntu: listed and downloadable, but nothing here boots it
            tmp.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * TEMPLATE_SIZE)
        tmp.replace(target)
        log(f"{size // 1024}K .......... 100% 120M=1.0s")
        log("calculating checksum...OK, checksum verified")
        log(f"download of '{url}' to '/var/lib/vz/template/cache/{template}' finished")

    return ctx.task("download", template, body)


# ---------------------------------------------------------------------------------------------- hardware


@route("GET", "/nodes/{node}/hardware/pci")
def _pci(ctx: Ctx, p: dict[str, Any]) -> Any:
    return hardware.pci_devices(ctx.node.cfg)


# ---------------------------------------------------------------------------------------------- tasks


def _task(ctx: Ctx, upid: str, need_file: bool = True) -> dict[str, Any]:
    """pve-manager Tasks.pm: a bad UPID or a missing task is a parameter error (400); another user's task
    needs Sys.Audit on /nodes/<node>."""
    try:
        decoded = tasks.decode(upid)
    except ValueError:
        raise schema.ParamError({"upid": "unable to parse worker upid"}) from None
    st = tasks.status(ctx.hp, upid)
    if st is None and need_file:
        raise schema.ParamError({"upid": "no such task"})
    if not tasks.owns(decoded, ctx.caller.user):
        acl.require(ctx.hp, ctx.caller.user, f"/nodes/{ctx.node.name}", ["Sys.Audit"])
    return tasks.with_token(st or decoded)


@route("GET", "/nodes/{node}/tasks")
def _task_list(ctx: Ctx, p: dict[str, Any]) -> Any:
    out = _by_source(tasks.listing(ctx.hp), str(p.get("source", "archive")))
    if not acl.allowed(ctx.hp, ctx.caller.user, f"/nodes/{ctx.node.name}", ["Sys.Audit"]):
        out = [t for t in out if tasks.owns(t, ctx.caller.user)]
    if "vmid" in p:
        out = [t for t in out if t.get("id") == str(p["vmid"])]
    if p.get("typefilter"):
        out = [t for t in out if t.get("type") == p["typefilter"]]
    start, limit = int(p.get("start", 0)), int(p.get("limit", 50))
    return [tasks.with_token({**t, "status": t.get("exitstatus") if t.get("status") == "stopped" else "RUNNING"})
            for t in out][start:start + limit]


def _by_source(listed: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """node_tasks' `source`: `archive` (the default) lists only ended tasks (the task index), `active` the
    running ones (status RUNNING), `all` both: a caller looking for a running task must ask for it."""
    if source == "archive":
        return [t for t in listed if t.get("status") == "stopped"]
    if source == "active":
        return [t for t in listed if t.get("status") != "stopped"]
    return listed


@route("GET", "/nodes/{node}/tasks/{upid}/status")
def _task_status(ctx: Ctx, p: dict[str, Any]) -> Any:
    return _task(ctx, p["upid"])


@route("GET", "/nodes/{node}/tasks/{upid}/log")
def _task_log(ctx: Ctx, p: dict[str, Any]) -> Any:
    _task(ctx, p["upid"], need_file=False)  # like PVE: an unknown task's log is "unable to open file"
    total, lines = tasks.log_lines(ctx.hp, p["upid"], int(p.get("start", 0)), int(p.get("limit", 50)))
    ctx.caller.attrs["total"] = total
    return lines


__all__ = ["Caller", "PveError", "TaskError", "TaskFailed", "handle"]
