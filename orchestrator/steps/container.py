"""The container: create it if missing, converge its config (devN passthrough included), start it.

Lifecycle goes through the token API when one is configured; devN goes through pvesh as root over SSH because
PVE allows device passthrough for root@pam only. Every config write is digest-guarded.
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.errors import ConfigError, RemoteError
from orchestrator.inventory.models import ContainerSpec
from orchestrator.parsers.devices import DeviceNode, nvidia_char_devices, parse_dev_listing
from orchestrator.parsers.pve import parse_config_json, parse_pct_status, parse_property_string, volids
from orchestrator.remote.pve import PveClient, lifecycle_client, passthrough_client, wait_task
from orchestrator.render.passthrough import dev_entries
from orchestrator.runlog import StepRecord
from orchestrator.steps.base import StepContext, mark_change, step
from orchestrator.steps.session import ensure_facts, refresh_ct_facts

DEV_KEY = re.compile(r"^dev(\d+)$")
NVIDIA_PATH = re.compile(r"^/dev/nvidia")
CT_FACTS_AFTER_START = ("nvsmi_list", "driver_version", "sglang_version", "weights", "unit_sha",
                        "current_release", "releases", "active", "main_pid", "health", "topo", "p2p_read",
                        "p2p_write")


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


def _wait(client: PveClient, ctx: StepContext, result: Any, what: str) -> None:
    if isinstance(result, str) and result.startswith("UPID:"):
        wait_task(client, ctx.host.pve.node, result, host=ctx.host.name)
    elif result not in (None, "") and not isinstance(result, dict | list):
        raise RemoteError(f"{what}: unexpected PVE answer {result!r}", host=ctx.host.name, step="container")


def wanted_devices(ctx: StepContext) -> list[DeviceNode]:
    """Every NVIDIA char device on the host (or the listed GPU minors), as the container must see them."""
    nodes = nvidia_char_devices(parse_dev_listing(ctx.facts.h("dev_listing").stdout))
    spec = ctx.host.container
    if spec.gpus != "all":
        keep = {f"/dev/nvidia{i}" for i in spec.gpus}
        nodes = [n for n in nodes if not re.fullmatch(r"/dev/nvidia\d+", n.path) or n.path in keep]
    if not any(re.fullmatch(r"/dev/nvidia\d+", n.path) for n in nodes):
        raise RemoteError("no /dev/nvidiaN device nodes on the host", host=ctx.host.name, step="container",
                          fix="load the NVIDIA driver on the host (deploy doctor shows what is missing)")
    return nodes


@step("container", host_facts=("ct_status", "ct_config", "templates", "dev_listing"),
      ct_facts=CT_FACTS_AFTER_START)
def container(ctx: StepContext, record: StepRecord) -> None:
    """Create the container if missing, converge its config and GPU passthrough, start it."""
    ensure_facts(ctx)
    spec = ctx.host.container
    node = ctx.host.pve.node
    wanted = wanted_devices(ctx)
    status = parse_pct_status(ctx.facts.h("ct_status").stdout)
    lifecycle = lifecycle_client(ctx.host, ctx.ssh, ctx.metrics)
    devices = passthrough_client(ctx.host, ctx.ssh)
    changed_anything = False

    if status is None:
        params: dict[str, Any] = {
            "vmid": spec.vmid, "ostemplate": spec.ostemplate,
            "rootfs": f"{spec.rootfs_storage}:{spec.rootfs_size_gb}",
            "unprivileged": int(spec.unprivileged), "start": 0, **base_config(spec),
        }
        if spec.ostemplate not in volids(ctx.facts.h("templates").stdout):
            if mark_change(record, ctx, f"download template {spec.template_name} to {spec.template_storage}"):
                ctx.say(f"downloading template {spec.template_name} (aplinfo)")
                res = lifecycle.call("post", f"/nodes/{node}/aplinfo", storage=spec.template_storage,
                                     template=spec.template_name)
                _wait(lifecycle, ctx, res, "template download")
        dev_set, _ = device_plan({}, wanted)
        what = (f"create CT {spec.vmid} ({spec.hostname}, unprivileged={int(spec.unprivileged)}) with "
                f"{len(dev_set)} device nodes passed through")
        record.details["create"] = {**params, **dev_set}
        if not mark_change(record, ctx, what):
            record.summary = what
            return
        ctx.say(what)
        # Creating with devN (and features on a privileged CT) needs root@pam: one pvesh call as root carries
        # everything. The token path is only used when no root SSH is configured (it then fails clearly on devN).
        creator = devices if devices.can_passthrough else lifecycle
        _wait(creator, ctx, creator.call("post", f"/nodes/{node}/lxc", **params, **dev_set), "create")
        status = "stopped"
        changed_anything = True
    else:
        current = parse_config_json(ctx.facts.h("ct_config").stdout)
        if "unprivileged" in current and bool(int(current["unprivileged"])) != spec.unprivileged:
            raise ConfigError(
                f"CT {spec.vmid} exists with unprivileged={current['unprivileged']} but the inventory says "
                f"{int(spec.unprivileged)}; PVE cannot change this on an existing container",
                fix="set container.unprivileged to match, or back up and destroy the container yourself",
                host=ctx.host.name, step="container")
        base_diff = {k: v for k, v in base_config(spec).items() if not same_value(k, current.get(k), v)}
        dev_set, dev_delete = device_plan(current, wanted)
        diff_lines = [f"{k}: {current.get(k, '(unset)')} → {v}" for k, v in base_diff.items()]
        diff_lines += [f"{k}: (unset) → {v}" for k, v in dev_set.items()]
        diff_lines += [f"{k}: {current[k]} → (deleted)" for k in dev_delete]
        record.details["config_diff"] = diff_lines
        if diff_lines and mark_change(record, ctx, f"config of CT {spec.vmid}: " + "; ".join(diff_lines)):
            for line in diff_lines:
                ctx.say(f"  {line}")
            restart_for_devices = status == "running" and bool(dev_set or dev_delete)
            if restart_for_devices:
                _wait(lifecycle, ctx, lifecycle.call("post", f"/nodes/{node}/lxc/{spec.vmid}/status/shutdown",
                                                     timeout=60, forceStop=1), "shutdown")
                status = "stopped"
            params = {**base_diff, **dev_set}
            if dev_delete:
                params["delete"] = ",".join(dev_delete)
            client = devices if (dev_set or dev_delete) else lifecycle
            client.call("put", f"/nodes/{node}/lxc/{spec.vmid}/config", digest=current.get("digest"), **params)
            changed_anything = True

    if status != "running":
        if mark_change(record, ctx, f"start CT {spec.vmid}"):
            ctx.say(f"starting CT {spec.vmid}")
            _wait(lifecycle, ctx, lifecycle.call("post", f"/nodes/{node}/lxc/{spec.vmid}/status/start"), "start")
            changed_anything = True
    if changed_anything and not ctx.options.dry_run:
        refresh_ct_facts(ctx, *CT_FACTS_AFTER_START)
    record.summary = "; ".join(record.changes) if record.changes else (
        f"CT {spec.vmid} running with {len(wanted)} NVIDIA device nodes passed through")
    record.details["devices"] = [n.path for n in wanted]


