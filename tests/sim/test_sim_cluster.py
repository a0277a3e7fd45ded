"""A simulated Proxmox cluster (`sim up --cluster NAME`): one VMID list, `pct` local to its node, any node's API
serving the others' `/nodes/<node>/…`, `/cluster/*` across the nodes, and a node that lost quorum."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from simulator.manager.faults import set_faults
from tests.conftest import sim_root
from tests.sim.conftest import TEMPLATE, Ssh
from tests.sim_hosts import OFFSET_FLEET

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, list[Any]]]:
    with sim_root(tmp_path_factory, "deploy-sim-cluster", OFFSET_FLEET, hosts=3, cluster="lab") as (root, infos):
        yield root, infos


def _get(info: Any, path: str, **params: Any) -> requests.Response:
    secret = info.token_secret_file.read_text().strip()
    return requests.get(f"https://{info.address}:{info.api_port}/api2/json{path}", params=params, timeout=15,
                        verify=str(info.ca_file), headers={"Authorization": f"PVEAPIToken={info.token_id}={secret}"})


def _create(ssh: Ssh, vmid: int) -> Any:
    return ssh.run(f"pct create {vmid} {TEMPLATE} --hostname ct{vmid} --rootfs local-lvm:8 --unprivileged 0",
                   timeout=120)


def test_one_vmid_list_and_pct_local_to_its_node(cluster: tuple[Any, list[Any]]) -> None:
    _root, (a, b, c) = cluster
    on_a, on_b = Ssh(a), Ssh(b)
    try:
        assert _create(on_a, 120).rc == 0
        taken = _create(on_b, 120)  # pve-cluster's check_vmid_unused, before anything is made on B
        assert taken.rc != 0 and taken.err.strip() == f"CT 120 already exists on node '{a.node}'", taken
        assert not (b.host_dir / "fs/etc/pve/lxc/120.conf").exists()
        config = on_b.run("pct config 120")
        assert config.rc != 0 and f"Configuration file 'nodes/{b.node}/lxc/120.conf' does not exist" in config.err
        # B's API serves A's CT (pveproxy proxies /nodes/<other>/…), and pvesh on B does too
        status = _get(b, f"/nodes/{a.node}/lxc/120/status/current")
        assert status.status_code == 200 and status.json()["data"]["status"] == "stopped"
        via_pvesh = on_b.run(f"pvesh get /nodes/{a.node}/lxc/120/config --output-format json")
        assert via_pvesh.rc == 0 and json.loads(via_pvesh.out)["hostname"] == "ct120"
        # the cluster's views, from any node
        members = _get(c, "/cluster/status").json()["data"]
        assert members[0] == {"type": "cluster", "id": "cluster", "name": "lab", "nodes": 3, "quorate": 1,
                              "version": 3}
        assert [(m["name"], m["local"]) for m in members[1:]] == [(a.node, 0), (b.node, 0), (c.node, 1)]
        vms = _get(c, "/cluster/resources", type="vm").json()["data"]
        assert [(v["vmid"], v["node"]) for v in vms] == [(120, a.node)]
        assert _get(c, "/cluster/nextid").json()["data"] == "100"
        assert _get(c, "/cluster/nextid", vmid=120).status_code == 400
        assert _get(b, "/nodes/nowhere/lxc").status_code == 595  # a name outside the cluster does not resolve
    finally:
        on_a.run("pct destroy 120")
        on_a.close()
        on_b.close()


def test_a_node_without_quorum_refuses_writes(cluster: tuple[Any, list[Any]]) -> None:
    root, (a, b, _c) = cluster
    set_faults(root, b.name, no_quorum=True)
    on_b = Ssh(b)
    try:
        refused = _create(on_b, 130)
        assert refused.rc != 0 and "cluster not ready - no quorum?" in refused.err, refused
        assert _get(b, "/cluster/status").json()["data"][0]["quorate"] == 0
        assert _get(a, "/cluster/status").json()["data"][0]["quorate"] == 1
        assert not (b.host_dir / "fs/etc/pve/lxc/130.conf").exists()
    finally:
        set_faults(root, b.name, no_quorum=False)
        on_b.close()


def test_standalone_node_lists_only_itself(sim: Any) -> None:
    members = _get(sim, "/cluster/status").json()["data"]
    assert [(m["type"], m["name"], m["nodeid"], m["local"]) for m in members] == [("node", sim.node, 0, 1)]


def test_an_ha_managed_ct_starts_after_its_request_returns(cluster: tuple[Any, list[Any]]) -> None:
    from simulator.manager.faults import set_ct_faults
    from tests.e2e.conftest import until

    root, (_a, _b, c) = cluster
    on_c = Ssh(c)
    secret = c.token_secret_file.read_text().strip()
    auth = {"Authorization": f"PVEAPIToken={c.token_id}={secret}"}
    base = f"https://{c.address}:{c.api_port}/api2/json/nodes/{c.node}/lxc/121"

    def status() -> str:
        return str(_get(c, f"/nodes/{c.node}/lxc/121/status/current").json()["data"]["status"])

    try:
        assert _create(on_c, 121).rc == 0
        set_ct_faults(root, c.name, 121, ha_managed=True, ha_delay_s=5.0)
        upid = requests.post(f"{base}/status/start", headers=auth, verify=str(c.ca_file), timeout=15).json()["data"]
        assert f":hastart:121:{c.token_id}:" in upid
        task = until(lambda: (t := _get(c, f"/nodes/{c.node}/tasks/{upid}/status").json()["data"])["status"]
                     == "stopped" and t, 10)
        assert task and task["exitstatus"] == "OK"
        assert status() == "stopped"  # the request is made; the HA manager has not acted yet
        assert until(lambda: status() == "running", 30)
        assert _get(c, f"/nodes/{c.node}/lxc/121/status/current").json()["data"]["ha"] == {"managed": 1}
        log = _get(c, f"/nodes/{c.node}/tasks/{upid}/log").json()["data"]
        assert log[0]["t"] == "Requesting HA start for CT 121"
        stop = requests.post(f"{base}/status/shutdown", headers=auth, verify=str(c.ca_file), timeout=15).json()
        assert ":hastop:121:" in stop["data"]
        assert until(lambda: status() == "stopped", 60)
    finally:
        on_c.run("pct stop 121 2>/dev/null; pct destroy 121")
        on_c.close()
