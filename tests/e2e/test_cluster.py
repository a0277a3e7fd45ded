"""Three simulated nodes of one Proxmox cluster (`sim up --cluster lab`): VMIDs are unique across it.

An inventory that gives two hosts of the cluster one VMID is refused by each of them before any change (exit 2,
naming both hosts and free VMIDs); with distinct VMIDs (what `sim up --cluster` writes: 120, 121, 122) `up group`
converges all three. On the VMIDs `vmid: auto` chose, the fleet then runs behind the real smg (the SGLang
Model Gateway), managed by `up` in the first node's container: a canary roll drains each node's server from it
and loses no request, and `bench group` drives load through it and reports each node.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import DeployEnv, until
from tests.e2e.fleet_harness import FleetHarness, RoutedFleet, fleet_root, worker_urls
from tests.e2e.test_fleet_roll import FLAG, Client
from tests.e2e.test_fleet_smg import DRAIN
from tests.sim_hosts import OFFSET_FLEET

# The roll and the bench run three nodes' servers and a router on the shared 2-core machine.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetHarness]:
    with fleet_root(tmp_path_factory, "deploy-sim-cluster", OFFSET_FLEET, 3,
                    lambda names: {"prod": names, "pair": names[:2]}, cluster="lab") as fleet:
        yield fleet


def _conf(fleet: FleetHarness, name: str, vmid: int) -> Path:
    (info,) = [i for i in fleet.infos if i.name == name]
    return Path(info.host_dir) / "fs/etc/pve/lxc" / f"{vmid}.conf"


def test_two_hosts_of_one_cluster_on_one_vmid_are_refused_before_any_change(cluster: FleetHarness,
                                                                          tmp_path: Path) -> None:
    a, b, _c = cluster.names
    written = yaml.safe_load((cluster.env.inventory / "sim.yaml").read_text())["hosts"]
    assert [written[n]["container"]["vmid"] for n in cluster.names] == [120, 121, 122]  # what sim up writes
    env = _inventory_with(cluster, tmp_path, {b: 120})  # every example gives each host 120
    res = env.run("--json", "up", "group", "pair", "--skip-bench", "--skip-weights", timeout=600)
    assert res.rc == 2, res.text
    for name, other in ((a, b), (b, a)):
        (host,) = [h for h in res.json["hosts"] if h["host"] == name]
        report = host["report"]
        assert host["exit_code"] == 2 and report["step"] == "cluster", host
        assert (f"hosts {name} and {other} are nodes of one Proxmox cluster (lab) and both use VMID 120"
                in report["what"])
        assert "free in the cluster now: 121, 123, 124" in report["fix"]  # 122: the third host's
        assert "vmid: auto" in report["fix"] and "nothing was changed" in report["fix"]
        assert [s["name"] for s in report["steps"]][-1] == "cluster"
    assert not _conf(cluster, a, 120).exists() and not _conf(cluster, b, 120).exists()  # nothing was created


def test_up_group_on_a_cluster_with_distinct_vmids(cluster: FleetHarness) -> None:
    res = cluster.env.run("--json", "up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
    assert res.rc == 0, res.text
    for name, vmid in zip(cluster.names, (120, 121, 122), strict=True):
        (host,) = [h for h in res.json["hosts"] if h["host"] == name]
        steps = {s["name"]: s for s in host["report"]["steps"]}
        assert steps["cluster"]["summary"].endswith(f"of cluster lab (3 nodes, quorate); VMID {vmid} is this "
                                                    "host's own"), steps["cluster"]
        assert _conf(cluster, name, vmid).exists()


def test_an_ha_managed_start_is_waited_for(cluster: FleetHarness) -> None:
    a = cluster.names[0]
    cluster.host_env(a).ssh("pct stop 120")
    cluster.ct_faults(a, 120, ha_managed=True, ha_delay_s=3.0)  # its start: a request the HA manager acts on later
    try:
        res = cluster.env.run("up", "host", a, "--skip-bench", "--skip-weights", timeout=600)
    finally:
        cluster.ct_faults(a, 120, ha_managed=False)
    assert res.rc == 0, res.text
    assert "CT 120 is HA-managed: its start is a request to the HA manager; waiting until it is running" in res.stdout
    assert cluster.sglang_active(a) == "active"


def _inventory_with(cluster: FleetHarness, tmp_path: Path, vmids: dict[str, int | str]) -> DeployEnv:
    """The fleet's environment on a copy of its inventory whose hosts have these VMIDs."""
    inventory = tmp_path / "inventory"
    shutil.copytree(cluster.env.inventory, inventory)
    hosts = yaml.safe_load((inventory / "sim.yaml").read_text())
    for name, vmid in vmids.items():
        hosts["hosts"][name]["container"]["vmid"] = vmid
    (inventory / "sim.yaml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    return replace(cluster.env, inventory=inventory, env={**cluster.env.env, "DEPLOY_INVENTORY": str(inventory)})


def test_up_group_with_auto_vmids_chooses_free_ones_and_keeps_them(cluster: FleetHarness, tmp_path: Path) -> None:
    for name, vmid in zip(cluster.names, (120, 121, 122), strict=True):  # the previous test's CTs: not needed
        cluster.host_env(name).ssh(f"pct stop {vmid}; pct destroy {vmid}")
    env = _inventory_with(cluster, tmp_path, dict.fromkeys(cluster.names, "auto"))
    plan = env.run("--json", "plan", "group", "prod", timeout=600)
    assert plan.rc == 0, plan.text
    res = env.run("--json", "up", "group", "prod", "--skip-bench", "--skip-weights", timeout=900)
    assert res.rc == 0, res.text
    chosen = {}
    for host in res.json["hosts"]:
        steps = {s["name"]: s for s in host["report"]["steps"]}
        chosen[host["host"]] = steps["connect"]["details"]["vmid"]["vmid"]
        assert "recorded in /var/lib/deploy/auto-vmid/" in steps["connect"]["details"]["vmid"]["how"]
    assert chosen == dict(zip(cluster.names, (100, 101, 102), strict=True))  # /cluster/nextid's, one each
    for name, vmid in chosen.items():
        assert _conf(cluster, name, vmid).exists()
        assert cluster.host_env(name).ssh(f"cat /var/lib/deploy/auto-vmid/{name}").stdout.strip() == str(vmid)
    again = env.run("--json", "up", "group", "prod", "--skip-bench", "--skip-weights", timeout=600)
    assert again.rc == 0 and again.json["changed"] is False, again.text
    assert {h["host"]: {s["name"]: s for s in h["report"]["steps"]}["connect"]["details"]["vmid"]["vmid"]
            for h in again.json["hosts"]} == chosen
    # a command that names the container without connecting (render, the router's addresses, bench group) takes
    # the VMID this machine read from the node
    a = cluster.names[0]
    devices, proc = tmp_path / "devices.txt", tmp_path / "proc-devices.txt"
    devices.write_text(cluster.host_env(a).ssh("ls -l /dev/nvidia* /dev/nvidia-caps/*").stdout)
    proc.write_text(cluster.host_env(a).ssh("cat /proc/devices").stdout)
    render = env.run("render", "host", a, "--devices-file", str(devices), "--proc-devices-file", str(proc))
    assert render.rc == 0 and f"/etc/pve/lxc/{chosen[a]}.conf" in render.stdout, render.text


@pytest.fixture(scope="module")
def routed(cluster: FleetHarness, tmp_path_factory: pytest.TempPathFactory) -> RoutedFleet:
    """The cluster on the VMIDs `vmid: auto` chose (the auto test's containers, file order) behind smg in the
    first node's container, converged by `up group` on a copy of the inventory (the module's later tests see no
    router)."""
    a = cluster.names[0]
    vmids = {n: int(cluster.host_env(n).ssh(f"cat /var/lib/deploy/auto-vmid/{n}").stdout.strip() or 0)
             for n in cluster.names}
    assert all(vmids.values()), f"the auto-VMID test runs first and leaves its containers: {vmids}"
    env = _inventory_with(cluster, tmp_path_factory.mktemp("cluster-routed"), dict.fromkeys(cluster.names, "auto"))
    (env.inventory / "router.yaml").write_text(
        f"router:\n  package: smg\n  runs_on: {a}\n  policy: round_robin\n  workers: prod\n")
    res = env.run("--json", "up", "group", "prod", "--skip-bench", "--skip-weights", timeout=1200)
    assert res.rc == 0, res.text
    router = res.json["router"]
    assert router["place"] == f"{a} CT {vmids[a]}" and router["workers"] == cluster.names, router
    numbered = _inventory_with(cluster, tmp_path_factory.mktemp("cluster-numbered"), dict(vmids))
    urls = worker_urls(replace(cluster, env=numbered))
    assert len(set(urls.values())) == 3, urls  # three containers, three addresses on the site network
    fleet = RoutedFleet(env=env, names=cluster.names, root=cluster.root, infos=cluster.infos,
                        router=f"http://{urls[a].rsplit(':', 1)[0].split('//', 1)[1]}:30000", urls=urls)
    assert until(lambda: all(fleet.listed().values()), 120), fleet.listed()
    return fleet


def test_canary_roll_on_a_cluster_drains_each_node_behind_the_router(routed: RoutedFleet) -> None:
    before = routed.releases()
    with Client(routed.router) as client:
        assert until(lambda: client.ok >= 2, 60), client.failed[:5]
        res = routed.env.run("--json", "roll", "group", "prod", "--set", f"{FLAG}=4", "--canary", "1",
                             "--batch", "1", "--max-unavailable", "1", "--skip-bench", timeout=1200)
    assert res.rc == 0, res.text
    assert res.json["roll"]["waves"] == [[n] for n in routed.names]
    hosts = {h["host"]: h for h in res.json["hosts"]}
    after = routed.releases()
    drains = {}
    for name in routed.names:
        h = hosts[name]
        assert h["result"] == "rolled" and h["release"] == after[name] != before[name], h
        m = DRAIN.search(h["router"])  # the roll waited on smg's own count of the node's requests
        assert m is not None and "back in the router, healthy" in h["router"], h
        drains[name] = float(m.group(1))
    print("cluster roll: per-node drain (s):", drains, "requests:", client.ok)  # the docs' figure (pytest -s)
    assert all(routed.listed().values())
    assert client.ok > 5 and client.failed == [], (client.ok, client.failed[:5])
    assert routed.env.run("status", "group", "prod").stdout.count("router: healthy") == 3


def test_bench_group_on_a_cluster_goes_through_the_router_to_every_node(routed: RoutedFleet) -> None:
    res = routed.env.run("--json", "bench", "group", "prod", timeout=900)
    assert res.rc == 0, res.text
    (point,) = res.json["points"]
    assert res.json["client"] == routed.names[0] and point["router"] == routed.router
    assert point["total"]["failed"] in (0, None)
    hosts = {h["host"]: h for h in point["hosts"]}
    assert sorted(hosts) == sorted(routed.names)
    for h in hosts.values():  # round_robin: every node's server took a share, its GPUs sampled
        assert h["output_tokens"] > 0 and h["mean_power_w"] > 0, h
    print("cluster bench:", {"total_tok_s": point["total"]["output_tok_s"],  # the docs' figure (pytest -s)
                             **{n: (h["output_tok_s"], h["mean_power_w"]) for n, h in hosts.items()}})


def test_a_node_without_quorum_is_named_before_any_change(cluster: FleetHarness) -> None:
    a = cluster.names[0]
    cluster.faults(a, no_quorum=True)
    try:
        res = cluster.env.run("--json", "up", "host", a, "--skip-bench", "--skip-weights", timeout=300)
    finally:
        cluster.faults(a, no_quorum=False)
    assert res.rc == 3, res.text
    doc = res.json
    assert doc["step"] == "cluster" and f"node {a} of cluster lab has no quorum" in doc["what"]
    assert "pvecm status" in doc["fix"] and doc["details"]["cause"] == "no-quorum"
