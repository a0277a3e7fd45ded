"""`deploy sim up|down|status|fault|reboot`: the simulated Proxmox GPU host on this machine (loopback only, root)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from orchestrator.cli.common import AppContext, SuggestingGroup, common_options
from orchestrator.errors import ConfigError
from orchestrator.inventory.example import record_seeded, seed_server_files, seeded_files

ROOT_HELP = "Simulator state directory (default $DEPLOY_SIM_ROOT or /var/lib/deploy-sim)."


def _root(root: str | None) -> Path:
    from simulator.config import DEFAULT_ROOT, ROOT_ENV

    return Path(root or os.environ.get(ROOT_ENV) or DEFAULT_ROOT)


def _seed_record(root: str | None) -> Path:
    """Which example files `sim up` wrote into the inventory directory (example.record_seeded), in the root."""
    return _root(root) / "inventory-seeded.json"


def _info_dict(info: Any) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(info).items()}


def _inventory_copy(app: AppContext) -> Path:
    """sim.yaml in the first inventory directory: `deploy up host sim-1` then finds the hosts by default."""
    return Path(app.inventory_dirs.split(":")[0]) / "sim.yaml"


def _require_simulator() -> None:
    """The simulator is its own top-level package whose dependencies come with the `sim` extra."""
    import importlib.util

    missing = [m for m in ("simulator", "cryptography") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"the simulator is not installed (missing {', '.join(missing)})",
                          fix="install it with: pip install -e '.[sim]' (scripts/install.sh does this)")


def _retired(exc: Any, step: str) -> ConfigError:
    """A root of the retired view runtime (simulator.config.RetiredRuntime): stop it, remove it, start afresh."""
    return ConfigError(str(exc), fix=f"deploy sim down --root {exc.root}; rm -rf {exc.root}; deploy sim up",
                       host=exc.host, step=step)


@click.group("sim", cls=SuggestingGroup)
def sim() -> None:
    """The simulated Proxmox GPU host: real sshd, a schema-checked PVE API over HTTPS, pct/pvesh, GPUs replayed
    from real nvidia-smi captures, a simulated SGLang server. Everything listens on 127.0.0.0/8. Needs root."""
    _require_simulator()


@sim.command("up")
@click.option("--hosts", default=1, show_default=True, help="How many simulated hosts (sim-1 on 127.0.0.2, …).")
@click.option("--profile", default="rtx-pro-6000-x8", show_default=True,
              type=click.Choice(["rtx-pro-6000-x8", "rtx-pro-6000-x8-vm", "h200-x2"]),
              help="GPU profile replayed from real captures.")
@click.option("--time-scale", default=5.0, show_default=True,
              help="Simulated model time runs this much faster than the wall clock (bench figures stay in model "
                   "time).")
@click.option("--first", default=1, show_default=True, help="Number of the first host: sim-N listens on 127.0.0.(N+1).")
@click.option("--ct-storage", type=click.Choice(["disk", "tmpfs"]), default="disk", show_default=True,
              help="Where container filesystems live. tmpfs is fast to create and destroy, and "
                   "volatile: `sim down` removes the containers.")
@click.option("--cluster", default=None, metavar="NAME",
              help="Join these hosts into one Proxmox cluster NAME: one VMID list, each node's API serving the "
                   "others' /nodes/<node>/…, /cluster/* across them (their inventory entries get VMIDs 120, 121, …).")
@click.option("--root", default=None, help=ROOT_HELP)
@common_options
def up(app: AppContext, hosts: int, profile: str, time_scale: float, first: int, ct_storage: str,
       cluster: str | None, root: str | None) -> int:
    """Start (or keep) the simulated hosts and write their inventory entries, keys and known_hosts."""
    from simulator.config import RetiredRuntime
    from simulator.lxc.net import BridgeTaken, NetError
    from simulator.lxc.runtime import MissingTools
    from simulator.lxc.storage import StorageError
    from simulator.lxc.template import TemplateError
    from simulator.manager.lifecycle import AddressInUse, sim_up

    copy = _inventory_copy(app)
    try:
        infos = sim_up(_root(root), hosts=hosts, profile=profile, time_scale=time_scale, inventory_copy=copy,
                       first=first, ct_storage=ct_storage, cluster=cluster)
    except RetiredRuntime as exc:
        raise _retired(exc, "sim up") from exc
    except AddressInUse as exc:
        raise ConfigError(exc.what, fix=exc.fix, host=exc.host, step="sim up") from exc
    except BridgeTaken as exc:
        raise ConfigError(exc.what, fix=exc.fix, step="sim up") from exc
    except MissingTools as exc:
        raise ConfigError(str(exc), fix="run scripts/install.sh (as root)", step="sim up") from exc
    except (TemplateError, NetError, StorageError) as exc:
        raise ConfigError(f"containers: {exc}", fix="see docs/simulator.md, 'Containers'",
                          step="sim up") from exc
    except ValueError as exc:  # a bad --cluster name, --hosts/--first out of range
        raise ConfigError(str(exc), fix="see `deploy sim up --help`; nothing was started", step="sim up") from exc
    seeded = seed_server_files(copy.parent, copy)
    if seeded:
        record_seeded(_seed_record(root), seeded)
    app.out.emit({"ok": True, "hosts": [_info_dict(i) for i in infos], "inventory": str(copy),
                  "example_written": [str(p) for p in seeded]})
    for i in infos:
        app.out.line(f"{i.name}: {i.address} ssh :{i.ssh_port} (key {i.key_file}), PVE API https://{i.address}:"
                     f"{i.api_port} (CA {i.ca_file}), GPUs {i.gpu_profile}, driver {i.driver_version}")
    app.out.line(f"inventory entries written to {copy}")
    if seeded:
        app.out.line(f"the example's profiles and presets (which the entries use) written to "
                     f"{', '.join(str(p) for p in seeded)}")
    root_opt = f" --root {root}" if root else ""
    app.out.line(f"next: deploy up host {infos[0].name}    (stop everything with: deploy sim down{root_opt})")
    return 0


@sim.command("down")
@click.option("--root", default=None, help=ROOT_HELP)
@common_options
def down(app: AppContext, root: str | None) -> int:
    """Stop every simulated host, container process and API server; remove the inventory copy."""
    from simulator.manager.lifecycle import sim_down

    sim_down(_root(root))
    copy = _inventory_copy(app)
    # What `sim up` wrote goes with it: sim.yaml, and the example's profiles and presets it seeded beside it
    # (by its record: never a file it did not write) unless they were edited since (those stay, and are named).
    # The record holds absolute paths; those beside sim.yaml are named as the inventory directory is given.
    seeds, edited = ([copy.parent / p.name if p.parent == copy.parent.resolve() else p for p in found]
                     for found in seeded_files(_seed_record(root)))
    removed = [p for p in (copy, *seeds) if p.exists()]
    for p in removed:
        p.unlink()
    _seed_record(root).unlink(missing_ok=True)
    app.out.emit({"ok": True, "removed": [str(p) for p in removed], "kept": [str(p) for p in edited]})
    app.out.line("simulated hosts stopped" + (f"; removed {', '.join(str(p) for p in removed)}" if removed else ""))
    if edited:
        app.out.line(f"kept {', '.join(str(p) for p in edited)}: edited since `deploy sim up` wrote it")
    return 0


@sim.command("status")
@click.option("--root", default=None, help=ROOT_HELP)
@common_options
def status(app: AppContext, root: str | None) -> int:
    """What is running: hosts, daemons, containers."""
    from simulator.config import RetiredRuntime
    from simulator.manager.lifecycle import sim_status

    try:
        infos = sim_status(_root(root))
    except RetiredRuntime as exc:
        raise _retired(exc, "sim status") from exc
    app.out.emit({"ok": True, "hosts": [_info_dict(i) for i in infos]})
    table = Table(title=f"simulated hosts ({_root(root)})")
    for col in ("host", "address", "sshd pid", "api pid", "gpus", "containers"):
        table.add_column(col)
    for i in infos:
        table.add_row(i.name, i.address, str(i.sshd_pid or "stopped"), str(i.api_pid or "stopped"), i.gpu_profile,
                      ", ".join(f"{k}:{v}" for k, v in i.containers.items()) or "-")
    app.out.print(table)
    if not infos:
        app.out.line("no simulated host (deploy sim up)")
    return 0


@sim.command("reboot")
@click.argument("host")
@click.option("--root", default=None, help=ROOT_HELP)
@common_options
def reboot(app: AppContext, host: str, root: str | None) -> int:
    """Reboot a simulated host as a PVE host reboots: its containers shut down, SSH and API connections drop, a new
    boot id; no /dev/nvidia* node exists (GPUs, nvidiactl, uvm, modeset, caps: the kernel module makes none) until
    `nvidia-modprobe` (or nvidia-smi, nvidia-persistenced) makes it; the host's enabled units start (those before
    pve-guests.service first), then its `onboot: 1` containers in `startup` order. Returns when pve-guests is done,
    not when the servers serve."""
    from simulator.manager.lifecycle import sim_reboot

    try:
        lines = sim_reboot(_root(root), host)
    except (ValueError, RuntimeError) as exc:
        raise ConfigError(f"cannot reboot {host}: {exc}", fix="deploy sim status shows the hosts of this root",
                          host=host, step="sim reboot") from exc
    app.out.emit({"ok": True, "host": host, "boot_log": lines})
    for line in lines:
        app.out.line(line)
    return 0


def _knobs(items: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"fault {item!r} must be KNOB=VALUE", fix="e.g. missing_uvm=true")
        low = value.strip().lower()
        parsed: Any = value
        if low in ("true", "false"):
            parsed = low == "true"
        elif low in ("none", "null", ""):
            parsed = None
        else:
            try:
                parsed = float(value) if "." in value else int(value)
            except ValueError:
                parsed = value
        out[key.strip().replace("-", "_")] = parsed
    return out


@sim.command("fault")
@click.argument("host")
@click.argument("knobs", nargs=-1, required=True)
@click.option("--ct", "vmid", type=int, default=None, help="Set container knobs of this CT instead of host knobs.")
@click.option("--root", default=None, help=ROOT_HELP)
@common_options
def fault(app: AppContext, host: str, knobs: tuple[str, ...], vmid: int | None, root: str | None) -> int:
    """Set fault knobs, e.g. `deploy sim fault sim-1 missing_uvm=true` or
    `deploy sim fault sim-1 --ct 120 log_line="…Unsupported architecture"`.

    Host knobs: missing_uvm, ssh_drop_after, task_fail, api_delay_s, driver_reload, hub_cut_after_bytes (the model
    hub cuts every download once that many bytes went out; =none clears it), aplinfo=NAME,… (the node's appliance
    index lists these templates instead of today's). Container knobs: driver_mismatch,
    crash_on_start, health_never_ok, log_line, slow_start_s, warm_start_s and cold_start_s (model seconds of every
    start, and what the first start on an empty kernel cache adds), fatal=CODE (unsupported-arch, illegal-memory-access,
    cuda-graph-oom, nccl-timeout, capture-stuck: the real line where the real server prints it), match=TEXT (the
    server faults apply only when the server's command line contains TEXT: a flag set that fails while the
    previous release still starts), and full_disk=DIR (a full filesystem at DIR in the running container;
    full_disk=none clears it).

    \b
    GPU hardware knobs (host; GPU is an index, several items comma-separated; the real formats of
    the kernel log and nvidia-smi; a host reboot clears xid, gpu_lost, recovery and a pending remap):
      xid=CODE@GPU          real NVRM Xid lines in the node's kernel log (79 also loses the GPU)
      gpu_lost=GPU          the GPU fell off the bus: nvidia-smi prints "GPU is lost" for it
      ecc=GPU:UNCORR[:CORR] volatile DRAM ECC error counters of nvidia-smi -q
      remap=GPU:pending|failed   the Remapped Rows section (pending: remapped at the next reset)
      clocks_event=GPU:REASON    hw_slowdown, hw_thermal, hw_power_brake or sw_thermal Active
      link=GPU:stuck-gen2|idle-downshift   PCIe link at Gen2 even under load / Gen1 when idle
      recovery=GPU:ACTION   the driver's recovery action (reset, reboot, drain_p2p, drain_reset):
                            its Xid 154 line and nvidia-smi -q's GPU Recovery Action
    """
    from simulator.manager.faults import set_ct_faults, set_faults

    values = _knobs(knobs)
    try:
        result = (set_ct_faults(_root(root), host, vmid, **values) if vmid is not None
                  else set_faults(_root(root), host, **values))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"cannot set faults on {host}: {exc}") from exc
    app.out.emit({"ok": True, "faults": dataclasses.asdict(result)})
    app.out.line(f"faults on {host}{f' CT {vmid}' if vmid else ''}: {dataclasses.asdict(result)}")
    return 0


@sim.group("index", cls=SuggestingGroup)
def index() -> None:
    """The simulated package index every host of a root serves (the wheelhouse, plus what was published)."""


@index.command("publish")
@click.argument("name")
@click.argument("version")
@click.option("--regression", default=None, metavar="KIND",
              help="The build is bad in the way real ones were: nan (its generations are NaN: the correctness gate "
                   "fails), slow (decode about 30 % slower: the throughput gate fails), unsupported-arch (the server "
                   "dies with the real 'Unsupported architecture' line). The knob is inside the wheel: only a venv "
                   "that installed this build misbehaves.")
@click.option("--root", default=None, help=ROOT_HELP)
@common_options
def index_publish(app: AppContext, name: str, version: str, regression: str | None, root: str | None) -> int:
    """Publish a new build of a stand-in package (sglang, torch, flashinfer-python, flashinfer-cubin, sglang-kernel,
    kernels) while the hosts run, e.g. `deploy sim index publish flashinfer-python 0.7.2+cu130 --regression nan`:
    every host's index of the root serves it at once, so an unlocked `pip install sglang` picks it from then on (a
    local build `X+label` satisfies sglang's exact pin `==X` and sorts above X) and a lock keeps the files it names."""
    from simulator.software.index import PublishRefused, publish, published

    try:
        path = publish(_root(root), name, version, regression)
    except PublishRefused as exc:
        raise ConfigError(f"cannot publish {name} {version}: {exc.what}", fix=exc.fix,
                          step="sim index publish") from exc
    files = published(_root(root))
    app.out.emit({"ok": True, "published": path.name, "regression": regression,
                  "files": [{"file": f, "sha256": h, "regression": r} for f, h, r in files]})
    bad = f" (regression: {regression})" if regression else ""
    app.out.line(f"published {path.name}{bad} to every host's index of {_root(root)}")
    for f, h, r in files:
        app.out.line(f"  {f}  sha256:{h}" + (f"  regression: {r}" if r else ""))
    return 0
