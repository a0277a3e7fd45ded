"""Fault knobs of a running simulated host and its containers (`deploy sim fault`, `deploy sim ct-fault`), and
`reset_host`, which puts a host back as `sim up` left it for the next test. Knobs that act at once (a full disk, a
userspace mismatch, missing uvm) act here; the others are read by the stand-ins from host.json and state.json.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import Any

from simulator import layout
from simulator.config import (
    FATAL_FAULTS,
    KERNEL_SHAPES,
    OUTPUTS,
    CtFaults,
    HostConfig,
    HostFaults,
    HostPaths,
    SimPaths,
    write_text_atomic,
)
from simulator.gpu import health as gpu_health
from simulator.gpu import powercap as gpu_powercap
from simulator.gpu.profiles import get_profile
from simulator.lxc import runtime as lxc_runtime
from simulator.lxc import template as lxc_template
from simulator.manager.lifecycle import stop_containers
from simulator.pve import hardware


def _coerce(cls: type, knobs: dict[str, Any]) -> dict[str, Any]:
    known = {f.name: f for f in fields(cls)}
    out = {}
    for key, value in knobs.items():
        if key not in known:
            raise ValueError(f"unknown fault {key!r} (known: {', '.join(known)})")
        out[key] = value
    return out


def set_faults(root: Path, host: str, **knobs: Any) -> HostFaults:
    """Set host fault knobs (see HostFaults); `missing_uvm` is applied to the host's /dev at once."""
    hp = SimPaths(Path(root).resolve()).host(host)
    values = _coerce(HostFaults, knobs)
    gpu_health.check_knobs(values, hp.load().gpu_count)
    xids = [(int(c), int(g)) for c, _, g in (x.strip().partition("@") for x in (values.get("xid") or "").split(","))
            if c]

    def apply(cfg: HostConfig) -> None:
        for k, v in values.items():
            setattr(cfg.faults, k, v)
        if any(code == 79 for code, _ in xids):
            cfg.faults.gpu_lost = next(g for code, g in xids if code == 79)

    cfg = hp.update(apply)
    recovery = gpu_health.per_gpu(values.get("recovery"))
    if xids or recovery:
        buses = [g.bus_id for g in get_profile(cfg.gpu_profile).gpus]
        gpu_health.append_kernel(str(hp.dir), [gpu_health.xid_line(code, buses[g]) for code, g in xids]
                                 + [gpu_health.recovery_line(a, buses[g]) for g, a in recovery.items()])
    if "missing_uvm" in values or "driver_reload" in values:
        hardware.set_uvm(hp.dir, cfg, present=not cfg.faults.missing_uvm)
    if values.get("driver_reload"):  # a reloaded module starts every GPU at its default power limit again
        gpu_powercap.clear(str(hp.dir))  # (no udev here: deploy's rule would restart deploy-gpu-power.service)
    if "ssh_drop_after" in values:
        write_text_atomic(hp.ssh_counter, "0\n")
        drop = hp.sshd / layout.DROP_FILE
        if cfg.faults.ssh_drop_after is None:
            drop.unlink(missing_ok=True)
        else:
            write_text_atomic(drop, f"{cfg.faults.ssh_drop_after}\n")
    return cfg.faults


def set_ct_faults(root: Path, host: str, vmid: int, **knobs: Any) -> CtFaults:
    """Set per-container fault knobs (see CtFaults) in ct/<vmid>/state.json."""
    hp = SimPaths(Path(root).resolve()).host(host)
    values = _coerce(CtFaults, knobs)
    if values.get("fatal") and values["fatal"] not in FATAL_FAULTS:
        raise ValueError(f"unknown fatal fault {values['fatal']!r} (known: {', '.join(FATAL_FAULTS)})")
    if values.get("output") and values["output"] not in OUTPUTS:
        raise ValueError(f"unknown output fault {values['output']!r} (known: {', '.join(OUTPUTS)})")
    if values.get("kernel_shape") and values["kernel_shape"] not in KERNEL_SHAPES:
        raise ValueError(f"unknown kernel_shape {values['kernel_shape']!r} (known: {', '.join(KERNEL_SHAPES)})")
    if not 0 <= float(values.get("drift") or 0) <= 1:
        raise ValueError("drift is a logprob change in nats between 0 and 1 (the gate tolerates about 0.1)")
    if not hp.conf(vmid).exists():
        raise ValueError(f"CT {vmid} does not exist on {host}")

    def apply(st: Any) -> None:
        for k, v in values.items():
            setattr(st.faults, k, v)

    if "full_disk" in values:
        # Before recording it: a knob that did not take effect must not say it did.
        previous = hp.ct(vmid).load().faults.full_disk
        _full_disk(hp, vmid, str(values["full_disk"] or ""), previous)
    if "small_disk" in values:
        _small_disk(hp, vmid, str(values["small_disk"] or ""), hp.ct(vmid).load().faults.small_disk)
    faults = hp.ct(vmid).update(apply).faults
    if values.get("driver_mismatch"):
        # Like a host driver upgrade under a running container: its userspace now differs, at once.
        _install_userspace(hp, vmid, str(values["driver_mismatch"]))
    return faults


#: Mounts a small tmpfs over DIR holding a copy of its files, filled to ENOSPC (in the CT's mount namespace).
_FULL_DISK = r"""set -e
D="$1"; mkdir -p "$D"
T=$(mktemp -d /run/deploy-sim-full.XXXXXX)
cp -a "$D"/. "$T"/
mount -t tmpfs -o size=512k,mode=0755 deploy-sim-full "$D"
cp -a "$T"/. "$D"/
rm -rf "$T"
dd if=/dev/zero of="$D/.deploy-sim-filler" bs=1k 2>/dev/null || true
"""


def _full_disk(hp: HostPaths, vmid: int, path: str, previous: str | None) -> None:
    """The `full_disk` knob: unmount the previous full tmpfs, then cover `path` (absolute, in the CT) with one."""
    if path and not path.startswith("/"):
        raise ValueError(f"full_disk {path!r} must be an absolute path in the container")
    pid = lxc_runtime.LxcRuntime(hp, hp.load()).init_pid(vmid)
    if not pid:
        raise ValueError(f"CT {vmid} is not running: full_disk needs a running container")
    enter = ["nsenter", "-t", str(pid), "-m", "-p", "-r", "-w", "--"]  # -p: the CT's /proc/self is ours
    if previous:
        res = subprocess.run([*enter, "umount", "-l", previous], capture_output=True, text=True, timeout=30)
        if res.returncode != 0 and "not mounted" not in res.stderr:
            raise ValueError(f"full_disk: unmounting {previous}: {res.stderr.strip() or res.returncode}")
    if path:
        res = subprocess.run([*enter, "sh", "-c", _FULL_DISK, "full_disk", path], capture_output=True, text=True,
                             timeout=60)
        if res.returncode != 0:
            raise ValueError(f"full_disk {path}: {res.stderr.strip() or res.returncode}")


#: DIR becomes a tmpfs of SIZE holding a copy of its files, or, when it is one already, grows to SIZE in place.
_SMALL_DISK = r"""set -e
D="$1"; SIZE="$2"; mkdir -p "$D"
if awk -v d="$D" '$5 == d && $0 ~ / - tmpfs deploy-sim-disk / {found=1} END {exit !found}' /proc/self/mountinfo; then
  mount -o remount,size="$SIZE" "$D"
else
  T=$(mktemp -d /run/deploy-sim-disk.XXXXXX)
  cp -a "$D"/. "$T"/
  mount -t tmpfs -o size="$SIZE",mode=0755 deploy-sim-disk "$D"
  cp -a "$T"/. "$D"/
  rm -rf "$T"
fi
"""


def _small_disk(hp: HostPaths, vmid: int, value: str, previous: str | None) -> None:
    """The `small_disk` knob (CtFaults): `DIR:SIZE` mounts or grows DIR's own small filesystem; "" unmounts it."""
    path, _, size = value.rpartition(":")
    if value and (not path.startswith("/") or not re.fullmatch(r"[1-9][0-9]*[kmg]?", size)):
        raise ValueError(f"small_disk {value!r} must be DIR:SIZE, an absolute directory and a size like 3m or 512k")
    pid = lxc_runtime.LxcRuntime(hp, hp.load()).init_pid(vmid)
    if not pid:
        raise ValueError(f"CT {vmid} is not running: small_disk needs a running container")
    enter = ["nsenter", "-t", str(pid), "-m", "-p", "-r", "-w", "--"]
    old = (previous or "").rpartition(":")[0]
    if old and old != path:
        res = subprocess.run([*enter, "umount", "-l", old], capture_output=True, text=True, timeout=30)
        if res.returncode != 0 and "not mounted" not in res.stderr:
            raise ValueError(f"small_disk: unmounting {old}: {res.stderr.strip() or res.returncode}")
    if path:
        res = subprocess.run([*enter, "sh", "-c", _SMALL_DISK, "small_disk", path, size], capture_output=True,
                             text=True, timeout=60)
        if res.returncode != 0:
            raise ValueError(f"small_disk {value}: {res.stderr.strip() or res.returncode}")


def _install_userspace(hp: HostPaths, vmid: int, version: str) -> None:
    """A real container gets userspace `version`: what the `.run` of that version leaves in its rootfs."""
    from simulator.software import nvrun, runfile

    rootfs = lxc_runtime.LxcRuntime(hp, hp.load()).dirs(vmid).rootfs
    with tempfile.TemporaryDirectory(prefix="nvidia-installer.") as tmp:
        for name, data in runfile.payload_files().items():
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_bytes(data)
        nvrun.uninstall(rootfs)
        nvrun.install(rootfs, version, Path(tmp))


def reset_host(root: Path, host: str) -> None:
    """Back to a fresh host for the next test: faults cleared, uvm present, all containers destroyed, no deploy
    lock lease left by an earlier (killed) run, and the stock template back in `local:vztmpl` (a test may delete
    it from the storage, as an operator does; the next test must not depend on which test ran before it); the
    kernel log holds no Xid line of an earlier test, and no kernel cache of an earlier test's container is left."""
    hp = SimPaths(Path(root).resolve()).host(host)
    lxc_template.install_into(lxc_template.ensure().path, hp.template_cache)  # a hard link; nothing when present
    set_faults(root, host, **{f.name: f.default for f in fields(HostFaults)})
    (hp.dir / gpu_health.KERNEL_LOG).unlink(missing_ok=True)  # the Xid lines a test wrote: a new boot's log
    stop_containers(hp)
    for load in hp.gpu.glob("load-*.json"):  # a killed server's GPU load (telemetry.py) ends with the test
        load.unlink(missing_ok=True)
    gpu_powercap.clear(str(hp.dir))  # a power limit a test set (nvidia-smi -pl): every GPU at its default again
    for rule in (hp.fs / "etc/udev/rules.d").glob("*"):  # udev rules a test (deploy power) wrote
        rule.unlink()
    for name in ("deploy.lease", "deploy.lease.tmp"):
        (hp.fs / "var/lib/deploy" / name).unlink(missing_ok=True)
    # the kernel caches deploy keeps for its containers (a rebuilt CT would start warm on an earlier test's)
    shutil.rmtree(hp.fs / "var/lib/deploy" / "kernel-cache", ignore_errors=True)
    for conf in hp.lxc_conf_dir.glob("*.conf"):
        conf.unlink()
    for cfg_file in ("user.cfg", "priv/token.cfg"):  # tokens and ACLs a test made (simulator.pve.acl)
        (hp.fs / "etc/pve" / cfg_file).unlink(missing_ok=True)
    shutil.rmtree(hp.dir / "ct", ignore_errors=True)
    (hp.dir / "ct").mkdir()
    shutil.rmtree(hp.dir.parent.parent / "lxc" / host, ignore_errors=True)
    units = hp.fs / "etc/systemd/system"  # units a test (or `deploy up`) installed, and every on-demand node back
    units.mkdir(parents=True, exist_ok=True)
    for entry in units.iterdir():  # the directory itself stays: the host view has it bind-mounted
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    hardware.provision(hp.dir, hp.load())
