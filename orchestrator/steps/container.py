"""The container: create it if missing, converge its config (devN passthrough included), start it.

Lifecycle goes through the token API when one is configured; devN goes through pvesh as root over SSH because
PVE allows device passthrough for root@pam only. Every config write is digest-guarded.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import time
from dataclasses import dataclass
from typing import Any

from orchestrator.engine.step import StepContext, mark_change, step
from orchestrator.engine.vmid import AUTO_VMID_DIR
from orchestrator.errors import ConfigError, RemoteError, TaskFailed
from orchestrator.facts import BOOT_STATES, BOOT_WAIT_S, CT, HOST
from orchestrator.inventory.models import ContainerSpec
from orchestrator.parsers import ParseError
from orchestrator.parsers.devices import DeviceNode, nvidia_char_devices
from orchestrator.parsers.pve import (
    parse_pending,
    parse_property_string,
    template_family,
    upid_type,
    version_key,
)
from orchestrator.remote.pve import PveClient, lifecycle_client, passthrough_client, runs_as_root, wait_task
from orchestrator.render.passthrough import dev_entries, raw_lines, resolve_method
from orchestrator.runlog import StepRecord
from orchestrator.scripts import render_script
from orchestrator.stacks.kernel_caches import CACHE_DIR_MARK, CACHE_ROOT
from orchestrator.steps.session import ensure_facts, refresh_ct_facts
from orchestrator.verdicts.ownership import judge_ownership, ownership_tag, tags_of, with_tag

DEV_KEY = re.compile(r"^dev(\d+)$")
MP_KEY = re.compile(r"^mp(\d+)$")
#: PVE allows mp0 … mp255.
MAX_MOUNT_POINTS = 256
NVIDIA_PATH = re.compile(r"^/dev/nvidia")
#: How long `up` waits for a create task of another run (a killed `deploy up`'s, still unpacking on the node).
CREATE_WAIT_S = 600
CT_FACTS_AFTER_START = (CT.gpus, CT.sglang_version, CT.weights, CT.unit_sha,
                        CT.current_release, CT.releases, CT.active, CT.enabled, CT.main_pid, CT.health, CT.topo,
                        CT.p2p_read, CT.p2p_write, CT.missing_pkgs, CT.watchdog, CT.stacks)


def base_config(spec: ContainerSpec) -> dict[str, str]:
    """The keys we manage besides devices, in PVE's string form."""
    return {
        "hostname": spec.hostname,
        "cores": str(spec.cores),
        "memory": str(spec.memory_mb),
        "swap": str(spec.swap_mb),
        "net0": spec.net0,
        "features": ",".join(f"{k}={int(v)}" for k, v in sorted(spec.features.items())),
        "onboot": str(int(spec.onboot)),
    }


def device_plan(current: dict[str, Any], nodes: list[DeviceNode]) -> tuple[dict[str, str], list[str]]:
    """devN keys to set and to delete so the container gets exactly these NVIDIA nodes.

    The numbering is the renderer's (`deploy render` prints the same lines); non-NVIDIA devN entries stay.
    """
    conf = {k: str(v) for k, v in current.items()}
    wanted = {e.key: e.value for e in dev_entries(nodes, conf)}
    have = {k: v for k, v in conf.items() if DEV_KEY.match(k) and NVIDIA_PATH.match(
        parse_property_string(v, "path").get("path", ""))}
    to_set = {k: v for k, v in wanted.items() if conf.get(k) != v}
    to_delete = sorted((k for k in have if k not in wanted), key=lambda k: int(k[3:]))
    return to_set, to_delete


def mount_plan(current: dict[str, Any], host_dir: str | None, ct_path: str) -> dict[str, str]:
    """The mpN key to set so `host_dir` is bind-mounted at `ct_path` (empty when it already is, or no mount).

    An mpN that already mounts something at `ct_path` is the one rewritten; otherwise the first free number.
    """
    if host_dir is None:
        return {}
    want = f"{host_dir},mp={ct_path}"
    for key, value in sorted(current.items()):
        if not MP_KEY.match(key):
            continue
        props = parse_property_string(str(value), "volume")
        if props.get("mp", "").rstrip("/") == ct_path.rstrip("/"):
            return {} if props.get("volume", "").rstrip("/") == host_dir else {key: want}
    free = next((f"mp{i}" for i in range(MAX_MOUNT_POINTS) if f"mp{i}" not in current), None)
    if free is None:
        raise ConfigError(f"every mount point key (mp0…mp{MAX_MOUNT_POINTS - 1}) is in use",
                          fix="remove an unused mpN from the container config", step="container")
    return {free: want}


def bind_mounts(ctx: StepContext, current: dict[str, Any]) -> dict[str, str]:
    """The mpN keys to set for every bind mount the container needs: the model (when the inventory mounts one) and
    the kernel cache root (always: a rebuilt container keeps its caches)."""
    spec = ctx.host.container
    out: dict[str, str] = {}
    for host_dir, ct_path in ((spec.model_mount, ctx.profile.model_path), (spec.kernel_cache_dir, CACHE_ROOT)):
        plan = mount_plan({**current, **out}, host_dir, ct_path)
        out.update(plan)
    return out


def _is_cache_mount(value: str) -> bool:
    """Whether an mpN value mounts the kernel cache root (orchestrator/caches.py)."""
    return parse_property_string(str(value), "volume").get("mp", "").rstrip("/") == CACHE_ROOT


def cache_owner(spec: ContainerSpec) -> str:
    """`uid:gid` of the container's root on the host: PVE's default id map shifts an unprivileged CT's by 100000."""
    return "100000:100000" if spec.unprivileged else "0:0"


def ensure_cache_dir(ctx: StepContext, record: StepRecord) -> None:
    """Create the host directory of the kernel cache mount, owned by the container's root, before the mount needs
    it (PVE refuses to start a container whose bind mount source is missing). A converged host reads one fact."""
    spec = ctx.host.container
    owner, path = cache_owner(spec), spec.kernel_cache_dir
    have = ctx.facts.get(HOST.kernel_cache_dir)
    if have is not None and have.owner == owner:
        return
    if have is not None and not have.ours:
        raise ConfigError(f"the kernel cache directory {path} on {ctx.host.name} exists, owned by {have.owner}, and "
                          f"deploy did not make it: it changes the owner and mode only of a directory it made (the "
                          f"container's root, {owner}, must own it)",
                          fix=f"name a new directory in container.kernel_cache (deploy makes it), or, when {path} is "
                              f"only for this container's caches, `chown {owner} {shlex.quote(path)}` on the node "
                              "yourself; nothing was changed", host=ctx.host.name, step="container")
    what = (f"create the kernel cache directory {path} on {ctx.host.pve.node}, owned by the container's root "
            f"({owner}), mode 0755" if have is None else
            f"chown the kernel cache directory {path} (made by deploy) {have.owner} → {owner}")
    if not mark_change(record, ctx, what):
        return
    ctx.say(what)
    p = shlex.quote(path)
    mark = shlex.quote(f"{path}/{CACHE_DIR_MARK}")
    # `mkdir` of the directory itself, not -p: one that appeared since the read is not taken over.
    parent = shlex.quote(posixpath.dirname(path))
    command = (f"mkdir -p {parent} && mkdir -m 0755 {p} && : > {mark} && chown {owner} {p}" if have is None
               else f"chown {owner} {p}")
    res = ctx.ssh.run(command, check=False, timeout=60, what="create the kernel cache dir")
    if res.rc != 0:
        raise ConfigError(f"the kernel cache directory {path} cannot be created on {ctx.host.name}: "
                          f"{res.said(300) or f'exit code {res.rc}'}",
                          fix="set container.kernel_cache to a host directory root can create (a local filesystem "
                              "that allows chown), or create it yourself owned by the container's root; nothing "
                              "of the container was changed", host=ctx.host.name, step="container")


def require_ours(ctx: StepContext) -> None:
    """Refuse, before any change, an existing container deploy did not make for this host (verdicts/ownership.py):
    a recorded `vmid: auto` that now names somebody else's container, or another inventory host's."""
    spec = ctx.host.container
    if ctx.facts.get(HOST.ct_status) is None:
        return
    try:
        current = ctx.facts.get(HOST.ct_config) or {}
    except ParseError:  # gone between its status and its config: read again below, and judged in _converge
        return
    owned = judge_ownership(current.get("tags"), ctx.host.name, vmid_auto=spec.vmid_auto)
    if owned.verdict != "foreign":
        return
    record = f"{AUTO_VMID_DIR}/{ctx.host.name}"
    raise ConfigError(f"CT {spec.vmid} on node {ctx.host.pve.node} is not the container deploy made for "
                      f"{ctx.host.name}: {owned.why}; nothing was changed",
                      fix=(f"if it is this host's container, mark it: `pct set {spec.vmid} --tags "
                           f"{shlex.quote(with_tag(current.get('tags'), ownership_tag(ctx.host.name)))}` on the "
                           "node; if not, "
                           + (f"remove the record `rm {shlex.quote(record)}` on the node (deploy then chooses a free "
                              "VMID)"
                              if spec.vmid_auto else "give this host its own VMID in the inventory")),
                      host=ctx.host.name, step="container", details={"vmid": spec.vmid, "tags": current.get("tags")})


def require_mount_source(ctx: StepContext) -> None:
    """Refuse a model_mount directory that does not exist on the host, before any change."""
    spec = ctx.host.container
    if spec.model_mount is None:
        return
    if not ctx.facts.get(HOST.model_mount):
        raise ConfigError(f"container.model_mount {spec.model_mount} is not a directory on {ctx.host.name}",
                          fix=f"create it on the host and put the model there (mkdir -p {spec.model_mount}), or "
                              "fix the path; nothing was changed", host=ctx.host.name, step="container")


#: Property-string keys: PVE fills in defaults (net0 gets hwaddr and type=veth), so compare only what we set.
PROPERTY_KEYS = {"net0": "name", "features": None}


def same_value(key: str, current: Any, wanted: str) -> bool:
    if current is None:
        return False
    if key in PROPERTY_KEYS:
        have = parse_property_string(str(current), PROPERTY_KEYS[key])
        want = parse_property_string(wanted, PROPERTY_KEYS[key])
        return all(have.get(k) == v for k, v in want.items())
    return str(current) == wanted


#: Keys pve-container applies to a running CT (vmconfig_hotplug_pending: its fast-plug options, cgroup limits, the
#: veth, new mount points and devices). Any other changed key stays in [pve:pending] until the CT's next start.
HOT_APPLIED = re.compile(r"^(description|onboot|startup|protection|hostname|hookscript|cores|tags|lock|cpulimit|"
                         r"cpuunits|memory|swap|net\d+)$")


def stays_pending(key: str) -> bool:
    return not HOT_APPLIED.match(key)


def stale_devices(host_nodes: list[DeviceNode], ct_nodes: list[DeviceNode]) -> list[str]:
    """Nodes the running CT got at its start that no longer match the host's (nvidia-uvm's dynamic major
    changes when the driver is reloaded or the host reboots): the CT's devices cgroup then denies the new one."""
    in_ct = {n.path: n for n in ct_nodes}
    out = []
    for node in host_nodes:
        seen = in_ct.get(node.path)
        if seen is not None and (seen.major, seen.minor) != (node.major, node.minor):
            out.append(f"{node.path} is {node.major}:{node.minor} on the host but {seen.major}:{seen.minor} in the CT")
    return out


def restart_reasons(ctx: StepContext, current: dict[str, Any], base_diff: dict[str, str],
                    wanted: list[DeviceNode]) -> list[str]:
    """Why a running CT must restart for its config to take effect (empty: it need not)."""
    pending = ctx.facts.find(HOST.ct_pending) or {}
    ours = set(base_config(ctx.host.container)) | {
        k for k, change in pending.items() if DEV_KEY.match(k) and NVIDIA_PATH.match(
            parse_property_string(change.pending or change.current or "", "path").get("path", ""))}
    reasons = []
    waiting = sorted(k for k in pending if k in ours and k not in base_diff)
    if waiting:
        reasons.append(f"{', '.join(waiting)} pending in PVE since an earlier change (applied at the next start)")
    cold = sorted(k for k in base_diff if stays_pending(k))
    if cold:
        reasons.append(f"{', '.join(cold)} cannot change on a running container (PVE keeps it pending until the "
                       "next start)")
    listing = ctx.facts.get(CT.dev_listing)
    if listing is not None:
        stale = stale_devices(wanted, listing)
        if stale:
            reasons.append("; ".join(stale) + " (host driver reloaded or rebooted since the CT started)")
    return reasons


def running_tasks(listing: Any, vmid: int, typ: str) -> list[str]:
    """UPIDs of the node's `typ` tasks for this CT that still run, from `GET /nodes/N/tasks?source=active`: a
    running task's status is RUNNING; an ended one not yet archived carries its exit status instead."""
    if not isinstance(listing, list):
        return []
    return [str(t["upid"]) for t in listing
            if isinstance(t, dict) and isinstance(t.get("upid"), str) and t.get("type") == typ
            and str(t.get("id")) == str(vmid) and t.get("status") in (None, "", "RUNNING")]


#: What holds each PVE config lock (pve-container's `lock` values) and so what ends it.
LOCK_HOLDERS = {
    "backup": "a backup (vzdump)", "migrate": "a migration", "snapshot": "a snapshot",
    "snapshot-delete": "a snapshot removal", "rollback": "a snapshot rollback", "disk": "a disk move or clone",
    "mounted": "`pct mount`", "fstrim": "`pct fstrim`", "destroyed": "a destroy", "create": "a create",
}


def lock_refusal(lock: str, vmid: int, node: str) -> tuple[str, str]:
    """(what, fix) for a CT that holds a PVE config lock `up` cannot wait out: every change to it would fail
    with PVE's `CT is locked (LOCK)`. A `create` lock here is stale: no create task for the CT runs."""
    if lock == "create":
        return (f"CT {vmid} is locked (create) but no create task for it runs on node {node}: a create ended "
                "half-way (the node restarted during it?), so the container's root filesystem is only partly "
                "unpacked and `up` will not start or change it",
                f"remove the half-made CT on the host and run `deploy up` again to create it anew: `pct unlock "
                f"{vmid} && pct destroy {vmid} --destroy-unreferenced-disks 1` (`pct destroy` alone refuses a "
                "locked CT; unlocking alone would leave the partial filesystem). Nothing was changed")
    holder = LOCK_HOLDERS.get(lock, f"a `{lock}` operation")
    return (f"CT {vmid} is locked ({lock}) by {holder} on node {node}; PVE refuses to start or reconfigure a "
            "locked CT, so `up` changed nothing",
            f"wait for that task to end (`pvesh get /nodes/{node}/tasks --source active --vmid {vmid}` lists it) "
            f"and run `deploy up` again; if no task runs, it died and left the lock: check the CT, then "
            f"`pct unlock {vmid}` on the host")


def _config_lock(ctx: StepContext) -> str | None:
    """The CT's config lock as the facts show it ("" for none); None when the CT was listed but its config could
    not be read (it went away between the two reads: PVE removed it when its create task failed)."""
    try:
        config = ctx.facts.get(HOST.ct_config)
    except ParseError:
        return None
    return None if config is None else str(config.get("lock") or "")


def _reread_container(ctx: StepContext, what: str) -> None:
    """The CT's status and config facts (and the template facts, should it be gone) again, in one round trip."""
    ctx.facts.gather((HOST.ct_status, HOST.ct_config, HOST.ct_pending, HOST.templates, HOST.aplinfo), (), what=what)


def _settle_lock(ctx: StepContext, record: StepRecord, pve: _Clients, rechecked: bool = False) -> bool:
    """Before any change: wait for a create task of this CT that still runs (another run's, e.g. a killed
    `deploy up` whose task goes on in PVE), refuse any other lock. True when a dry run must stop here."""
    spec, node = ctx.host.container, ctx.host.pve.node
    if ctx.facts.get(HOST.ct_status) is None:
        return False
    lock = _config_lock(ctx)
    if lock is None and not rechecked:
        _reread_container(ctx, "re-reading the container (it changed while it was read)")
        return _settle_lock(ctx, record, pve, rechecked=True)
    if not lock:
        return False
    record.details["lock"] = lock
    reader = pve.task_reader()
    upids = (running_tasks(reader.call("get", f"/nodes/{node}/tasks", source="active", typefilter="vzcreate",
                                       vmid=spec.vmid), spec.vmid, "vzcreate")
             if lock == "create" else [])
    if not upids and lock == "create" and not rechecked:
        # The task may have ended between the facts and the task list (its config then lost the lock, or the CT
        # is gone): only a lock still there now, with no task, is stale.
        _reread_container(ctx, "re-reading the container's create lock")
        return _settle_lock(ctx, record, pve, rechecked=True)
    if not upids:
        what, fix = lock_refusal(str(lock), spec.vmid, node)
        raise RemoteError(what, fix=fix, host=ctx.host.name, step="container", details={"lock": lock})
    record.details["waited_for"] = upids[0]
    if ctx.options.dry_run:
        record.summary = f"CT {spec.vmid} is being created by task {upids[0]}: `up` waits for it, then converges"
        return True
    ctx.say(f"CT {spec.vmid} is locked (create): waiting for its create task to end (at most {CREATE_WAIT_S} s, "
            f"task {upids[0]})")
    try:
        wait_task(reader, node, upids[0], timeout_s=CREATE_WAIT_S, host=ctx.host.name)
    except TaskFailed as exc:
        ctx.say(f"that create task failed ({exc.what}); PVE removed the half-made CT")
    _reread_container(ctx, "re-reading the container after its create task")
    return _settle_lock(ctx, record, pve)  # unlocked, gone, or locked again: the same rules apply


def _wait(client: PveClient, ctx: StepContext, result: Any, what: str) -> None:
    if isinstance(result, str) and result.startswith("UPID:"):
        wait_task(client, ctx.host.pve.node, result, host=ctx.host.name)
    elif result not in (None, "") and not isinstance(result, dict | list):
        raise RemoteError(f"{what}: unexpected PVE answer {result!r}", host=ctx.host.name, step="container")


def wanted_devices(ctx: StepContext) -> list[DeviceNode]:
    """Every NVIDIA char device on the host (or the listed GPU minors), as the container must see them."""
    nodes = nvidia_char_devices(ctx.facts.get(HOST.dev_listing))
    spec = ctx.host.container
    if spec.gpus != "all":
        keep = {f"/dev/nvidia{i}" for i in spec.gpus}
        nodes = [n for n in nodes if not re.fullmatch(r"/dev/nvidia\d+", n.path) or n.path in keep]
    if not any(re.fullmatch(r"/dev/nvidia\d+", n.path) for n in nodes):
        raise RemoteError("no /dev/nvidiaN device nodes on the host", host=ctx.host.name, step="container",
                          fix="load the NVIDIA driver on the host (deploy doctor shows what is missing)")
    return nodes


def majors(ctx: StepContext) -> dict[str, int]:
    """The host's device majors by driver name (/proc/devices), for the raw lxc.* lines."""
    return ctx.facts.get(HOST.proc_devices)


def raw_plan(current: dict[str, Any], wanted: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], bool]:
    """(lines to add, whether our NVIDIA lines differ) for the PVE < 8.1 raw lxc.* method."""
    have = [(str(k), str(v)) for k, v in (current.get("lxc") or [])]
    ours = [(k, v) for k, v in have if (k, v) in wanted or (k == "lxc.mount.entry" and v.startswith("/dev/nvidia"))]
    missing = [pair for pair in wanted if pair not in have]
    return missing, bool(missing) or sorted(ours) != sorted(wanted)


def raw_apply_script(vmid: int, wanted: list[tuple[str, str]]) -> str:
    """Rewrite the main section of /etc/pve/lxc/<vmid>.conf: drop our old NVIDIA lines, append the wanted ones.

    Raw lxc.* keys cannot go through the API at all; root edits the file (pmxcfs replicates it).
    """
    add = "".join(f"{k}: {v}\n" for k, v in wanted)
    patterns = "|".join(re.sub(r"([.*+?()\[\]{}|^$\\])", r"\\\1", f"{k}: {v}") for k, v in wanted)
    return render_script("raw_lxc_apply.sh.j2", conf=f"/etc/pve/lxc/{int(vmid)}.conf", add=add,
                         pattern=f"^({patterns}|lxc\\.mount\\.entry: /dev/nvidia.*)$")


def passthrough_method(ctx: StepContext) -> tuple[str, str]:
    version = ctx.state.pve_version
    if version is None:
        version = ctx.facts.find(HOST.pveversion)
    return resolve_method(ctx.host.container.passthrough, str(version) if version is not None else None)


@dataclass
class _Clients:
    """The PVE clients of one run: lifecycle (token or pvesh) and, only when devN is written, root pvesh."""

    ctx: StepContext
    lifecycle: PveClient

    def devices(self) -> PveClient:
        """Only asked for when devN must be written: a token-only setup converges everything else."""
        return passthrough_client(self.ctx.host, self.ctx.ssh)

    def task_reader(self) -> PveClient:
        """Root sees every task; a privilege-separated token only its own without Sys.Audit on the node."""
        return self.devices() if runs_as_root(self.ctx.host) else self.lifecycle


def resolve_template(ctx: StepContext) -> tuple[str, bool]:
    """The volume ID to create from, and whether it must be downloaded first (POST aplinfo).

    A family (`local:vztmpl/debian-12-standard`) takes the newest version in the node's appliance index (or, with
    an index that lists none, the newest already in the storage). A pinned name is used when the storage has it;
    otherwise it must be in the index, which moves on: PVE's `POST aplinfo` accepts only names listed there now.
    Raises ConfigError (exit 2) before anything is changed.
    """
    spec, node = ctx.host.container, ctx.host.pve.node
    storage = spec.ostemplate.split(":", 1)[0]
    local = ctx.facts.get(HOST.templates)
    index = ctx.facts.get(HOST.aplinfo)
    family = spec.template_family or template_family(spec.template_name)
    offered = sorted((a for a in index if a.package == family), key=lambda a: version_key(a.version))
    if spec.template_family is None:
        if spec.ostemplate in local:
            return spec.ostemplate, False
        if any(a.template == spec.template_name for a in index):
            return spec.ostemplate, True
    else:
        if offered:
            volid = f"{storage}:vztmpl/{offered[-1].template}"
            return volid, volid not in local
        have = sorted((v for v in local if template_family(v.split("/", 1)[-1]) == family),
                      key=lambda v: version_key(v.split("_", 1)[-1]))
        if have:
            return have[-1], False
    listed = ", ".join(a.template for a in offered) or "none"
    families = ", ".join(sorted({a.package for a in index})) or "none: run `pveam update` on the host"
    raise ConfigError(
        f"template {spec.template_name} is neither in storage {storage} nor in the appliance index of node {node} "
        f"(POST aplinfo downloads only the names the index lists now; it lists for {family}: {listed})",
        fix=(f"set container.ostemplate to {storage}:vztmpl/{family} (the newest version in the index is taken)"
             + (f" or pin one the index lists, e.g. {storage}:vztmpl/{offered[-1].template}" if offered else
                f"; families in the index: {families}")
             + "; `pveam available --section system` on the host lists the index. Nothing was created"),
        host=ctx.host.name, details={"available": [a.template for a in offered]})


def _create(ctx: StepContext, record: StepRecord, pve: _Clients, wanted: list[DeviceNode], method: str,
            raw_wanted: list[tuple[str, str]]) -> bool:
    """Create the container (template first if missing). False when a dry run stops here."""
    spec, node = ctx.host.container, ctx.host.pve.node
    if not ctx.facts.get(HOST.templates) and not ctx.facts.get(HOST.aplinfo):
        # Both are read only while the CT does not exist (facts/host.py unless_ct_exists): read while a killed
        # run's half-made CT was still there and gone by the status read, they say nothing. Read them now.
        _reread_container(ctx, "reading the templates (the container was there when they were read)")
    ostemplate, download = resolve_template(ctx)
    record.details["template"] = {"ostemplate": ostemplate, "asked": spec.ostemplate, "download": download}
    params: dict[str, Any] = {
        "vmid": spec.vmid, "ostemplate": ostemplate, "rootfs": f"{spec.rootfs_storage}:{spec.rootfs_size_gb}",
        "unprivileged": int(spec.unprivileged), "start": 0, **base_config(spec),
        "tags": ownership_tag(ctx.host.name),  # whose container this is (verdicts/ownership.py)
    }
    if download:
        name = ostemplate.split("/", 1)[1]
        if mark_change(record, ctx, f"download template {name} to {spec.template_storage}"):
            ctx.say(f"downloading template {name} (aplinfo)")
            res = pve.lifecycle.call("post", f"/nodes/{node}/aplinfo", storage=spec.template_storage, template=name)
            _wait(pve.lifecycle, ctx, res, "template download")
    dev_set = device_plan({}, wanted)[0] if method == "devN" else {}
    mounts = bind_mounts(ctx, {})
    what = (f"create CT {spec.vmid} ({spec.hostname}, unprivileged={int(spec.unprivileged)}) with "
            f"{len(wanted)} device nodes passed through ({method})"
            + "".join(f", {k}: {v}" for k, v in mounts.items()))
    record.details["create"] = {**params, **dev_set, **mounts}
    if not mark_change(record, ctx, what):
        record.summary = "; ".join(record.changes)  # the kernel cache directory's too (issue 50: plan showed none)
        return False
    ctx.say(what)
    # Creating with devN (and features on a privileged CT) needs root@pam: one pvesh call as root carries
    # everything. The token path is only used when no root SSH is configured (it then fails clearly on devN).
    # Privileged CTs and features other than nesting are root@pam-only in PVE, like devN.
    # Bind mounts of host directories are root@pam-only too.
    root_only = dev_set or mounts or not spec.unprivileged or any(k != "nesting" for k in spec.features)
    creator = pve.devices() if root_only else pve.lifecycle
    _wait(creator, ctx, creator.call("post", f"/nodes/{node}/lxc", **params, **dev_set, **mounts), "create")
    if raw_wanted:
        ctx.ssh.script(raw_apply_script(spec.vmid, raw_wanted), what="write raw lxc passthrough lines")
    return True


def _converge(ctx: StepContext, record: StepRecord, pve: _Clients, status: str, wanted: list[DeviceNode],
              method: str, raw_wanted: list[tuple[str, str]]) -> tuple[str, bool]:
    """Write only the config keys that differ (digest-guarded). Returns (status now, whether it changed)."""
    spec, node = ctx.host.container, ctx.host.pve.node
    current = ctx.facts.get(HOST.ct_config)
    if current is None:  # pvesh printed no config (as its empty output always read)
        raise ParseError("container config is not JSON", "")
    require_ours(ctx)  # again: the config may have been read again since the step began
    if "unprivileged" in current and bool(int(current["unprivileged"])) != spec.unprivileged:
        raise ConfigError(
            f"CT {spec.vmid} exists with unprivileged={current['unprivileged']} but the inventory says "
            f"{int(spec.unprivileged)}; PVE cannot change this on an existing container",
            fix="set container.unprivileged to match, or back up and destroy the container yourself",
            host=ctx.host.name, step="container")
    base_diff = {k: v for k, v in base_config(spec).items() if not same_value(k, current.get(k), v)}
    mark = ownership_tag(ctx.host.name)
    marks = {} if mark in tags_of(current.get("tags")) else {"tags": with_tag(current.get("tags"), mark)}
    dev_set, dev_delete = device_plan(current, wanted) if method == "devN" else ({}, [])
    raw_missing, raw_changed = raw_plan(current, raw_wanted) if raw_wanted else ([], False)
    mounts = bind_mounts(ctx, current)
    diff_lines = [f"{k}: {current.get(k, '(unset)')} → {v}" for k, v in {**base_diff, **marks, **mounts}.items()]
    diff_lines += [f"{k}: (missing) → {v}" for k, v in raw_missing]
    if raw_changed and not raw_missing:
        diff_lines.append("stale NVIDIA lxc.mount.entry lines removed")
    diff_lines += [f"{k}: (unset) → {v}" for k, v in dev_set.items()]
    diff_lines += [f"{k}: {current[k]} → (deleted)" for k in dev_delete]
    record.details["config_diff"] = diff_lines
    restart = restart_reasons(ctx, current, base_diff, wanted) if status == "running" else []
    if status == "running" and (dev_set or dev_delete or raw_changed):
        restart.append("device passthrough changes apply at start")
    # PVE hotplugs a new mount point into a running CT (pve-container's mountpoint_hotplug); the model mount still
    # restarts it (the server must see the model), a new kernel cache mount never does: an upgrade of deploy adds
    # one to every converged host, and a serving container is not restarted for a cache (it is mounted live on
    # PVE; the simulator mounts it at the CT's next start, and the cache is cold once then).
    hotplugged = {k for k, v in mounts.items() if k not in current and _is_cache_mount(v)}
    if status == "running" and set(mounts) - hotplugged:
        restart.append("bind mounts apply at start")
    if restart:
        record.details["restart_because"] = restart
    if not diff_lines and not restart:
        return status, False
    config_what = f"config of CT {spec.vmid}: " + "; ".join(diff_lines)
    restart_what = f"restart CT {spec.vmid}: " + "; ".join(restart)
    planned = [w for w, needed in ((config_what, diff_lines), (restart_what, restart)) if needed]
    if not all([mark_change(record, ctx, what) for what in planned]):
        # dry run: every change is recorded, none is made; after a restart up also records the start
        return ("stopped" if restart else status), False
    for line in diff_lines:
        ctx.say(f"  {line}")
    if restart:  # stop first: a stopped CT takes every key at once, and its start passes the current device nodes
        ctx.say(f"restarting CT {spec.vmid}: " + "; ".join(restart))
        _shutdown(ctx, pve)
        status = "stopped"
    params: dict[str, Any] = {**base_diff, **marks, **dev_set, **mounts}
    if dev_delete:
        params["delete"] = ",".join(dev_delete)
    if params:
        # devN, and features on a privileged CT (or other than nesting), are root@pam-only in PVE, as on create
        features_root_only = "features" in base_diff and (not spec.unprivileged or
                                                          any(k != "nesting" for k in spec.features))
        client = pve.devices() if (dev_set or dev_delete or mounts or features_root_only) else pve.lifecycle
        client.call("put", f"/nodes/{node}/lxc/{spec.vmid}/config", digest=current.get("digest"), **params)
        if status == "running":  # hot-applied keys only; a key that stayed pending after all means a restart
            late = sorted(k for k in parse_pending(json.dumps(pve.lifecycle.call(
                "get", f"/nodes/{node}/lxc/{spec.vmid}/pending"))) if k in params)
            if late:
                mark_change(record, ctx, f"restart CT {spec.vmid}: {', '.join(late)} stayed pending")
                ctx.say(f"restarting CT {spec.vmid}: {', '.join(late)} stayed pending on the running container")
                _shutdown(ctx, pve)
                status = "stopped"
    if raw_changed:
        ctx.ssh.script(raw_apply_script(spec.vmid, raw_wanted), what="write raw lxc passthrough lines")
    return status, True


#: How long `up` waits for an HA-managed CT to reach the state it asked the HA manager for.
HA_WAIT_S = 120
#: The tasks of an HA-managed CT's start and stop (pve-container): a request to the HA manager, ended before the CT
#: changes, and the state each asks for.
HA_TASKS = {"hastart": "running", "hastop": "stopped"}


def _power(ctx: StepContext, pve: _Clients, action: str, what: str, **params: Any) -> None:
    """Start or shut down the CT and wait until it is so. The task of an HA-managed CT (`hastart`/`hastop`) only
    asks the HA manager, which acts seconds later, so its end says nothing: the CT's status is waited for."""
    node, vmid = ctx.host.pve.node, ctx.host.container.vmid
    result = pve.lifecycle.call("post", f"/nodes/{node}/lxc/{vmid}/status/{action}", **params)
    _wait(pve.lifecycle, ctx, result, what)
    want = HA_TASKS.get(upid_type(result) or "") if isinstance(result, str) else None
    if want is None:
        return
    ctx.say(f"CT {vmid} is HA-managed: its {what} is a request to the HA manager; waiting until it is {want} "
            f"(at most {HA_WAIT_S} s)")
    deadline = time.monotonic() + HA_WAIT_S
    while True:
        status = str((pve.lifecycle.call("get", f"/nodes/{node}/lxc/{vmid}/status/current") or {}).get("status"))
        if status == want:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    raise RemoteError(f"CT {vmid} is HA-managed and still {status or 'unknown'} {HA_WAIT_S} s after the HA manager "
                      f"was asked to make it {want}",
                      fix=(f"check the HA stack on node {node}: `ha-manager status` shows ct:{vmid}'s state and why "
                           "(a fenced node, the resource in `error` or `disabled`); run deploy up again once it is "
                           f"{want}"), host=ctx.host.name, step="container", details={"cause": "ha", "want": want})


def _shutdown(ctx: StepContext, pve: _Clients) -> None:
    _power(ctx, pve, "shutdown", "shutdown", timeout=60, forceStop=1)


@step("container", host_facts=(HOST.ct_status, HOST.ct_config, HOST.ct_pending, HOST.templates, HOST.aplinfo,
                               HOST.dev_listing, HOST.proc_devices, HOST.pveversion, HOST.model_mount,
                               HOST.kernel_cache_dir),
      ct_facts=(*CT_FACTS_AFTER_START, CT.dev_listing))
def container(ctx: StepContext, record: StepRecord) -> None:
    """Create the container if missing, converge its config, GPU passthrough and model mount, start it."""
    ensure_facts(ctx)
    require_ours(ctx)
    require_mount_source(ctx)
    ensure_cache_dir(ctx, record)
    spec = ctx.host.container
    wanted = wanted_devices(ctx)
    status = ctx.facts.get(HOST.ct_status)
    pve = _Clients(ctx, lifecycle_client(ctx.host, ctx.ssh, ctx.metrics))
    method, method_reason = passthrough_method(ctx)
    record.details["passthrough"] = {"method": method, "why": method_reason}
    raw_wanted = raw_lines(wanted, majors(ctx)) if method == "raw-lxc" else []
    if status is not None:
        if _settle_lock(ctx, record, pve):
            return
        status = ctx.facts.get(HOST.ct_status)
    if status is None:
        if not _create(ctx, record, pve, wanted, method, raw_wanted):
            return
        status, changed_anything = "stopped", True
    else:
        status, changed_anything = _converge(ctx, record, pve, status, wanted, method, raw_wanted)
    started = False
    if status != "running" and mark_change(record, ctx, f"start CT {spec.vmid}"):
        ctx.say(f"starting CT {spec.vmid}")
        _power(ctx, pve, "start", "start")
        changed_anything = started = True
    if changed_anything and not ctx.options.dry_run:
        # After a start, the facts wait for the CT's boot: sglang (enabled) is then started by systemd, not by us.
        if started:
            ctx.say(f"waiting for CT {spec.vmid} to finish booting (systemd {' or '.join(BOOT_STATES)}, "
                    f"at most {BOOT_WAIT_S} s) before reading it")
        refresh_ct_facts(ctx, *CT_FACTS_AFTER_START)
    record.summary = "; ".join(record.changes) if record.changes else (
        f"CT {spec.vmid} running with {len(wanted)} NVIDIA device nodes passed through")
    record.details["devices"] = [n.path for n in wanted]
