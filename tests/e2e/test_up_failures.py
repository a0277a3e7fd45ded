"""`deploy up` on hosts that are not ready: each failure stops early, names the fix, and a re-run converges."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import sim_root
from tests.e2e.conftest import SHARED, DeployEnv, make_env, site_ostemplate
from tests.e2e.test_roll import KILLED_LOCK_TTL_S
from tests.sim_hosts import OFFSET_VM_HOST

NAN_LINE = ("/pytorch/aten/src/ATen/native/cuda/MultinomialKernel.cu: Assertion `probability tensor contains "
            "either `inf`, `nan` or element < 0` failed.")


@pytest.fixture(scope="module")
def vm_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The same eight GPUs seen from a VM with PCIe passthrough: flat PHB topology, P2P CNS."""
    with sim_root(tmp_path_factory, "deploy-sim-vm", OFFSET_VM_HOST, profile="rtx-pro-6000-x8-vm") as (_, (info,)):
        yield info


def test_vm_passthrough_stops_at_p2p_with_the_vm_diagnosis(vm_host: Any, tmp_path: Path) -> None:
    env = make_env(vm_host, tmp_path, site_ostemplate([vm_host]))
    res = env.run("--json", "up", "host", vm_host.name, "--skip-bench")
    assert res.rc == 1, res.text
    err = res.json
    assert err["step"] == "verify_p2p"
    assert "VM" in err["what"] and "passthrough" in err["what"]
    assert "LXC" in err["fix"] or "x-nv-gpudirect-clique" in err["fix"]
    # Nothing after P2P ran: no unit was installed.
    assert env.ct("test -f /etc/systemd/system/sglang.service && echo yes || echo no").stdout.strip() == "no"
    offline = env.run("verify-p2p", "host", vm_host.name)
    assert offline.rc == 1 and "CNS" in offline.stdout


def test_missing_nvidia_uvm_is_named_by_doctor_and_up(deploy_env: DeployEnv) -> None:
    deploy_env.faults(missing_uvm=True)
    doc = deploy_env.run("--json", "doctor", "host", deploy_env.host)
    assert doc.rc == 1, doc.text
    uvm = next(f for f in doc.json["findings"] if "uvm" in f["check"] and f["status"] == "fail")
    assert "nvidia-modprobe -u -c0" in uvm["fix"] and "deploy up" in uvm["fix"]
    up = deploy_env.run("--json", "up", "host", deploy_env.host, "--skip-bench")
    assert up.rc == 1
    assert up.json["step"] == "host_prereqs" and "nvidia-uvm" in up.json["what"]
    assert deploy_env.ssh("ls /etc/pve/lxc").stdout.strip() == ""  # refused before any change
    # The fix the tool names, applied on the host, makes the next run converge.
    assert deploy_env.ssh("nvidia-modprobe -u -c=0").rc == 0
    assert deploy_env.run("up", "host", deploy_env.host, "--skip-bench").rc == 0


def test_a_pinned_template_the_index_moved_past_is_refused_with_the_versions_it_lists(sim: Any,
                                                                                         tmp_path: Path) -> None:
    """Issue 20: real `POST aplinfo` accepts only the names in the node's current index; a pinned 12.7-1 that the
    storage lacks is exit 2 naming what the index has, and nothing is created."""
    env = make_env(sim, tmp_path, "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst")
    assert env.ssh("rm /var/lib/vz/template/cache/debian-12-standard_12.7-1_amd64.tar.zst").rc == 0
    env.faults(aplinfo="debian-12-standard_12.9-1_amd64.tar.zst,debian-12-standard_12.12-1_amd64.tar.zst")
    up = env.run("--json", "up", "host", env.host, "--skip-bench")
    assert up.rc == 2 and up.json["step"] == "container", up.text[-2000:]
    assert "it lists for debian-12-standard: debian-12-standard_12.9-1_amd64.tar.zst, " \
           "debian-12-standard_12.12-1_amd64.tar.zst" in up.json["what"]
    assert "local:vztmpl/debian-12-standard" in up.json["fix"]
    assert env.ssh("ls /etc/pve/lxc").stdout.strip() == ""  # nothing created
    assert "debian-12-standard" not in env.ssh("ls /var/lib/vz/template/cache").stdout  # nothing downloaded
    # the family form takes the newest the index lists: the plan says it would download 12.12-1
    (env.inventory / "sim.yaml").write_text((env.inventory / "sim.yaml").read_text().replace(
        "debian-12-standard_12.7-1_amd64.tar.zst", "debian-12-standard"))
    plan = env.run("--json", "plan", "host", env.host)
    changes = next(s for s in plan.json["steps"] if s["name"] == "container")["changes"]
    assert changes[0] == "download template debian-12-standard_12.12-1_amd64.tar.zst to local", changes


def test_driver_mismatch_is_fixed_with_the_hosts_installer(converged: DeployEnv) -> None:
    converged.ct_faults(driver_mismatch="590.48.01")
    assert "mismatch" in converged.ct("nvidia-smi -L").text
    res = converged.run("--json", "up", "host", converged.host, "--skip-bench")
    assert res.rc == 0, res.text
    step = next(s for s in res.json["steps"] if s["name"] == "driver_userspace")
    assert step["status"] == "changed" and "595.58.03" in step["summary"]
    assert converged.ct("nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.split()[0] == "595.58.03"


def test_driver_mismatch_without_installer_is_refused_with_both_versions(converged: DeployEnv) -> None:
    sim_yaml = converged.inventory / "sim.yaml"
    data = yaml.safe_load(sim_yaml.read_text())
    data["hosts"][converged.host]["container"].pop("driver_installer")
    sim_yaml.write_text(yaml.safe_dump(data))
    converged.ct_faults(driver_mismatch="590.48.01")
    res = converged.run("--json", "up", "host", converged.host, "--skip-bench")
    assert res.rc == 1
    assert "590.48" in res.json["what"] and "595.58.03" in res.json["what"]  # NVML reports major.minor
    assert "--no-kernel-module " in res.json["fix"]  # nvidia-installer's option (singular), userspace only


@pytest.mark.xdist_group(SHARED)
def test_a_full_container_disk_is_named_and_nothing_is_read_as_missing(converged_shared: DeployEnv) -> None:
    """The facts batch keeps its outputs in the CT's /tmp: on a full disk they would read as 'no sglang, no
    weights'. `up` stops at the lock step naming the disk, and converges once there is space again."""
    env = converged_shared
    assert env.ct("mount -t tmpfs -o size=64k deploy-full /tmp && { cat /dev/zero > /tmp/fill; true; }").rc == 0
    try:
        res = env.run("--json", "up", "host", env.host, "--skip-bench")
        assert res.rc == 3, res.text
        assert res.json["step"] == "lock" and res.json["error"] == "remote-error"
        assert res.json["what"].startswith("CT 120 could not run its facts batch: could not write its files in /tmp/")
        assert "(no space left?)" in res.json["what"] and "100%" in res.json["what"]
        assert "pct exec 120 -- df -h /tmp" in res.json["fix"]
    finally:
        assert env.ct("umount /tmp").rc == 0
    again = env.run("--json", "up", "host", env.host, "--skip-bench")
    assert again.rc == 0 and again.json["summary"] == "no changes", again.text


def test_nan_crash_fails_fast_quoting_the_line(converged: DeployEnv) -> None:
    converged.ct_faults(log_line=NAN_LINE)
    converged.set_profile(flags={"max-running-requests": 1024})  # a changed unit → restart → NaN
    res = converged.run("--json", "up", "host", converged.host, "--skip-bench")
    assert res.rc == 1, res.text
    # The line comes right after "ready": the wait or the first request sees the crash; either way it is quoted.
    assert res.json["step"] in ("health", "smoke")
    assert "probability tensor contains" in res.json["what"]
    # Failed at the line, not after the 60 s start timeout: measured from the health wait's start (the server's
    # start), not the command's, whose facts, stack and restart a loaded machine stretches.
    waited = sum(s["duration_s"] for s in res.json["steps"] if s["name"] in ("health", "smoke"))
    assert waited < 45, [(s["name"], s["duration_s"]) for s in res.json["steps"]]


def test_killed_up_resumes_without_duplicates(deploy_env: DeployEnv) -> None:
    proc = deploy_env.popen("up", "host", deploy_env.host, "--skip-bench", lock_ttl_s=KILLED_LOCK_TTL_S)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # kill once the container exists, in the middle of the run
        if deploy_env.ssh("test -f /etc/pve/lxc/120.conf && echo yes").stdout.strip() == "yes":
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    # The killed run's create task may still be unpacking: PVE keeps the CT locked (`lock: create`) meanwhile and
    # refuses to start it ("CT is locked (create)"). The resume starts at once and must wait for that task (or, if
    # the task failed and PVE removed the CT, create it). Its lease is taken over at once: this machine proves the
    # killed run dead (tests/e2e/test_lock.py). Over pvesh (root, as here) the killed client's task dies at its next
    # output line, as PVE's CLI tee kills its worker on a broken pipe, and PVE removes the half-made CT: the resume
    # either waits for that task and then creates the CT, or finds it gone already.
    res = deploy_env.run("--json", "up", "host", deploy_env.host, "--skip-bench")
    assert res.rc == 0, res.text
    assert deploy_env.ssh("ls /etc/pve/lxc").stdout.split() == ["120.conf"]
    releases = deploy_env.ct("ls -1 /var/lib/deploy/releases").stdout.split()
    assert len(releases) == 1 and not any(r.endswith(".partial") for r in releases)
    assert deploy_env.ct("ls /etc/systemd/system/ | grep -c deploy-tmp || true").stdout.strip() == "0"
    again = deploy_env.run("--json", "up", "host", deploy_env.host, "--skip-bench")
    assert again.rc == 0 and not again.json["changed"]


def test_a_stale_create_lock_is_refused_with_the_fix_and_nothing_changes(deploy_env: DeployEnv) -> None:
    """A create cut short (the node restarted mid-unpack) leaves `lock: create` and no task: up must not touch it."""
    made = deploy_env.ssh("pct create 120 local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst --hostname x "
                          "--unprivileged 0 && echo 'lock: create' >> /etc/pve/lxc/120.conf")
    assert made.rc == 0, made.stderr
    before = deploy_env.ssh("cat /etc/pve/lxc/120.conf").stdout
    res = deploy_env.run("--json", "up", "host", deploy_env.host, "--skip-bench")
    assert res.rc == 3, res.text
    assert res.json["step"] == "container" and "Traceback" not in res.text
    assert "CT 120 is locked (create) but no create task for it runs" in res.json["what"]
    assert "pct unlock 120 && pct destroy 120 --destroy-unreferenced-disks 1" in res.json["fix"]
    assert deploy_env.ssh("cat /etc/pve/lxc/120.conf").stdout == before
    assert deploy_env.ssh("pct status 120").stdout == "status: stopped\n"
    # the fix the error gives works: the next up creates the CT anew
    assert deploy_env.ssh("pct unlock 120 && pct destroy 120 --destroy-unreferenced-disks 1").rc == 0


def test_a_failed_create_task_is_read_from_its_own_status_though_pvesh_exits_0(deploy_env: DeployEnv) -> None:
    """A real node's `pvesh create` runs the task, prints `TASK ERROR: …` and the UPID, and exits 0: `up` reads the
    task's own status and log, names the failure and leaves nothing half-made (PVE removed the locked CT)."""
    deploy_env.faults(task_fail="vzcreate")
    res = deploy_env.run("--json", "up", "host", deploy_env.host, "--skip-bench")
    assert res.rc == 3, res.text
    assert res.json["step"] == "container" and "Traceback" not in res.text
    assert res.json["what"].startswith("PVE task vzcreate failed: unable to create CT 120 - "), res.json
    assert "see the task log: " in res.json["fix"] and "TASK ERROR: unable to create CT 120" in res.json["fix"]
    assert deploy_env.ssh("pct status 120").rc != 0  # no CT 120 left behind


def test_concurrent_up_is_refused_naming_the_holder(converged: DeployEnv) -> None:
    converged.ct_faults(slow_start_s=15.0)
    converged.set_profile(flags={"max-running-requests": 1024})  # restart, then a slow health wait
    holder = converged.popen("up", "host", converged.host, "--skip-bench")
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            held = converged.ssh("cat /var/lib/deploy/deploy.lease 2>/dev/null").stdout
            if "pid" in held:
                break
            time.sleep(0.2)
        second = converged.run("--json", "up", "host", converged.host, "--skip-bench")
        assert second.rc == 3, second.text
        assert "holds the lock" in second.json["what"] and f"pid {holder.pid}" in second.json["what"]
    finally:
        holder.wait(timeout=120)
    assert holder.returncode == 0


def test_pve_before_8_1_gets_raw_lxc_lines(deploy_env: DeployEnv) -> None:
    from simulator.config import SimPaths

    hp = SimPaths(deploy_env.root).host(deploy_env.host)
    hp.update(lambda cfg: setattr(cfg, "pve_version", "8.0.4"))
    try:
        res = deploy_env.run("--json", "up", "host", deploy_env.host, "--skip-bench")
        assert res.rc == 0, res.text
        container = next(s for s in res.json["steps"] if s["name"] == "container")
        assert container["details"]["passthrough"]["method"] == "raw-lxc"
        conf = deploy_env.ssh("cat /etc/pve/lxc/120.conf").stdout
        assert "dev0:" not in conf
        assert "lxc.cgroup2.devices.allow: c 195:* rwm" in conf
        assert conf.count("lxc.mount.entry: /dev/nvidia") == 12  # 8 GPUs, ctl, uvm, uvm-tools, modeset
        assert "dev/nvidia-caps none bind,optional,create=dir" in conf
        gpus = deploy_env.ct("nvidia-smi -L").stdout.count("GPU ")
        assert gpus == 8
        again = deploy_env.run("--json", "up", "host", deploy_env.host, "--skip-bench")
        assert again.rc == 0 and not again.json["changed"], again.text
    finally:
        hp.update(lambda cfg: setattr(cfg, "pve_version", "9.1.2"))
