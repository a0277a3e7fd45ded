"""The `cluster` step in-process: a VMID another host of the cluster uses, or a lost quorum, stops the run before
any change (no node command beyond the facts)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.errors import ConfigError, RemoteError
from tests.unit.verdicts.test_pve_cluster import STATUS, fact


def _cluster_run(make_run: Any, status: list[dict[str, Any]], vms: list[dict[str, Any]], mate_vmid: int) -> Any:
    run = make_run({"cluster": fact(status, vms)})
    me = run.ctx.host.model_copy(update={"address": "10.0.0.2",
                                         "pve": run.ctx.host.pve.model_copy(update={"node": "b"})})
    mate = me.model_copy(update={"name": "gpu-a", "address": "10.0.0.1",
                                 "pve": me.pve.model_copy(update={"node": "a"}),
                                 "container": me.container.model_copy(update={"vmid_setting": mate_vmid})})
    run.ctx.host = me
    run.ctx.inventory = run.ctx.inventory.model_copy(update={"hosts": {me.name: me, "gpu-a": mate}})
    return run


def test_two_hosts_of_a_cluster_on_one_vmid_stop_before_any_change(make_run: Any) -> None:
    run = _cluster_run(make_run, STATUS, [], mate_vmid=120)
    with pytest.raises(ConfigError) as err:
        run.step("cluster")
    assert err.value.exit_code == 2
    assert "pve-gpu-1 and gpu-a are nodes of one Proxmox cluster (lab) and both use VMID 120" in err.value.what
    assert "121, 122, 123" in err.value.fix and "nothing was changed" in err.value.fix
    assert run.node.calls == []


def test_distinct_vmids_pass(make_run: Any) -> None:
    run = _cluster_run(make_run, STATUS, [{"vmid": 121, "node": "a", "type": "lxc"}], mate_vmid=121)
    record = run.step("cluster")
    assert record.summary == "node b of cluster lab (3 nodes, quorate); VMID 120 is this host's own"
    assert record.details["cluster"]["inventory_hosts"] == ["gpu-a"]


def test_a_lost_quorum_is_named(make_run: Any) -> None:
    run = _cluster_run(make_run, [{**STATUS[0], "quorate": 0}, *STATUS[1:]], [], mate_vmid=121)
    with pytest.raises(RemoteError) as err:
        run.step("cluster")
    assert "node b of cluster lab has no quorum" in err.value.what and "pvecm status" in err.value.fix
    assert err.value.details["cause"] == "no-quorum"


def test_a_standalone_node_is_not_checked(make_run: Any) -> None:
    alone = [{"id": "node/pve-gpu-1", "ip": "10.1.230.174", "local": 1, "name": "pve-gpu-1", "nodeid": 0,
              "online": 1, "type": "node"}]
    assert make_run({"cluster": f"{json.dumps(alone)}\n[]\n"}).step("cluster").summary == "standalone node"


def _auto_run(make_run: Any, **options: Any) -> Any:
    run = make_run(**options)
    host = run.ctx.host
    run.ctx.host = host.model_copy(update={"container": host.container.model_copy(update={"vmid_setting": "auto"})})
    run.ctx.playbook_steps = ["connect", "lock", "cluster", "container"]
    return run


def test_auto_vmid_is_chosen_once_and_recorded_on_the_node(make_run: Any, tmp_path: Any, monkeypatch: Any) -> None:
    from orchestrator.inventory.auto_vmids import recalled, with_recalled_vmids

    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path))
    run = _auto_run(make_run)
    unresolved = run.ctx.host
    alone = [{"id": "node/pve-gpu-1", "ip": "10.1.230.174", "local": 1, "name": "pve-gpu-1", "nodeid": 0,
              "online": 1, "type": "node"}]
    run.node.answer("@@deploy-auto-vmid@@", f"@@deploy-auto-vmid@@\n\"104\"\n{json.dumps(alone)}\n\n[]\n")
    run.node.succeed("mkdir -p /var/lib/deploy/auto-vmid")
    record = run.step("connect")
    assert run.ctx.vmid == 104 and run.ctx.ct.vmid == 104 and run.ctx.facts.host_cfg.container.vmid == 104
    assert record.details["vmid"] == {"auto": True, "vmid": 104,
                                      "how": "chosen from /cluster/nextid and recorded in "
                                             "/var/lib/deploy/auto-vmid/pve-gpu-1"}
    (write,) = [c for c in run.node.commands() if c.startswith("mkdir")]
    assert "printf '%s\\n' 104 > /var/lib/deploy/auto-vmid/pve-gpu-1.tmp" in write
    # this machine keeps a copy, for the commands that name the container without connecting (router, bench group)
    assert recalled(unresolved) == 104
    inventory = run.ctx.inventory.model_copy(update={"hosts": {unresolved.name: unresolved}})
    assert with_recalled_vmids(inventory).hosts[unresolved.name].container.vmid == 104
    moved = unresolved.model_copy(update={"address": "10.9.9.9"})
    assert recalled(moved) is None  # another machine at that name: not this one's VMID


def test_a_recorded_auto_vmid_stays_and_a_plan_records_nothing(make_run: Any, tmp_path: Any,
                                                               monkeypatch: Any) -> None:
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path))
    run = _auto_run(make_run, dry_run=True)
    run.node.answer("@@deploy-auto-vmid@@", f"131\n@@deploy-auto-vmid@@\n\"104\"\n{fact(STATUS, [])}")
    run.step("connect")
    assert run.ctx.vmid == 131 and not run.node.sent("mkdir")
    fresh = _auto_run(make_run, dry_run=True)
    fresh.node.answer("@@deploy-auto-vmid@@", f"@@deploy-auto-vmid@@\n\"104\"\n{fact(STATUS, [])}")
    assert "`up` records it" in fresh.step("connect").details["vmid"]["how"] and not fresh.node.sent("mkdir")
    assert [p.read_text() for p in (tmp_path / "auto-vmids").iterdir()] == ["10.1.230.174 pve-gpu-1 131\n"]
