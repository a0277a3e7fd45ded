"""Step `container`: create when absent, leave alone when converged, write only the config diff."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from orchestrator.errors import CheckFailed, ConfigError, RemoteError, TaskFailed
from orchestrator.facts import BOOT_UNSETTLED, CT, SETTLE_BOOT, settle_boot_script
from orchestrator.parsers.devices import nvidia_char_devices, parse_dev_listing
from orchestrator.parsers.pve import upid_type
from orchestrator.steps.container import base_config, bind_mounts, device_plan, lock_refusal, running_tasks
from orchestrator.verdicts.ownership import ownership_tag
from tests.unit.steps.conftest import with_container

DEV_LISTING = """\
crw-rw-rw- 1 root root 195,   0 Nov 30 10:00 /dev/nvidia0
crw-rw-rw- 1 root root 195,   1 Nov 30 10:00 /dev/nvidia1
crw-rw-rw- 1 root root 195, 255 Nov 30 10:00 /dev/nvidiactl
crw-rw-rw- 1 root root 508,   0 Nov 30 10:00 /dev/nvidia-uvm
crw-rw-rw- 1 root root 508,   1 Nov 30 10:00 /dev/nvidia-uvm-tools
"""
PROC_DEVICES = "Character devices:\n195 nvidia\n195 nvidiactl\n508 nvidia-uvm\n"
PVEVERSION = "pve-manager/8.3.0/c1689ccb1065a83b (running kernel: 6.8.12-4-pve)\n"
UPID = "UPID:pve-gpu-1:0000A1B2:0001C3D4:6745A1B2:"
TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
ONE_GPU = "index, uuid, name, pci.bus_id, driver_version\n0, GPU-1, NVIDIA RTX PRO 6000, 00000000:01:00.0, 595.58.03\n"


def host_facts(status: str, config: dict[str, object] | None = None) -> dict[str, str]:
    return {"ct_status": status, "ct_config": json.dumps(config or {}), "dev_listing": DEV_LISTING,
            "proc_devices": PROC_DEVICES, "pveversion": PVEVERSION,
            "templates": json.dumps([{"volid": TEMPLATE}]), "aplinfo": "[]"}


def pve_accepts(node) -> None:
    """PVE's answers to lifecycle calls through pvesh: a worker call prints its task id, the task ends OK, a
    config `set` prints nothing."""
    node.answer("pvesh create /nodes/pve-gpu-1/lxc", f'"{UPID}vzcreate:120:root@pam:"')
    node.answer("/status/", f'"{UPID}vzstart:120:root@pam:"')
    node.answer("/tasks/", '{"status": "stopped", "exitstatus": "OK"}')
    node.answer("pvesh set /nodes/pve-gpu-1/lxc/120/config", "")
    node.answer("pvesh create /nodes/pve-gpu-1/aplinfo", f'"{UPID}download:debian-12-standard:root@pam:"')


def converged_config(run) -> dict[str, object]:
    spec = run.ctx.host.container
    nodes = nvidia_char_devices(parse_dev_listing(DEV_LISTING))
    return {**base_config(spec), **device_plan({}, nodes)[0], **bind_mounts(run.ctx, {}), "digest": "d1",
            "tags": ownership_tag(run.ctx.host.name)}


def test_absent_container_is_created_with_every_device_then_started(make_run) -> None:  # and deploy's mark
    run = make_run(host_facts("Configuration file 'nodes/pve-gpu-1/lxc/120.conf' does not exist\n"))
    run.node.ct_after = {"gpus": ONE_GPU}
    pve_accepts(run.node)
    rec = run.step("container")
    assert rec.status == "changed"
    creates = [c for c in run.node.commands("run") if c.startswith("pvesh create /nodes/pve-gpu-1/lxc ")]
    assert len(creates) == 1
    assert "--vmid 120" in creates[0] and "--unprivileged 0" in creates[0]
    assert f"--tags {ownership_tag('pve-gpu-1')}" in creates[0]
    assert "--dev0 /dev/nvidia0" in creates[0] and "/dev/nvidia-uvm" in creates[0]
    assert run.node.sent("pvesh create /nodes/pve-gpu-1/lxc/120/status/start")
    assert any("create CT 120" in c for c in rec.changes) and "start CT 120" in rec.changes
    # After the start the container's facts are read again, in one round trip, once its boot has settled.
    [reread] = run.node.commands("batch")
    assert run.ctx.facts.ct_running and "systemctl is-system-running --wait" in reread


def _boot_settle(tmp_path, systemctl_body: str, script: str = SETTLE_BOOT) -> str:
    """What the boot-settle line prints, run by a real bash against a stand-in `systemctl`."""
    fake = tmp_path / "systemctl"
    fake.write_text(f"#!/bin/sh\n{systemctl_body}\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    res = subprocess.run(["bash", "-c", f"{script}\necho FACTS-READ"], capture_output=True, text=True,
                         env=env, timeout=30, check=True)
    return res.stdout


def test_boot_settle_reads_facts_only_once_systemd_says_running_or_degraded(tmp_path) -> None:
    assert _boot_settle(tmp_path, "echo running") == "FACTS-READ\n"
    assert _boot_settle(tmp_path, "echo degraded; exit 1") == "FACTS-READ\n"
    # a boot stuck in maintenance, or a systemd that never answered within the wait: no fact is read
    assert _boot_settle(tmp_path, "echo maintenance; exit 1") == f"{BOOT_UNSETTLED} maintenance\n"
    assert _boot_settle(tmp_path, "exit 1", settle_boot_script(1)) == f"{BOOT_UNSETTLED} no answer\n"


def test_boot_settle_asks_again_while_systemd_is_not_on_its_bus_yet(tmp_path) -> None:
    # Right after `pct start` (which does not wait) systemctl cannot reach systemd: no output, exit 1. That is a
    # boot in progress, not a verdict: asked again until systemd answers.
    calls = tmp_path / "calls"
    body = (f'echo x >> {calls}; [ "$(wc -l < {calls})" -ge 3 ] && {{ echo running; exit 0; }}; '
            'echo "Failed to connect to bus: No such file or directory" >&2; exit 1')
    assert _boot_settle(tmp_path, body) == "FACTS-READ\n"
    assert calls.read_text().count("x") == 3


def test_a_start_whose_boot_does_not_settle_is_a_clear_error(make_run) -> None:
    probe = make_run()
    run = make_run(host_facts("status: stopped\n", converged_config(probe)))
    pve_accepts(run.node)
    run.node.ct_after = {"gpus": ONE_GPU}
    run.node.ct_boot_unsettled = f"{BOOT_UNSETTLED} starting\n"
    with pytest.raises(CheckFailed) as err:
        run.step("container")
    assert "CT 120 did not finish booting within 120 s" in err.value.what and "'starting'" in err.value.what
    assert "systemctl list-jobs" in err.value.fix
    assert not run.ctx.facts.ct_running and run.ctx.facts.get(CT.gpus) is None  # nothing read half-booted


def test_converged_running_container_is_left_alone(make_run) -> None:
    probe = make_run()
    run = make_run(host_facts("status: running\n", converged_config(probe)), {})
    rec = run.step("container")
    assert rec.status == "ok" and rec.changes == []
    assert run.node.calls == []  # not one command: the facts already said everything


def test_config_diff_writes_only_the_differing_keys_with_the_digest(make_run) -> None:
    probe = make_run()
    config = {**converged_config(probe), "cores": "8"}
    run = make_run(host_facts("status: running\n", config), {})
    pve_accepts(run.node)
    # cores hot-apply: read back, nothing is left pending
    run.node.answer("/pending", json.dumps([{"key": "cores", "value": "64"}, {"key": "digest", "value": "d2"}]))
    rec = run.step("container")
    assert rec.status == "changed"
    assert rec.details["config_diff"] == ["cores: 8 → 64"]
    sets = [c for c in run.node.commands("run") if c.startswith("pvesh set /nodes/pve-gpu-1/lxc/120/config")]
    assert sets == ["pvesh set /nodes/pve-gpu-1/lxc/120/config --digest d1 --cores 64 --output-format json"]
    assert not run.node.sent("status/shutdown")  # cores hot-apply; only device changes need a restart


def test_plan_on_a_stopped_container_predicts_only_the_start(make_run) -> None:
    probe = make_run()
    run = make_run(host_facts("status: stopped\n", converged_config(probe)), dry_run=True)
    rec = run.step("container")
    assert rec.status == "would-change" and rec.changes == ["start CT 120"]
    assert run.node.calls == []


def test_the_adapter_quotes_every_argument_once() -> None:
    from orchestrator.remote.container import Container

    ct = Container(node=None, vmid=120)  # type: ignore[arg-type]  # builders only
    assert ct.exec_command(["cat", "/a b/$HOME"]) == "pct exec 120 -- cat '/a b/$HOME'"
    assert ct.shell_command("echo 'x'") == """pct exec 120 -- bash -c 'echo '"'"'x'"'"''"""
    assert ct.push_command("/r/i n.run", "/tmp/x", perms="0700") == "pct push 120 '/r/i n.run' /tmp/x --perms 0700"
    assert ct.pull_command("/var/lib/deploy/x y", "/tmp/z") == "pct pull 120 '/var/lib/deploy/x y' /tmp/z"
    assert ct.if_running("true").startswith("if pct status 120 2>/dev/null | grep -q 'status: running'; then true;")


def test_a_key_that_stays_pending_on_a_running_container_makes_plan_and_up_restart_it(make_run) -> None:
    probe = make_run()
    config = {**converged_config(probe), "features": "nesting=0"}
    plan = make_run(host_facts("status: running\n", config), {}, dry_run=True)
    rec = plan.step("container")
    assert rec.status == "would-change" and plan.node.calls == []
    assert rec.changes[1].startswith("restart CT 120: features cannot change on a running container")
    run = make_run(host_facts("status: running\n", config), {})
    pve_accepts(run.node)
    run.node.answer("/status/shutdown", '"UPID:pve-gpu-1:0000A1B2:0001C3D4:6745A1B2:vzshutdown:120:root@pam:"')
    rec = run.step("container")
    sent = run.node.commands("run")
    # stop first, then write (a stopped CT takes every key at once), then start: nothing is left pending
    order = [next(i for i, c in enumerate(sent) if needle in c)
             for needle in ("/status/shutdown", "/config --digest", "/status/start")]
    assert order == sorted(order) and rec.changes[-1] == "start CT 120"


def test_wanted_values_already_pending_restart_the_container(make_run) -> None:
    probe = make_run()
    pending = json.dumps([{"key": "features", "value": "nesting=0", "pending": "nesting=1"},
                          {"key": "cores", "value": "64"}, {"key": "digest", "value": "d1"}])
    facts = {**host_facts("status: running\n", converged_config(probe)), "ct_pending": pending}
    rec = make_run(facts, {}, dry_run=True).step("container")
    assert rec.details["config_diff"] == []  # GET config shows the pending value: nothing to write
    assert rec.changes == ["restart CT 120: features pending in PVE since an earlier change (applied at the next "
                           "start)", "start CT 120"]


def test_a_stale_uvm_node_in_the_running_container_restarts_it(make_run) -> None:
    probe = make_run()
    ct_listing = DEV_LISTING.replace("508,", "509,")  # the CT started before the host's driver reload
    rec = make_run(host_facts("status: running\n", converged_config(probe)), {"dev_listing": ct_listing},
                   dry_run=True).step("container")
    assert rec.changes == ["restart CT 120: /dev/nvidia-uvm is 508:0 on the host but 509:0 in the CT; "
                           "/dev/nvidia-uvm-tools is 508:1 on the host but 509:1 in the CT (host driver reloaded "
                           "or rebooted since the CT started)", "start CT 120"]
    same = make_run(host_facts("status: running\n", converged_config(probe)), {"dev_listing": DEV_LISTING},
                    dry_run=True).step("container")
    assert same.changes == []


def _aplinfo(*names: str) -> str:
    return json.dumps([{"template": n, "package": n.split("_")[0], "version": n.split("_")[1], "type": "lxc"}
                      for n in names])


ABSENT = "Configuration file 'nodes/pve-gpu-1/lxc/120.conf' does not exist\n"
INDEX = _aplinfo("debian-13-standard_13.1-2_amd64.tar.zst", "debian-12-standard_12.9-1_amd64.tar.zst",
                 "debian-12-standard_12.12-1_amd64.tar.zst")


def test_a_template_family_takes_the_newest_version_in_the_nodes_index(make_run) -> None:
    run = make_run({**host_facts(ABSENT), "aplinfo": INDEX})
    pve_accepts(run.node)
    assert run.ctx.host.container.ostemplate == "local:vztmpl/debian-12-standard"  # the shipped inventory
    run.node.ct_after = {}
    rec = run.step("container")
    assert rec.changes[0] == "download template debian-12-standard_12.12-1_amd64.tar.zst to local"
    assert run.node.sent("aplinfo --storage local --template debian-12-standard_12.12-1_amd64.tar.zst")
    [create] = [c for c in run.node.commands("run") if c.startswith("pvesh create /nodes/pve-gpu-1/lxc ")]
    assert "--ostemplate local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst" in create
    # the newest already in the storage: no download
    run = make_run({**host_facts(ABSENT), "aplinfo": INDEX,
                    "templates": json.dumps([{"volid": "local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst"}])})
    pve_accepts(run.node)
    run.node.ct_after = {}
    run.step("container")
    assert not run.node.sent("aplinfo")


def test_a_pinned_template_the_index_no_longer_lists_is_refused_with_the_versions_it_has(make_run) -> None:
    # 12.7-1: gone from the index, not in the storage
    run = with_container(make_run({**host_facts(ABSENT), "aplinfo": INDEX, "templates": "[]"}), ostemplate=TEMPLATE)
    pve_accepts(run.node)
    with pytest.raises(ConfigError) as err:
        run.step("container")
    assert err.value.exit_code == 2
    assert ("it lists for debian-12-standard: debian-12-standard_12.9-1_amd64.tar.zst, "
            "debian-12-standard_12.12-1_amd64.tar.zst)") in err.value.what
    assert "local:vztmpl/debian-12-standard (the newest version in the index is taken)" in err.value.fix
    assert run.node.calls == []  # nothing downloaded, nothing created
    # pinned and in the storage: used as it is, whatever the index says
    run = with_container(make_run({**host_facts(ABSENT), "aplinfo": INDEX}), ostemplate=TEMPLATE)
    pve_accepts(run.node)
    run.node.ct_after = {}
    run.step("container")
    assert not run.node.sent("aplinfo") and run.node.sent(f"--ostemplate {TEMPLATE}")


def test_running_tasks_keeps_only_this_cts_running_tasks_of_that_type() -> None:
    listing = [
        {"upid": f"{UPID}vzcreate:120:root@pam:", "type": "vzcreate", "id": "120", "status": "RUNNING"},
        {"upid": f"{UPID}vzcreate:121:root@pam:", "type": "vzcreate", "id": "121", "status": "RUNNING"},
        {"upid": f"{UPID}vzstart:120:root@pam:", "type": "vzstart", "id": "120", "status": "RUNNING"},
        {"upid": f"{UPID}vzcreate:120:root@pam:x", "type": "vzcreate", "id": "120", "status": "OK"},
        "not a task",
    ]
    assert running_tasks(listing, 120, "vzcreate") == [f"{UPID}vzcreate:120:root@pam:"]
    assert running_tasks(None, 120, "vzcreate") == []


def test_lock_refusal_names_the_lock_and_a_fix_that_works_on_pve() -> None:
    what, fix = lock_refusal("create", 120, "pve-gpu-1")
    assert "CT 120 is locked (create)" in what and "no create task" in what
    assert "pct unlock 120 && pct destroy 120 --destroy-unreferenced-disks 1" in fix
    what, fix = lock_refusal("backup", 120, "pve-gpu-1")
    assert "CT 120 is locked (backup) by a backup (vzdump)" in what and "pct unlock 120" in fix
    assert "locked (weird) by a `weird` operation" in lock_refusal("weird", 120, "n")[0]


def test_a_stale_create_lock_is_refused_before_any_change(make_run) -> None:
    facts = host_facts("status: stopped\n", {"lock": "create", "digest": "d1"})
    run = make_run(facts)
    run.node.host_after = {**facts, "ct_pending": "[]"}  # read again: still locked, still no task
    run.node.answer("/tasks --source active", "[]")
    with pytest.raises(RemoteError) as err:
        run.step("container")
    assert err.value.exit_code == 3 and "no create task for it runs on node pve-gpu-1" in err.value.what
    assert "pct destroy 120" in err.value.fix
    assert [c for c in run.node.commands("run") if "/tasks" not in c] == []  # read tasks and facts, changed nothing
    assert len(run.node.commands("batch")) == 1  # the lock was read again before it was called stale


def test_another_lock_is_refused_without_waiting(make_run) -> None:
    run = make_run(host_facts("status: running\n", {"lock": "backup", "digest": "d1"}))
    with pytest.raises(RemoteError) as err:
        run.step("container")
    assert "locked (backup)" in err.value.what and run.node.calls == []


def test_a_running_create_task_is_waited_for_then_the_ct_is_converged(make_run) -> None:
    probe = make_run()
    locked = host_facts("status: stopped\n", {"lock": "create", "digest": "d0"})
    run = make_run(locked)
    pve_accepts(run.node)
    upid = f"{UPID}vzcreate:120:root@pam:"
    run.node.answer("/tasks --source active", json.dumps([{"upid": upid, "type": "vzcreate", "id": "120",
                                                           "status": "RUNNING"}]))
    run.node.host_after = {**host_facts("status: stopped\n", converged_config(probe)), "ct_pending": "[]"}
    run.node.ct_after = {"gpus": ONE_GPU}
    rec = run.step("container")
    assert rec.details["waited_for"] == upid and rec.changes == ["start CT 120"]
    assert run.node.sent(f"/tasks/{upid}/status")
    assert not run.node.sent("pvesh create /nodes/pve-gpu-1/lxc ")  # the other run's create, not a second one


def test_a_ct_removed_between_its_status_and_its_config_is_read_again_then_created(make_run) -> None:
    """`pct status` saw the CT, then its failed create task removed it before `pvesh get …/config` ran."""
    facts = host_facts("status: stopped\n")
    run = make_run({**facts, "ct_config": ""})
    run.node.host_after = {**host_facts("Configuration file 'nodes/pve-gpu-1/lxc/120.conf' does not exist\n"),
                           "ct_pending": ""}
    run.node.ct_after = {"gpus": ONE_GPU}
    pve_accepts(run.node)
    rec = run.step("container")
    assert any("create CT 120" in c for c in rec.changes)
    assert len([c for c in run.node.commands("run") if c.startswith("pvesh create /nodes/pve-gpu-1/lxc ")]) == 1


START_FAILED = "startup for container '120' failed"


@pytest.mark.parametrize("rc", [0, 255])
def test_a_failed_start_task_is_read_from_its_own_status_whatever_pvesh_exits(make_run, rc: int) -> None:
    """A real node's `pvesh create …/status/start` exits 0 after a failed task (it prints the log, `TASK ERROR: …`
    and the UPID): the step reads the task's exitstatus and log, and does the same when a pvesh exits non-zero
    after printing the UPID, instead of reading the exit code or stderr."""
    run = make_run(host_facts("status: stopped\n", converged_config(make_run())))
    upid = f"{UPID}vzstart:120:root@pam:"
    run.node.answer("/status/start", f'lxc-start: 120: failed\nTASK ERROR: {START_FAILED}\n"{upid}"\n', rc=rc)
    run.node.answer("/tasks/", json.dumps({"status": "stopped", "type": "vzstart", "exitstatus": START_FAILED}))
    run.node.answer("/log", json.dumps([{"n": 1, "t": "lxc-start: 120: failed"},
                                        {"n": 2, "t": f"TASK ERROR: {START_FAILED}"}]))
    with pytest.raises(TaskFailed) as exc:
        run.step("container")
    assert exc.value.what == f"PVE task vzstart failed: {START_FAILED}"
    assert exc.value.details["upid"] == upid and exc.value.details["log"][-1] == f"TASK ERROR: {START_FAILED}"


def test_pvesh_failing_without_a_task_is_still_its_own_error(make_run) -> None:
    run = make_run(host_facts("status: stopped\n", converged_config(make_run())))
    run.node.answer("/status/start", "", rc=255, stderr="CT is locked (create)\n")
    with pytest.raises(RemoteError) as exc:
        run.step("container")
    assert not isinstance(exc.value, TaskFailed) and "CT is locked (create)" in exc.value.what


def _ha_start(make_run) -> Any:
    """A stopped HA-managed CT: its start is a `hastart` task (a request to the HA manager) that ends OK at once."""
    run = make_run(host_facts("status: stopped\n", converged_config(make_run())))
    run.node.ct_after = {"gpus": ONE_GPU}
    pve_accepts(run.node)
    run.node.answer("/status/start", f'Requesting HA start for CT 120\n"{UPID}hastart:120:root@pam:"\n')
    return run


def test_an_ha_managed_start_is_waited_for_until_the_ct_runs(make_run) -> None:
    run = _ha_start(make_run)
    run.node.answer("/status/current", json.dumps({"status": "running", "ha": {"managed": 1}}))
    assert "start CT 120" in run.step("container").changes
    commands = run.node.commands("run")
    start = next(i for i, c in enumerate(commands) if "/status/start" in c)
    assert any("/lxc/120/status/current" in c for c in commands[start:])  # read after the request, not before
    assert upid_type(f"{UPID}vzstart:120:root@pam:") == "vzstart" and upid_type("not a upid") is None


def test_an_ha_managed_ct_that_never_runs_names_the_ha_stack(make_run, monkeypatch) -> None:
    from orchestrator.steps import container as container_step

    run = _ha_start(make_run)
    run.node.answer("/status/current", json.dumps({"status": "stopped", "ha": {"managed": 1}}))
    monkeypatch.setattr(container_step, "HA_WAIT_S", 0)
    with pytest.raises(RemoteError) as exc:
        run.step("container")
    assert "CT 120 is HA-managed and still stopped" in exc.value.what and "ha-manager status" in exc.value.fix


def test_templates_read_while_a_killed_runs_ct_was_still_there_are_read_again_before_the_create(make_run) -> None:
    """The resume of a killed `up` read its facts while the half-made CT's config still existed (so the template
    facts were skipped: facts/host.py unless_ct_exists) and then `pct status` found it gone (PVE removed it when its
    create task died): the create reads the templates again instead of refusing 'neither in storage'."""
    gone = "Configuration file 'nodes/pve-gpu-1/lxc/120.conf' does not exist\n"
    run = make_run({**host_facts(gone), "templates": "", "aplinfo": ""})
    run.node.host_after = {**host_facts(gone), "ct_pending": "[]"}
    run.node.ct_after = {"gpus": ONE_GPU}
    pve_accepts(run.node)
    rec = run.step("container")
    assert rec.status == "changed" and rec.details["template"]["ostemplate"] == TEMPLATE, rec.details
    assert len([c for c in run.node.commands("run") if c.startswith("pvesh create /nodes/pve-gpu-1/lxc ")]) == 1


# ------------------------------------------------------------------------------------------------ issue 50 item 12
def _auto(run) -> None:
    """The host's container as `vmid: auto` resolved it (the number recorded on the node)."""
    spec = run.ctx.host.container.model_copy(update={"vmid_setting": "auto"}).with_vmid(120)
    run.ctx.host = run.ctx.host.model_copy(update={"container": spec})


def test_a_recorded_auto_vmid_that_now_names_somebody_elses_container_is_refused(make_run) -> None:
    """PVE reuses the lowest free VMID: after a `pct destroy` of ours, somebody's new guest got 120. The recorded
    `vmid: auto` names it; before, `up` passed the GPUs into it and restarted it. Refused now, before any change."""
    probe = make_run()
    theirs = {k: v for k, v in converged_config(probe).items() if k != "tags"}
    theirs.update({"hostname": "ci-runner", "tags": "ci;team-b"})
    run = make_run(host_facts("status: running\n", theirs), {})
    _auto(run)
    with pytest.raises(ConfigError) as err:
        run.step("container")
    assert "CT 120 on node pve-gpu-1 is not the container deploy made for pve-gpu-1" in err.value.what
    assert "may name somebody else's" in err.value.what and "nothing was changed" in err.value.what
    assert "auto-vmid/pve-gpu-1` on the node (deploy then chooses a free VMID)" in (err.value.fix or "")
    assert "pct set 120 --tags 'ci;team-b;deploy-" in (err.value.fix or "")
    assert run.node.calls == []  # not a command: refused on the facts already read


def test_another_inventory_hosts_container_is_refused_even_with_a_vmid_in_the_inventory(make_run) -> None:
    probe = make_run()
    config = {**converged_config(probe), "tags": ownership_tag("pve-gpu-2")}
    run = make_run(host_facts("status: running\n", config), {})
    with pytest.raises(ConfigError, match="carries another inventory host's mark"):
        run.step("container")


def test_an_unmarked_container_the_inventory_names_by_number_is_adopted_and_marked(make_run) -> None:
    """A container of an earlier deploy (no mark), named by its number in the inventory: the operator chose it;
    the mark is added with the config's other keys (hot, no restart), and plan shows it."""
    probe = make_run()
    config = {k: v for k, v in converged_config(probe).items() if k != "tags"}
    config["tags"] = "gpu"
    plan = make_run(host_facts("status: running\n", config), {}, dry_run=True)
    rec = plan.step("container")
    assert rec.details["config_diff"] == [f"tags: gpu → gpu;{ownership_tag('pve-gpu-1')}"], rec.details
    assert any("tags: gpu → gpu;deploy-" in c for c in rec.changes) and not any("restart" in c for c in rec.changes)
