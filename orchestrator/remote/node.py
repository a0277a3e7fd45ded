"""Rebooting the PVE node over SSH, and waiting until it is back (the `reboot_host` remedy of `deploy watch`).

Why `systemctl reboot` over SSH and not the API's `POST /nodes/{node}/status`: the API call needs `Sys.PowerMgmt`,
which the lifecycle token is not meant to hold, and root's SSH is what the tool already uses for the node. A real
`systemctl reboot` returns once the job is queued and the connection drops a moment later, or drops before the
exit status arrives: both mean the reboot is under way. The node is back when it answers SSH with another boot id
(`/proc/sys/kernel/random/boot_id`): an answer with the old one is the node still shutting down.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable

from orchestrator.errors import RemoteError
from orchestrator.remote.container import Node

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
#: Seconds between tries while the node is down (each try is one TCP connect, then one round trip).
POLL_S = 2.0


def boot_id(ssh: Node) -> str:
    """The node's boot id (one round trip)."""
    return ssh.run(f"cat {shlex.quote(BOOT_ID_PATH)}", timeout=30, what="read the boot id").stdout.strip()


def reboot_node(ssh: Node, *, timeout_s: float, say: Callable[[str], None],
                sleep: Callable[[float], None] = time.sleep) -> tuple[str, str, float]:
    """Reboot the node and wait for its new boot; returns (old boot id, new boot id, seconds until it answered).

    Raises RemoteError when the reboot was refused or the node did not answer with a new boot within `timeout_s`.
    """
    before = boot_id(ssh)
    started = time.monotonic()
    try:
        res = ssh.run("systemctl reboot", timeout=60, check=False, what="systemctl reboot")
        if res.rc != 0:
            raise RemoteError(f"`systemctl reboot` was refused (exit {res.rc}): "
                              f"{(res.stderr or res.stdout).strip()[-300:]}",
                              fix="reboot the node by hand (its console or IPMI), then `deploy up host "
                                  f"{ssh.host.name}` to verify it", host=ssh.host.name, step="reboot")
    except RemoteError as err:
        if "dropped" not in err.what:  # a drop before the exit status: the reboot is under way
            raise
    ssh.close()
    say(f"{ssh.host.name}: rebooting (boot {before[:8]}); waiting up to {timeout_s:.0f} s for the new boot")
    last = "no answer yet"
    while time.monotonic() - started < timeout_s:
        sleep(POLL_S)
        try:
            now = boot_id(ssh)
        except RemoteError as err:
            last = err.what
            ssh.close()
            continue
        if now and now != before:
            return before, now, time.monotonic() - started
        ssh.close()  # the old boot still answers: it is shutting down
    raise RemoteError(f"{ssh.host.name} did not come back from its reboot within {timeout_s:.0f} s (last: {last})",
                      fix="check the node's console (IPMI); once it is up, `deploy up host "
                          f"{ssh.host.name}` verifies it; raise health.reboot_timeout_s for a slow boot",
                      host=ssh.host.name, step="reboot")
