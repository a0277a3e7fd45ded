"""Shared fixtures. `sim_host` starts one simulated Proxmox host for the whole session (one per pytest-xdist
worker) under a temporary DEPLOY_SIM_ROOT, on a host number of its own (tests/sim_hosts.py: free numbers from 150
on, or DEPLOY_SIM_FIRST); `sim` hands it to a test after resetting faults and containers.

Plugins: tests/skip_policy.py (a run fails on any skip but "no GPU").
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import sim_hosts

pytest_plugins = ["tests.skip_policy", "tests.module_times", "tests.pg_server"]

# A suite started in the background of a non-interactive shell (`bash .ci/run &`) inherits SIGINT ignored, and an
# ignored signal stays ignored across exec: the tests that press Ctrl-C on a `deploy` they started would see it do
# nothing. A handled signal is reset to its default in every child, so the children get Ctrl-C as a terminal gives it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without xdist, the tests of a group named across modules (`converged-host`, tests/e2e/conftest.py) are moved
    next to the first of them, so one process shares one converged host. Under xdist (`--dist loadfile`) only whole
    modules move, slowest first: a module's tests stay together and in order on one worker. Every other test is
    marked with its module's group, for a run with `--dist loadgroup`."""
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
            continue
        groups.setdefault(str(mark.args[0] if mark.args else mark.kwargs.get("name")), []).append(item)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Under xdist (scripts/test.sh: `--dist loadfile`) a module's tests must stay together and in order: its
        # module-scoped hosts are converged by its first test. Moving a shared test next to another module's would
        # split its module; each worker then converges its own shared host once instead. Whole modules are
        # ordered slowest first (tests/module_times.py): every worker sorts alike, so their collections agree.
        from tests import module_times  # here: imported before pytest loads it as a plugin, it warns

        module_times.order_by_time(items, module_times.measured_times())
        return
    for members in groups.values():
        rest = [item for item in items if item not in members]
        at = items.index(members[0])
        items[:] = rest[:at] + members + rest[at:]


def pytest_configure(config: pytest.Config) -> None:
    """The controlling process picks the run's host numbers once; xdist workers inherit them by environment.

    Simulated hosts run real LXC containers. End-to-end tests create their container from a site template that the tool
    itself provisioned (tests/e2e/site_template.py); the provisioning tests start from the stock template.
    """
    if hasattr(config, "workerinput"):
        return
    workers = getattr(config.option, "numprocesses", None)
    try:
        bases = sim_hosts.choose_bases(workers if isinstance(workers, int) and workers else 1)
    except (sim_hosts.NoRoom, ValueError) as exc:
        raise pytest.UsageError(str(exc)) from None  # one line naming the fix, not an INTERNALERROR traceback
    os.environ[sim_hosts.BASE_ENV] = ",".join(map(str, bases))


def sim_skip_reason() -> str | None:
    """Why the simulated host cannot run here, or None."""
    if os.geteuid() != 0:
        return "the simulated PVE host needs root (sshd, mount/network namespaces, mknod)"
    if not Path("/usr/sbin/sshd").exists():
        return "openssh-server (/usr/sbin/sshd) is not installed"
    if not shutil.which("ip") or not shutil.which("ssh"):
        return "iproute2 (ip) and openssh-client (ssh) are needed"
    return None


@contextlib.contextmanager
def sim_root(tmp_path_factory: pytest.TempPathFactory, name: str, offset: int, hosts: int = 1,
             **options: Any) -> Iterator[tuple[Path, list[Any]]]:
    """A simulated root with `hosts` hosts numbered from this process's `offset` (tests/sim_hosts.py): (root, infos).

    Skips when the simulator cannot run here; always brought down, even if the test failed. Containers live
    on a tmpfs (simulator/lxc/storage.py): a test creates and destroys them by the hundred.
    """
    options.setdefault("ct_storage", "tmpfs")
    reason = sim_skip_reason()
    if reason:
        pytest.skip(reason)
    from simulator.manager.lifecycle import sim_down, sim_up

    root = tmp_path_factory.mktemp(name)
    try:
        yield root, sim_up(root, hosts=hosts, first=sim_hosts.claim(offset, hosts), time_scale=5.0, **options)
    finally:
        sim_down(root)


@pytest.fixture(scope="session")
def sim_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One simulated host for the session (a SimHostInfo), its root exported as DEPLOY_SIM_ROOT."""
    old = os.environ.get("DEPLOY_SIM_ROOT")
    try:
        with sim_root(tmp_path_factory, "deploy-sim", sim_hosts.OFFSET_SESSION_HOST) as (root, (info,)):
            os.environ["DEPLOY_SIM_ROOT"] = str(root)
            yield info
    finally:
        if old is None:
            os.environ.pop("DEPLOY_SIM_ROOT", None)
        else:
            os.environ["DEPLOY_SIM_ROOT"] = old


@dataclass
class HostResets:
    """How often this process reset its session host, and at which count a converged host was last shared
    (tests/e2e/conftest.py `converged_shared`: still valid while no reset came since)."""

    count: int = 0
    shared_at: int | None = None


@pytest.fixture(scope="session")
def sim_resets() -> HostResets:
    return HostResets()


@pytest.fixture
def sim(sim_host: Any, sim_resets: HostResets) -> Any:
    """The session's simulated host, reset: no faults, no containers, default template present."""
    from simulator.manager.faults import reset_host

    sim_resets.count += 1
    reset_host(sim_host.host_dir.parent.parent, sim_host.name)
    return sim_host
