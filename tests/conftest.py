"""Shared fixtures. `sim_host` starts one simulated Proxmox host for the whole session (one per pytest-xdist
worker) under a temporary DEPLOY_SIM_ROOT, on a host number of its own (tests/sim_hosts.py: free numbers from 150
on, or DEPLOY_SIM_FIRST); `sim` hands it to a test after resetting faults and containers.

Plugins: tests/skip_policy.py (a run fails on any skip but "no GPU").
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import sim_hosts

pytest_plugins = ["tests.skip_policy"]


def pytest_configure(config: pytest.Config) -> None:
    """The controlling process picks the run's host numbers once; xdist workers inherit them by environment."""
    if hasattr(config, "workerinput"):
        return
    workers = getattr(config.option, "numprocesses", None)
    os.environ[sim_hosts.BASE_ENV] = str(sim_hosts.choose_base(workers if isinstance(workers, int) and workers else 1))


def sim_skip_reason() -> str | None:
    """Why the simulated host cannot run here, or None."""
    if os.geteuid() != 0:
        return "the simulated PVE host needs root (sshd, mount/network namespaces, mknod)"
    if not Path("/usr/sbin/sshd").exists():
        return "openssh-server (/usr/sbin/sshd) is not installed"
    if not shutil.which("ip") or not shutil.which("ssh"):
        return "iproute2 (ip) and openssh-client (ssh) are needed"
    return None


@pytest.fixture(scope="session")
def sim_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One simulated host for the session (a SimHostInfo); torn down with `sim_down` at the end."""
    reason = sim_skip_reason()
    if reason:
        pytest.skip(reason)
    from simulator.manager import sim_down, sim_up

    root = tmp_path_factory.mktemp("deploy-sim")
    old = os.environ.get("DEPLOY_SIM_ROOT")
    os.environ["DEPLOY_SIM_ROOT"] = str(root)
    try:
        (info,) = sim_up(root, hosts=1, first=sim_hosts.sim_number(sim_hosts.OFFSET_SESSION_HOST), time_scale=5.0)
        yield info
    finally:
        sim_down(root)
        if old is None:
            os.environ.pop("DEPLOY_SIM_ROOT", None)
        else:
            os.environ["DEPLOY_SIM_ROOT"] = old


@pytest.fixture
def sim(sim_host: Any) -> Any:
    """The session's simulated host, reset: no faults, no containers, default template present."""
    from simulator.manager import reset_host

    reset_host(sim_host.host_dir.parent.parent, sim_host.name)
    return sim_host
