"""Inside the container: NVIDIA userspace equals the host kernel module, and every GPU is visible."""

from __future__ import annotations

import re

from orchestrator.engine.step import StepContext, mark_change, step
from orchestrator.errors import CheckFailed, ConfigError, RemoteError
from orchestrator.facts import CT, HOST
from orchestrator.parsers.driver import versions_match
from orchestrator.runlog import StepRecord
from orchestrator.steps.session import ensure_facts, refresh_ct_facts, unknown_until_started

#: nvidia-installer's own option names (its option table): userspace only, never a question or a prompt. The
#: kernel module belongs to the host; in a container the installer must not build or replace it.
INSTALLER_FLAGS = ("--silent", "--no-kernel-module", "--no-questions", "--ui=none", "--accept-license")


def host_driver(ctx: StepContext) -> str:
    version = ctx.facts.get(HOST.driver_version)
    if version is None:
        raise CheckFailed("the NVIDIA kernel module is not loaded on the host (/proc/driver/nvidia/version "
                          "is missing)", fix="install/load the NVIDIA driver on the host; run deploy doctor",
                          host=ctx.host.name)
    return version


def container_userspace(ctx: StepContext) -> tuple[str | None, str]:
    """(version or None, why) of the container's NVML userspace."""
    answer = ctx.facts.get(CT.gpus)
    if answer is None:
        return None, "container not running"
    if answer.missing:
        return None, "nvidia-smi is not installed in the container"
    status = answer.status
    if status.state == "version_mismatch":
        return status.library_version, "Driver/library version mismatch"
    if not status.ok:
        return None, status.message or f"nvidia-smi exited {answer.rc}"
    if answer.driver_version is None:
        return None, "nvidia-smi printed no driver version"
    return answer.driver_version, "ok"


@step("driver_userspace", host_facts=(HOST.driver_version, HOST.installer), ct_facts=(CT.gpus,))
def driver_userspace(ctx: StepContext, record: StepRecord) -> None:
    """Make the container's NVIDIA userspace equal the host kernel module version."""
    ensure_facts(ctx)
    kernel = host_driver(ctx)
    if unknown_until_started(ctx, record, "the container's NVIDIA userspace"):
        return
    userspace, why = container_userspace(ctx)
    record.details.update({"host_kernel_module": kernel, "container_userspace": userspace})
    if userspace is not None and versions_match(kernel, userspace):
        record.summary = f"userspace {userspace} = host kernel module {kernel}"
        return
    if why.startswith("NVIDIA-SMI has failed") or "communicate" in why:
        raise CheckFailed(f"nvidia-smi in the container cannot reach the driver: {why}",
                          fix="the device nodes are not passed in; re-run deploy up (container step) and check "
                              "`pct config` for devN lines", host=ctx.host.name)
    installer = ctx.host.container.driver_installer
    seen = userspace or "none"
    if installer is None or not ctx.facts.get(HOST.installer):
        raise CheckFailed(
            f"container NVIDIA userspace is {seen} ({why}) but the host kernel module is {kernel}",
            fix=(f"install exactly {kernel} in the container without kernel modules: copy "
                 f"NVIDIA-Linux-x86_64-{kernel}.run to the host and set container.driver_installer to its path "
                 f"(deploy then runs it with {' '.join(INSTALLER_FLAGS)}), or install the matching distro packages"),
            host=ctx.host.name)
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)\.run$", installer)
    if m and not versions_match(kernel, m.group(1)):
        raise ConfigError(f"container.driver_installer is {installer} (version {m.group(1)}) but the host kernel "
                          f"module is {kernel}", fix=f"point it at NVIDIA-Linux-x86_64-{kernel}.run",
                          host=ctx.host.name)
    if not mark_change(record, ctx, f"install NVIDIA userspace {kernel} in CT {ctx.vmid} (was {seen})"):
        record.summary = record.changes[-1]
        return
    ctx.say(record.changes[-1])
    path = ctx.ct.paths.installer_path
    res = ctx.ct.push_and_run(installer, path, ["sh", path, *INSTALLER_FLAGS], perms="0700", timeout=1800,
                              what="NVIDIA userspace install")
    if res.rc != 0:
        raise RemoteError(f"the NVIDIA installer failed in CT {ctx.vmid}: {res.said(400)}",
                          fix="read the installer log in the container (/var/log/nvidia-installer.log)",
                          host=ctx.host.name)
    refresh_ct_facts(ctx, CT.gpus, CT.topo, CT.p2p_read, CT.p2p_write)
    after, why_after = container_userspace(ctx)
    if after is None or not versions_match(kernel, after):
        raise CheckFailed(f"after installing, the container userspace is {after or why_after}, host is {kernel}",
                          fix="install the matching userspace by hand and re-run", host=ctx.host.name)
    record.summary = f"installed userspace {after} (= host {kernel})"


@step("container_gpus", ct_facts=(CT.gpus,))
def container_gpus(ctx: StepContext, record: StepRecord) -> None:
    """The container sees exactly the inventory's GPU count."""
    ensure_facts(ctx)
    answer = ctx.facts.get(CT.gpus)
    expected = ctx.host.container.expected_gpus
    if answer is None:
        if ctx.options.dry_run:
            record.status = "skipped"
            record.summary = "container not running yet (dry run)"
            return
        raise CheckFailed("the container is not running", host=ctx.host.name, fix="re-run deploy up")
    if not answer.status.ok:
        raise CheckFailed(f"nvidia-smi failed in the container: {answer.status.message}", host=ctx.host.name,
                          fix="check device passthrough (pct config) and the userspace driver version")
    gpus = answer.gpus
    record.details["gpus"] = [g.name for g in gpus]
    if len(gpus) != expected:
        raise CheckFailed(f"the container sees {len(gpus)} GPU(s), the inventory expects {expected}",
                          fix="check that every /dev/nvidiaN is passed through (deploy plan shows the devN diff) "
                              "and that no GPU fell off the bus on the host (nvidia-smi -L on the host)",
                          host=ctx.host.name)
    record.summary = f"{len(gpus)} × {gpus[0].name}" if gpus else "0 GPUs"
