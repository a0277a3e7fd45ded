"""A simulated host for tests/sim/test_lxc_*.py: one per test module, brought down after it."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import sim_hosts
from tests.conftest import sim_root, sim_skip_reason
from tests.sim.conftest import Ssh

TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


def lxc_skip_reason() -> str | None:
    """Why real LXC containers cannot run here, or None."""
    reason = sim_skip_reason()
    if reason:
        return reason
    for tool, package in (("lxc-start", "lxc"), ("debootstrap", "debootstrap"), ("nft", "nftables"),
                          ("zstd", "zstd")):
        if shutil.which(tool) is None:
            return f"{tool} not installed ({package}): run scripts/install.sh"
    return None


@contextlib.contextmanager
def lxc_host(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[Path, Any, Ssh]]:
    """(root, SimHostInfo, an SSH connection to the host) for a host whose containers are real LXC ones."""
    reason = lxc_skip_reason()
    if reason:
        pytest.skip(reason)
    with sim_root(tmp_path_factory, name, sim_hosts.OFFSET_LXC) as (root, (info,)):
        ssh = Ssh(info)
        try:
            yield root, info, ssh
        finally:
            ssh.close()


#: Inside a container: until its systemd answers (early in a boot `systemctl` cannot reach it and prints nothing),
#: then its state. `pct start` and `pct exec` do not wait for the boot, as on PVE.
BOOTED = ("for i in $(seq 300); do s=$(systemctl is-system-running --wait 2>/dev/null); [ -n \"$s\" ] && break; "
          "sleep 0.1; done; echo \"$s\"")


def wait_booted(ssh: Ssh, vmid: int) -> str:
    """The container's systemd state once its boot is done (`running`, `degraded`, …), at most ~30 s."""
    return str(ssh.run(f"pct exec {vmid} -- sh -c '{BOOTED}'", timeout=90).out.strip())


def create_and_start(ssh: Ssh, vmid: int, *options: str, template: str = TEMPLATE) -> None:
    """`pct create` from the stock template (privileged, with a veth) and `pct start`, asserting both work; returns
    once the container's boot is done (pct start itself returns earlier, as on PVE)."""
    res = ssh.run(f"pct create {vmid} {template} --hostname ct{vmid} --unprivileged 0 "
                  f"--net0 name=eth0,bridge=vmbr0,ip=dhcp {' '.join(options)}", timeout=120)
    assert res.rc == 0, res.err
    res = ssh.run(f"pct start {vmid}", timeout=120)
    assert res.rc == 0, res.err
    assert wait_booted(ssh, vmid) in ("running", "degraded")
