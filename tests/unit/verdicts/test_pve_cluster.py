"""A Proxmox cluster's VMIDs: the parser of `/cluster/status` + `/cluster/resources` and the judgement of one
host's VMID against its cluster and the inventory (orchestrator/verdicts/cluster.py)."""

from __future__ import annotations

import json

import pytest

from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import Host, Inventory
from orchestrator.parsers import ParseError
from orchestrator.parsers.pve import ClusterNode, ClusterView, parse_cluster_view
from orchestrator.verdicts.cluster import cluster_mates, free_vmids, vmid_conflict
from tests.shared import EXAMPLE_INVENTORY

#: /cluster/status of a 3-node cluster `lab`, asked on node b: the fields of pve-manager's schema for it
#: (simulator/pve/pve-api-schema.json.gz), as `pvesh --output-format json` prints them.
STATUS = [
    {"id": "cluster", "name": "lab", "nodes": 3, "quorate": 1, "type": "cluster", "version": 3},
    {"id": "node/a", "ip": "10.0.0.1", "level": "", "local": 0, "name": "a", "nodeid": 1, "online": 1,
     "type": "node"},
    {"id": "node/b", "ip": "10.0.0.2", "level": "", "local": 1, "name": "b", "nodeid": 2, "online": 1,
     "type": "node"},
    {"id": "node/c", "ip": "10.0.0.3", "level": "", "local": 0, "name": "c", "nodeid": 3, "online": 1,
     "type": "node"},
]
STANDALONE = [{"id": "node/pve", "ip": "10.0.0.9", "level": "", "local": 1, "name": "pve", "nodeid": 0,
               "online": 1, "type": "node"}]


def fact(status: list[dict[str, object]], vms: list[dict[str, object]]) -> str:
    return f"{json.dumps(status)}\n\n{json.dumps(vms)}\n"


def test_cluster_status_and_its_vmids_are_parsed() -> None:
    view = parse_cluster_view(fact(STATUS, [{"id": "lxc/120", "node": "a", "type": "lxc", "vmid": 120},
                                            {"id": "qemu/101", "node": "c", "type": "qemu", "vmid": 101}]))
    assert view.name == "lab" and view.clustered and view.quorate
    assert view.nodes == (ClusterNode("a", "10.0.0.1", False), ClusterNode("b", "10.0.0.2", True),
                          ClusterNode("c", "10.0.0.3", False))
    assert view.guests == {120: "a", 101: "c"}


def test_a_standalone_node_and_a_lost_quorum() -> None:
    alone = parse_cluster_view(fact(STANDALONE, []))
    assert alone.name is None and not alone.clustered and alone.quorate and len(alone.nodes) == 1
    lost = parse_cluster_view(fact([{**STATUS[0], "quorate": 0}, *STATUS[1:]], []))
    assert lost.clustered and not lost.quorate


def test_unreadable_cluster_output_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_cluster_view("ipcc_send_rec[1] failed: Connection refused\n")
    with pytest.raises(ParseError):
        parse_cluster_view(json.dumps(STATUS))  # the resources line missing


@pytest.fixture(scope="module")
def inventory() -> Inventory:
    return load_inventory(EXAMPLE_INVENTORY)


def host(inventory: Inventory, name: str, node: str, address: str, vmid: int) -> Host:
    base = inventory.hosts["pve-gpu-1"]
    return base.model_copy(update={"name": name, "address": address,
                                   "pve": base.pve.model_copy(update={"node": node}),
                                   "container": base.container.model_copy(update={"vmid_setting": vmid})})


def view(guests: dict[int, str] | None = None) -> ClusterView:
    return parse_cluster_view(fact(STATUS, [{"vmid": v, "node": n, "type": "lxc"} for v, n in (guests or {}).items()]))


def test_two_hosts_of_one_cluster_on_one_vmid_are_named_with_free_vmids(inventory: Inventory) -> None:
    hosts = {"gpu-a": host(inventory, "gpu-a", "a", "10.0.0.1", 120),
             "gpu-b": host(inventory, "gpu-b", "b", "10.0.0.2", 120),
             "gpu-c": host(inventory, "gpu-c", "c", "10.0.0.3", 122)}
    conflict = vmid_conflict(hosts["gpu-b"], view({121: "c"}), hosts)
    assert conflict is not None
    assert conflict.what.startswith("hosts gpu-b and gpu-a are nodes of one Proxmox cluster (lab) and both use "
                                    "VMID 120")
    assert "free in the cluster now: 123, 124, 125" in conflict.fix and "vmid: auto" in conflict.fix
    assert conflict.details["hosts"] == ["gpu-b", "gpu-a"] and conflict.details["free_vmids"] == [123, 124, 125]
    assert vmid_conflict(hosts["gpu-c"], view({121: "c"}), hosts) is None  # its own VMID


def test_a_vmid_another_node_has_is_refused_even_outside_the_inventory(inventory: Inventory) -> None:
    me = host(inventory, "gpu-b", "b", "10.0.0.2", 120)
    conflict = vmid_conflict(me, view({120: "c"}), {"gpu-b": me})
    assert conflict is not None and "belongs to a guest on node c of cluster lab" in conflict.what
    assert "`CT 120 already exists on node 'c'`" in conflict.what
    assert vmid_conflict(me, view({120: "b"}), {"gpu-b": me}) is None  # CT 120 on this very node: ours


def test_standalone_nodes_never_conflict(inventory: Inventory) -> None:
    a, b = host(inventory, "x", "pve", "10.0.0.9", 120), host(inventory, "y", "pve", "10.0.0.8", 120)
    alone = parse_cluster_view(fact(STANDALONE, []))
    assert vmid_conflict(a, alone, {"x": a, "y": b}) is None


def test_a_node_name_at_another_address_is_another_cluster(inventory: Inventory) -> None:
    me = host(inventory, "gpu-b", "b", "10.0.0.2", 120)
    other = host(inventory, "elsewhere", "a", "192.168.5.1", 120)  # a node `a` of some other cluster
    by_name = host(inventory, "dns", "c", "gpu-c.example", 120)  # a DNS name: the node name decides
    assert [h.name for h in cluster_mates(view(), me, {"gpu-b": me, "elsewhere": other, "dns": by_name})] == ["dns"]


def test_free_vmids_skip_every_taken_one() -> None:
    assert free_vmids({100, 101, 103}, 100) == [102, 104, 105]
    assert free_vmids(set(), 7, count=2) == [100, 101]


def test_auto_vmid_read_is_parsed() -> None:
    from orchestrator.parsers.pve import AUTO_VMID_MARK, parse_auto_vmid

    read = parse_auto_vmid(f"123\n{AUTO_VMID_MARK}\n\"104\"\n{fact(STATUS, [])}")
    assert read.recorded == 123 and read.nextid == 104 and read.cluster.name == "lab"
    none = parse_auto_vmid(f"{AUTO_VMID_MARK}\n104\n{fact(STANDALONE, [])}")  # no record; nextid as an integer
    assert none.recorded is None and none.nextid == 104 and not none.cluster.clustered
    assert parse_auto_vmid(f"garbage\n{AUTO_VMID_MARK}\n104\n{fact(STANDALONE, [])}").recorded is None
    with pytest.raises(ParseError):
        parse_auto_vmid(f"{AUTO_VMID_MARK}\nno quorum\n")


def auto(inventory: Inventory, name: str, node: str, address: str) -> Host:
    h = host(inventory, name, node, address, 100)
    return h.model_copy(update={"container": h.container.model_copy(update={"vmid_setting": "auto"})})


def test_auto_hosts_of_one_cluster_choose_distinct_free_vmids(inventory: Inventory) -> None:
    from orchestrator.verdicts.cluster import choose_vmid

    hosts = {"gpu-a": auto(inventory, "gpu-a", "a", "10.0.0.1"), "gpu-b": auto(inventory, "gpu-b", "b", "10.0.0.2"),
             "gpu-c": host(inventory, "gpu-c", "c", "10.0.0.3", 105)}
    seen = view({104: "c"})  # nextid 104; 105 the numbered host's
    assert [choose_vmid(hosts[n], seen, 104, hosts) for n in ("gpu-a", "gpu-b")] == [106, 107]
    # a numbered host's VMID is checked against the auto ones only once they are resolved: until then, unknown
    assert vmid_conflict(hosts["gpu-c"], seen, hosts) is None


def test_auto_is_a_vmid_choice_and_anything_else_is_refused(inventory: Inventory) -> None:
    from pydantic import ValidationError

    from orchestrator.errors import ConfigError

    spec = inventory.hosts["pve-gpu-1"].container
    data = {**spec.model_dump(by_alias=True), "vmid": "auto"}
    chosen = type(spec).model_validate(data)
    assert chosen.vmid_auto and chosen.with_vmid(131).vmid == 131
    with pytest.raises(ConfigError) as err:
        _ = chosen.vmid  # never a placeholder: unresolved, it says how to resolve it
    assert "deploy up" in err.value.fix
    for bad in ("next", 99, True):
        with pytest.raises(ValidationError, match="a VMID is a number from 100 to 999999999, or auto"):
            type(spec).model_validate({**data, "vmid": bad})
