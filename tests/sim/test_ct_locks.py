"""PVE's config locks on the simulated node: `lock: create` while a create task runs, the calls that check a lock
(texts of pve-guest-common's check_lock), `pct list`'s Lock column, `pct unlock`, vzdump's `backup` lock."""

from __future__ import annotations

import time
from typing import Any

import pytest
from proxmoxer import ResourceException
from proxmoxer.tools import Tasks

from simulator.manager.faults import set_faults
from tests.sim.conftest import TEMPLATE

pytestmark = pytest.mark.e2e


def lock_by_hand(ssh: Any, vmid: int, lock: str) -> None:
    """A lock left behind (the node restarted mid-task): the line as PVE writes it in the config."""
    assert ssh.run(f"echo 'lock: {lock}' >> /etc/pve/lxc/{vmid}.conf").rc == 0


def test_create_holds_the_create_lock_until_the_archive_is_unpacked(prox: Any, ssh: Any, sim: Any) -> None:
    # The unpack is held at its end (task_hold) while the test looks: on a loaded machine it used to finish before
    # the `cat` below ran, and the test saw the finished config.
    root = sim.host_dir.parent.parent
    set_faults(root, sim.name, task_hold="vzcreate")
    try:
        upid = prox.nodes(sim.node).lxc.post(vmid=160, ostemplate=TEMPLATE, hostname="ct160", unprivileged=0)
        # create_and_lock_config ran before the worker: the config is the lock alone until the unpack ended
        assert ssh.run("cat /etc/pve/lxc/160.conf").out == "lock: create\n"
        assert prox.nodes(sim.node).lxc(160).config.get()["lock"] == "create"
        running = prox.nodes(sim.node).tasks.get(source="active", typefilter="vzcreate", vmid=160)
        assert [(t["upid"], t["status"]) for t in running] == [(upid, "RUNNING")]
        assert all(t["upid"] != upid for t in prox.nodes(sim.node).tasks.get(typefilter="vzcreate"))  # archive only
        # The unpack ends, and the task stops at its hold point (it cannot pass it): still `lock: create` there.
        deadline = time.monotonic() + 120
        while not any(line["t"].startswith("Detected OS distribution")
                      for line in prox.nodes(sim.node).tasks(upid).log.get()):
            assert time.monotonic() < deadline, "the unpack did not end within 120 s"
            time.sleep(0.1)
        assert ssh.run("cat /etc/pve/lxc/160.conf").out == "lock: create\n"
    finally:
        set_faults(root, sim.name, task_hold=None)
    assert Tasks.blocking_status(prox, upid, polling_interval=0.1)["exitstatus"] == "OK"
    conf = prox.nodes(sim.node).lxc(160).config.get()
    assert "lock" not in conf and conf["hostname"] == "ct160"
    assert prox.nodes(sim.node).tasks.get(source="active", typefilter="vzcreate", vmid=160) == []
    assert [t["status"] for t in prox.nodes(sim.node).tasks.get(typefilter="vzcreate", vmid=160)] == ["OK"]


def test_a_failed_create_removes_the_locked_ct(prox: Any, sim: Any, ssh: Any) -> None:
    root = sim.host_dir.parent.parent
    set_faults(root, sim.name, task_fail="vzcreate")
    try:
        upid = prox.nodes(sim.node).lxc.post(vmid=161, ostemplate=TEMPLATE, unprivileged=0)
        assert Tasks.blocking_status(prox, upid, polling_interval=0.1)["exitstatus"].startswith(
            "unable to create CT 161 - ")
    finally:
        set_faults(root, sim.name, task_fail=None)
    assert ssh.run("test -e /etc/pve/lxc/161.conf || echo gone").out == "gone\n"


def test_a_locked_ct_refuses_what_pve_refuses_until_pct_unlock(ssh: Any, make_ct: Any, prox: Any,
                                                               sim: Any) -> None:
    assert make_ct(162).rc == 0
    lock_by_hand(ssh, 162, "create")
    assert "162        stopped    create       ct162               " in ssh.run("pct list").out.splitlines()
    assert "lock: create" in ssh.run("pct config 162").out.splitlines()
    # start checks the lock in its worker: the task fails (pct prints it, exit 255) …
    res = ssh.run("pct start 162")
    assert (res.rc, res.err) == (255, "CT is locked (create)\n")
    upid = prox.nodes(sim.node).lxc(162).status.start.post()
    assert Tasks.blocking_status(prox, upid, polling_interval=0.1)["exitstatus"] == "CT is locked (create)"
    # … config changes and destroy check it before any worker: the call fails, HTTP 500 over the API
    for command in ("pct set 162 --cores 3", "pct destroy 162", "pct set 162 --delete lock"):
        res = ssh.run(command)
        assert (res.rc, res.err) == (255, "CT is locked (create)\n"), command
    for call in (lambda: prox.nodes(sim.node).lxc(162).config.put(cores=3),
                 lambda: prox.nodes(sim.node).lxc(162).delete()):
        with pytest.raises(ResourceException) as err:
            call()
        assert err.value.status_code == 500 and "CT is locked (create)" in err.value.content
    assert "ERROR: Backup of VM 162 failed - CT is locked (create)" in ssh.run(
        "vzdump 162 --mode stop --dumpdir /tmp").out
    # root may start past it (skiplock); a token may not
    with pytest.raises(ResourceException) as err:
        prox.nodes(sim.node).lxc(162).status.start.post(skiplock=1)
    assert err.value.status_code == 400 and "Only root may use this option." in str(err.value)
    assert ssh.run("pct unlock 162").rc == 0
    assert "lock" not in prox.nodes(sim.node).lxc(162).config.get()
    res = ssh.run("pct unlock 162")
    assert (res.rc, res.err) == (255, "no lock found trying to remove any lock\n")
    assert ssh.run("pct start 162 && pct status 162").out.endswith("status: running\n")
    assert ssh.run("pct stop 162").rc == 0


def test_vzdump_locks_the_ct_while_it_dumps_and_unlocks_it(ssh: Any, make_ct: Any) -> None:
    assert make_ct(163).rc == 0
    res = ssh.run("mkdir -p /tmp/dumps && vzdump 163 --mode stop --dumpdir /tmp/dumps", timeout=120)
    assert res.rc == 0, res.err
    assert "lock" not in ssh.run("pct config 163").out
    lock_by_hand(ssh, 163, "backup")  # what a dump cut short leaves: the next dump and a start are refused
    assert "CT is locked (backup)" in ssh.run("vzdump 163 --mode stop --dumpdir /tmp/dumps").out
    assert ssh.run("pct start 163").err == "CT is locked (backup)\n"
