"""pct on the simulated host: one state shared with the API, devN start checks, real containers and their netns."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import pytest

from simulator.manager.faults import set_faults
from tests.e2e.conftest import until

pytestmark = pytest.mark.e2e

GPU_DEVS = "--dev0 /dev/nvidia0,mode=0666 --dev1 /dev/nvidiactl,mode=0666 --dev2 /dev/nvidia-uvm,mode=0666"


def test_create_start_exec_and_api_agree(ssh: Any, make_ct: Any, prox: Any, sim: Any) -> None:
    res = make_ct(120, GPU_DEVS)
    assert res.rc == 0, res.err
    assert "extracting archive '/var/lib/vz/template/cache/debian-12-standard_12.7-1_amd64.tar.zst'" in res.out
    conf = ssh.run("cat /etc/pve/lxc/120.conf").out
    assert "dev2: /dev/nvidia-uvm,mode=0666\n" in conf and "unprivileged" not in conf
    assert "rootfs: local-lvm:vm-120-disk-0,size=8G\n" in conf
    api_conf = prox.nodes(sim.node).lxc(120).config.get()
    assert api_conf["dev0"] == "/dev/nvidia0,mode=0666" and api_conf["cores"] == 2
    assert ssh.run("pct config 120").out.splitlines() == [ln for ln in conf.splitlines() if ln]
    assert ssh.run("pct start 120").rc == 0
    assert ssh.run("pct status 120").out == "status: running\n"
    assert prox.nodes(sim.node).lxc(120).status.current.get()["status"] == "running"
    res = ssh.run("pct exec 120 -- bash -c 'hostname; echo $container; ls /dev; "
                  "cat /proc/driver/nvidia/version; exit 5'")
    assert res.rc == 5
    lines = res.out.splitlines()
    assert lines[0] == "ct120" and lines[1] == "lxc"
    assert {"nvidia0", "nvidiactl", "nvidia-uvm", "null"} <= set(lines) and "nvidia1" not in lines
    assert sim.driver_version in res.out
    # the API sees the same container; a stop over the API is seen by pct
    from proxmoxer.tools import Tasks

    # the GPU load a server in the CT reports (simulator/gpu/telemetry.py) ends when the CT is killed, as a real
    # GPU's does; a killed server never removes its file, and nvidia-smi must not show it for seconds after
    util = "nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits | sort -u"
    load = {"vmid": 120, "updated": time.time() + 30, "minors": list(range(256)), "util": 0.72}
    (sim.host_dir / "gpu" / "load-120.json").write_text(json.dumps(load))
    assert ssh.run(util).out.strip() == "72"
    upid = prox.nodes(sim.node).lxc(120).status.stop.post()
    assert Tasks.blocking_status(prox, upid, polling_interval=0.1)["exitstatus"] == "OK"
    assert ssh.run("pct status 120").out == "status: stopped\n"
    assert ssh.run(util).out.strip() == "0"
    res = ssh.run("pct exec 120 -- true")
    assert res.rc == 255 and res.err == "CT 120 not running\n"


def test_stdin_reaches_container_bash(ssh: Any, make_ct: Any) -> None:
    assert make_ct(121).rc == 0
    assert ssh.run("pct start 121").rc == 0
    res = ssh.run("pct exec 121 -- bash -s", stdin="x=$((6*7))\necho v=$x\nexit 4\n")
    assert (res.rc, res.out) == (4, "v=42\n")
    res = ssh.run("pct exec 121 -- bash -s", stdin="echo $((40+2)); cat /etc/hostname 2>/dev/null; hostname\n")
    assert res.out.splitlines()[0] == "42" and res.out.splitlines()[-1] == "ct121"


def test_missing_uvm_fails_start_then_nvidia_modprobe_fixes_it(ssh: Any, make_ct: Any, sim: Any,
                                                                prox: Any) -> None:
    assert make_ct(122, GPU_DEVS).rc == 0  # configured while uvm was loaded; then the host rebooted
    set_faults(sim.host_dir.parent.parent, sim.name, missing_uvm=True)
    assert "nvidia-uvm" not in ssh.run("cat /proc/devices").out
    res = ssh.run("pct start 122")
    assert res.rc == 255 and res.err == "Device /dev/nvidia-uvm does not exist\n"
    from proxmoxer.tools import Tasks

    upid = prox.nodes(sim.node).lxc(122).status.start.post()
    status = Tasks.blocking_status(prox, upid, polling_interval=0.1)
    assert status["exitstatus"] == "Device /dev/nvidia-uvm does not exist"
    log = prox.nodes(sim.node).tasks(upid).log.get()
    assert log[-1]["t"] == "TASK ERROR: Device /dev/nvidia-uvm does not exist"
    res = ssh.run("nvidia-modprobe -u -c=0 && ls -l /dev/nvidia-uvm && grep nvidia-uvm /proc/devices")
    assert res.rc == 0, res.err
    assert ssh.run("pct start 122").rc == 0


def test_optional_raw_mount_entry_is_skipped(ssh: Any, make_ct: Any, sim: Any) -> None:
    set_faults(sim.host_dir.parent.parent, sim.name, missing_uvm=True)
    assert make_ct(123).rc == 0
    script = ("cat >> /etc/pve/lxc/123.conf <<'EOF'\n"
              "lxc.cgroup2.devices.allow: c 195:* rwm\n"
              "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
              "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
              "EOF\npct start 123 && pct exec 123 -- sh -c 'for d in nvidia0 nvidia-uvm; do "
              "test -c /dev/$d && echo $d; done; true'")
    res = ssh.run("bash -s", stdin=script)
    assert res.rc == 0, res.err
    # LXC's create=file leaves an empty file where an optional mount found no source: no device node, as on PVE
    assert res.out.split() == ["nvidia0"]
    last = ssh.run("pct config 123").out.splitlines()[-1]
    assert last == "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file"


def test_containers_have_their_own_netns(ssh: Any, make_ct: Any, sim: Any) -> None:
    assert make_ct(124).rc == 0 and make_ct(125).rc == 0
    assert ssh.run("pct start 124 && pct start 125").rc == 0
    ns = {v: ssh.run(f"pct exec {v} -- readlink /proc/self/ns/net").out.strip() for v in (124, 125)}
    host = ssh.run("readlink /proc/self/ns/net").out.strip()
    assert ns[124].startswith("net:[") and len({ns[124], ns[125], host}) == 3, (ns, host)
    # `pct start` returns once LXC says running, as on PVE: the container's DHCP lease comes a moment later.
    def address(v: int) -> str | None:
        words = ssh.run(f"pct exec {v} -- ip -o -4 addr show eth0").out.split()
        return words[3] if len(words) > 3 else None

    addresses = {v: until(lambda v=v: address(v), 60) for v in (124, 125)}
    assert all(addresses.values()), addresses
    assert addresses[124] != addresses[125], addresses
    # stop ends the container and its namespace with it
    assert ssh.run("pct stop 124").rc == 0
    res = ssh.run("pct exec 124 -- true")
    assert res.rc != 0 and res.err == "CT 124 not running\n"


def test_pct_errors_match_pve(ssh: Any, make_ct: Any, sim: Any) -> None:
    assert make_ct(126).rc == 0
    res = make_ct(126)
    assert res.rc == 255 and res.err == f"CT 126 already exists on node '{sim.node}'\n"
    res = ssh.run("pct set 126 --memory abc --bogus 1")
    assert res.rc == 255 and res.err.startswith("Unknown option: bogus\n400 unable to parse option\n")
    res = ssh.run("pct set 126 --memory abc --net1 bridge=vmbr0")
    assert res.rc == 255
    assert res.err.startswith("400 Parameter verification failed.\n")
    assert "memory: type check ('integer') failed - got 'abc'\n" in res.err
    assert "net1: invalid format - format error\nnet1.name: property is missing and it is not optional\n" in res.err
    assert ssh.run("pct set 126 --cores 4 --delete features && pct config 126 | grep -c features").out == "0\n"
    res = ssh.run("pct create 127 local:vztmpl/nope.tar.zst --hostname x")
    assert res.rc == 255 and res.err == "unable to create CT 127 - volume 'local:vztmpl/nope.tar.zst' does not exist\n"
    assert ssh.run("pct push 126 /etc/hostname /root/x").err == "CT 126 not running\n"
    # pct exec/enter take the light path (simulator/lxc/attach.py) with pct's own refusals; a malformed call gets
    # the full pct's answer
    absent = f"Configuration file 'nodes/{sim.node}/lxc/199.conf' does not exist\n"
    for command, err in (("pct exec 126 -- true", "CT 126 not running\n"), ("pct enter 126", "CT 126 not running\n"),
                         ("pct exec 199 -- true", absent), ("pct exec 126 --", "missing command\n")):
        res = ssh.run(command)
        assert (res.rc, res.err) == (255, err), (command, res)
    res = ssh.run("pct exec 12x -- true")
    assert res.rc == 255 and "vmid: type check ('integer') failed - got '12x'" in res.err, res
    assert ssh.run("pct start 126 && echo secret > /tmp/f && pct push 126 /tmp/f /root/f --perms 0600 "
                   "&& pct exec 126 -- stat -c %a:%s /root/f").out == "600:7\n"


def test_pvesh_maps_to_api(ssh: Any, make_ct: Any, sim: Any) -> None:
    assert make_ct(128).rc == 0
    res = ssh.run(f"pvesh get /nodes/{sim.node}/lxc/128/config --output-format json")
    assert res.rc == 0 and json.loads(res.out)["hostname"] == "ct128"
    res = ssh.run(f"pvesh set /nodes/{sim.node}/lxc/128/config -dev5 /dev/nvidia1,mode=0666")
    assert res.rc == 0, res.err
    res = ssh.run(f"pvesh create /nodes/{sim.node}/lxc/128/status/start --output-format json")
    assert res.rc == 0 and json.loads(res.out.splitlines()[-1]).startswith(f"UPID:{sim.node}:")
    res = ssh.run(f"pvesh create /nodes/{sim.node}/lxc -vmid 129 -ostemplate local:vztmpl/x.tar.zst -foo 1")
    assert res.rc == 255
    assert res.err.startswith("400 Parameter verification failed.\nfoo: property is not defined in schema")
    res = ssh.run("pveversion && lspci -d 10de: | wc -l")
    assert res.out.startswith("pve-manager/9.1") and res.out.splitlines()[-1] == "8"


def test_fault_knobs_are_validated_and_stored(make_ct: Any, sim: Any) -> None:
    from simulator.manager.faults import set_ct_faults

    root = sim.host_dir.parent.parent
    assert make_ct(140).rc == 0
    faults = set_ct_faults(root, sim.name, 140, driver_mismatch="580.65.06", crash_on_start=True,
                           log_line="Unsupported architecture", slow_start_s=2.5, health_never_ok=True)
    state = json.loads((sim.host_dir / "ct/140/state.json").read_text())
    from simulator.config import CtFaults

    assert state["faults"] == {**dataclasses.asdict(CtFaults()), "driver_mismatch": "580.65.06",
                               "crash_on_start": True, "health_never_ok": True,
                               "log_line": "Unsupported architecture", "slow_start_s": 2.5}
    assert faults.crash_on_start is True
    with pytest.raises(ValueError, match="unknown fault 'crash'"):
        set_ct_faults(root, sim.name, 140, crash=True)
    with pytest.raises(ValueError, match="unknown fatal fault 'xid'"):
        set_ct_faults(root, sim.name, 140, fatal="xid")
    with pytest.raises(ValueError, match="unknown fault"):
        set_faults(root, sim.name, drop_ssh=1)


def test_pvesh_exits_0_with_the_upid_when_its_task_fails_and_pct_does_not(ssh: Any, make_ct: Any, sim: Any) -> None:
    """pve-common's fork_worker runs a CLI task synchronously and returns its UPID; pvesh prints it and exits 0
    whatever the task's end. Only the task's status says it failed. pct dies with the error (exit 255)."""
    assert make_ct(131, GPU_DEVS).rc == 0
    set_faults(sim.host_dir.parent.parent, sim.name, missing_uvm=True)
    res = ssh.run(f"pvesh create /nodes/{sim.node}/lxc/131/status/start --output-format json")
    assert res.rc == 0 and res.err == "", res
    lines = res.out.splitlines()
    upid = json.loads(lines[-1])
    assert upid.startswith(f"UPID:{sim.node}:") and ":vzstart:131:root@pam:" in upid
    assert lines[-2] == "TASK ERROR: Device /dev/nvidia-uvm does not exist"
    status = json.loads(ssh.run(f"pvesh get /nodes/{sim.node}/tasks/{upid}/status --output-format json").out)
    assert (status["status"], status["exitstatus"]) == ("stopped", "Device /dev/nvidia-uvm does not exist")
    res = ssh.run("pct start 131")
    assert res.rc == 255 and res.err == "Device /dev/nvidia-uvm does not exist\n"
