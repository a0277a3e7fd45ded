"""One harness for end-to-end tests of several simulated hosts (a fleet): the root, its inventory, its faults.

`fleet_root(...)` brings up a root of N hosts numbered from a tests/sim_hosts.py offset with an inventory (groups,
the site template) and yields a `FleetHarness`; the modules' own classes (`Fleet`, `RolledFleet`, `RouterFleet`)
are this harness with what their tests add (a router in front of the servers, a managed router). Faults are set
through the simulator's manager by host name, and `clear_faults` puts every host back before a test, so tests of
one module do not depend on each other's faults while converged containers are kept.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import sim_root
from tests.e2e.conftest import DeployEnv, make_fleet_env, site_ostemplate, until

#: Host knobs a fleet test may set (HostFaults in simulator/config.py), with the value that means "no fault".
HOST_FAULTS_OFF: dict[str, Any] = {"missing_uvm": False, "task_fail": None, "ssh_drop_after": None}
#: Container knobs a fleet test may set on CT 120 (CtFaults), with the value that means "no fault".
CT_FAULTS_OFF: dict[str, Any] = {"crash_on_start": False, "match": None}


@dataclass
class FleetHarness:
    """A root of simulated hosts and one inventory for them (`env`: the CLI runs against the whole fleet)."""

    env: DeployEnv
    names: list[str]
    root: Path
    infos: list[Any] = field(default_factory=list)

    @property
    def state(self) -> Path:
        """Where fleet rolls keep their records (DEPLOY_STATE_DIR/fleet-rolls)."""
        return Path(self.env.env["DEPLOY_STATE_DIR"]) / "fleet-rolls"

    def roll_killed_on(self, host: str, *args: str) -> None:
        """`deploy roll group prod ARGS --batch 1 --skip-bench` SIGKILLed 1.5 s after its record shows `host` in
        progress (an earlier host done, a later one untouched): the interrupted roll a resume test starts from."""
        proc = self.env.popen("roll", "group", "prod", *args, "--batch", "1", "--skip-bench", lock_ttl_s=5)
        try:
            def started() -> bool:
                for p in self.state.glob("fleetroll-*.json"):
                    doc = json.loads(p.read_text())
                    states = {x["host"]: x["state"] for x in doc["hosts"]}
                    if doc["state"] == "running" and states[host] == "in_progress":
                        return True
                return False

            assert until(started, 600), proc.stdout.read() if proc.stdout else ""
            time.sleep(1.5)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()

    def host_env(self, name: str) -> DeployEnv:
        """The fleet's environment, with `ssh`/`ct` reaching host `name`."""
        (info,) = [i for i in self.infos if i.name == name]
        return replace(self.env, sim=info)

    def faults(self, host: str, **knobs: Any) -> None:
        from simulator.manager.faults import set_faults

        set_faults(self.root, host, **knobs)

    def ct_faults(self, host: str, vmid: int = 120, **knobs: Any) -> None:
        from simulator.manager.faults import set_ct_faults

        set_ct_faults(self.root, host, vmid, **knobs)

    def clear_faults(self, host_knobs: bool = True, ct_knobs: bool = False) -> None:
        """Every host without the faults fleet tests set (the containers and their releases stay)."""
        for name in self.names:
            if host_knobs:
                self.faults(name, **HOST_FAULTS_OFF)
            if ct_knobs:
                self.ct_faults(name, **CT_FAULTS_OFF)

    def sglang_active(self, host: str) -> str:
        """systemd's word for host `host`'s server unit in CT 120 (`active`, `failed`, …)."""
        return self.host_env(host).ct("systemctl is-active sglang || true").stdout.strip()

    def releases(self, group: str = "prod") -> dict[str, str]:
        """Each host's current release, as `status group` reports it."""
        doc = self.env.run("--json", "status", "group", group).json
        return {h["host"]: h["report"]["release"] for h in doc["hosts"]}

    def address(self, name: str) -> str:
        """Host `name`'s node address in the inventory (SSH and the PVE API; servers are reached at container
        addresses: `worker_urls`)."""
        from orchestrator.inventory.loader import load_inventory

        return load_inventory(self.env.inventory).hosts[name].address


@contextlib.contextmanager
def fleet_root(tmp_path_factory: pytest.TempPathFactory, name: str, offset: int, hosts: int,
               groups: Callable[[list[str]], dict[str, list[str]]] | None = None,
               **options: Any) -> Iterator[FleetHarness]:
    """`hosts` simulated hosts from `offset`, their inventory on the site template; `groups(names)` gives its
    groups (default: prod = all); `options` go to sim_up (`cluster="lab"`: the hosts are nodes of one cluster)."""
    with sim_root(tmp_path_factory, name, offset, hosts=hosts, **options) as (root, infos):
        names = [i.name for i in infos]
        env = make_fleet_env(infos, tmp_path_factory.mktemp(f"{name}-env"),
                             groups(names) if groups else None, site_ostemplate(infos))
        yield FleetHarness(env=env, names=names, root=root, infos=infos)


@dataclass
class RoutedFleet(FleetHarness):
    """A fleet behind a router the test started itself (the real sglang-router 0.3.2), named in router.yaml."""

    router: str = ""
    urls: dict[str, str] = field(default_factory=dict)

    def listed(self) -> dict[str, bool]:
        """Which hosts the router lists as healthy workers."""
        from orchestrator.router.client import RouterClient

        with RouterClient(self.router) as client:
            healthy = {w.url for w in client.list_workers() if w.healthy}
        return {name: url in healthy for name, url in self.urls.items()}

    def back_in_router(self) -> None:
        """Put every host back (a failed host is left out on purpose) and wait until all are healthy."""
        from orchestrator.router.client import RouterClient

        with RouterClient(self.router) as client:
            for url in self.urls.values():
                if client.find(url) is None:
                    client.add_worker(url)
        assert until(lambda: all(self.listed().values()), 120), self.listed()


def worker_urls(fleet: FleetHarness) -> dict[str, str]:
    """Each host's server URL as the router reaches it: its container's address on the site network, read from
    inside each container by the tool's own code (a DHCP lease), never a node address."""
    from orchestrator.inventory.loader import load_inventory
    from orchestrator.router.addresses import learn
    from orchestrator.router.places import worker_url

    inv = load_inventory(fleet.env.inventory)
    site = learn([(inv.hosts[n], inv.hosts[n].container.vmid) for n in fleet.names])
    return {n: worker_url(inv, inv.hosts[n], site) for n in fleet.names}
