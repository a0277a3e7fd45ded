"""The remedies `deploy watch` runs for a GPU fault (playbooks remedy-restart, remedy-reboot): restart sglang,
reboot the node, and advance the kernel-log cursor past the Xids the remedy dealt with.

Why the cursor is written by the remedy: an Xid stays in the node's kernel log until the next boot, and a sensor
that reads it again would remedy it again (or hold the host out forever, NVIDIA/k8s-device-plugin#234). Only the
cursor of the reading that triggered the remedy is stored, so an Xid logged after that reading is still seen.
"""

from __future__ import annotations

import shlex
import time

from orchestrator.engine.step import StepContext, step
from orchestrator.errors import CheckFailed, RemoteError
from orchestrator.facts import CT, HOST
from orchestrator.hardware.kernel_log import CURSOR_PATH
from orchestrator.remote.node import POLL_S, reboot_node
from orchestrator.runlog import StepRecord
from orchestrator.steps.correctness import require_current_release
from orchestrator.steps.release import make_current


@step("restart_server", ct_facts=(CT.current_release,))
def restart_server(ctx: StepContext, record: StepRecord) -> None:
    """Restart sglang on its current release (the files installed again unchanged, as a rollback does)."""
    release = require_current_release(ctx, ": nothing to restart")
    make_current(ctx, release, what="restart sglang (GPU fault remedy)")
    ctx.state.server.release, ctx.state.server.restarted = release, True
    record.status = "changed"
    record.changes.append(f"sglang restarted on release {release}")
    record.summary = f"sglang restarted (release {release})"


@step("reboot_node")
def reboot(ctx: StepContext, record: StepRecord) -> None:
    """Reboot the PVE node, wait for its new boot and for its container to run again (pve-guests starts it).

    The host lease is released first: it counts seconds of the boot that is ending, and a keep-alive would fail
    while the node is down; the watch's own claim on this machine keeps other deploy commands off the host."""
    lease = ctx.host_lock
    if lease is not None:
        ctx.host_lock = None
        lease.release()
    timeout_s = ctx.inventory.health.reboot_timeout_s
    old, new, took = reboot_node(ctx.ssh, timeout_s=timeout_s, say=ctx.say)
    record.status = "changed"
    record.changes.append(f"node rebooted: boot {old[:8]} → {new[:8]}")
    record.details.update({"boot_before": old, "boot_after": new, "back_after_s": round(took, 1)})
    state, deadline = None, time.monotonic() + max(timeout_s - took, 60.0)
    while time.monotonic() < deadline:
        try:
            res = ctx.ssh.run(HOST.ct_status.command(ctx.host, ctx.profile), timeout=60, check=False,
                              what="pct status")
        except RemoteError:
            ctx.ssh.close()
            res = None
        state = HOST.ct_status.parse(res.output) if res is not None else None  # the fact, read again alone
        if state == "running":
            break
        time.sleep(POLL_S)
    if state != "running":
        raise CheckFailed(f"after the reboot CT {ctx.vmid} is {state or 'unknown'}, not running (pve-guests starts "
                          "only `onboot: 1` containers)", host=ctx.host.name,
                          fix=f"`pct start {ctx.vmid}` on the node (and set onboot: 1), then `deploy up host "
                              f"{ctx.host.name}`")
    record.summary = f"node back after {took:.0f} s (boot {new[:8]}), CT {ctx.vmid} running"


@step("hardware_cursor")
def hardware_cursor(ctx: StepContext, record: StepRecord) -> None:
    """Store the kernel-log cursor of the reading the remedy answered: its Xids are not read again."""
    cursor = ctx.inputs.kernel_cursor
    if not cursor:
        record.status = "skipped"
        record.summary = "no kernel-log cursor read (the reboot starts a new log)"
        return
    path = shlex.quote(CURSOR_PATH)
    directory = shlex.quote(CURSOR_PATH.rsplit("/", 1)[0])
    ctx.ssh.run(f"mkdir -p {directory} && printf '%s\\n' {shlex.quote(cursor)} > {path}.tmp && mv {path}.tmp {path}",
                timeout=30, what="store the kernel-log cursor")
    record.status = "changed"
    record.changes.append(f"kernel-log cursor {cursor}")
    record.summary = f"Xids up to {cursor} are remedied: not read again"
