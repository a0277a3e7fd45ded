"""What a real PVE node does that a kind simulator would not: pending changes, privilege-separated tokens, devN
checked at set/create, the uvm major changing on a driver reload, task owners and unknown UPIDs, long task
logs, and pvesh's text output. Checked against pve-container, pve-manager, pve-access-control and pve-common."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import requests
from proxmoxer import ProxmoxAPI, ResourceException
from proxmoxer.tools import Tasks

from simulator.manager.faults import set_faults
from tests.shared import EXAMPLE_INVENTORY

pytestmark = pytest.mark.e2e
TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


def _restricted(ssh: Any, sim: Any, name: str, *grants: str) -> Any:
    """A privsep=1 token of root@pam made with pveum; `grants` are `PATH=ROLE` ACL entries."""
    res = ssh.run(f"pveum user token add root@pam {name} --privsep 1 --output-format json")
    assert res.rc == 0, res.err
    secret = json.loads(res.out)["value"]
    for grant in grants:
        path, role = grant.split("=")
        assert ssh.run(f"pveum acl modify {path} --roles {role} --tokens 'root@pam!{name}'").rc == 0
    return ProxmoxAPI(sim.address, port=sim.api_port, user="root@pam", token_name=name, token_value=secret,
                      verify_ssl=str(sim.ca_file), timeout=15)


def test_keys_that_cannot_hot_apply_stay_pending_until_start(ssh: Any, make_ct: Any, prox: Any, sim: Any) -> None:
    assert make_ct(150).rc == 0 and ssh.run("pct start 150").rc == 0
    res = ssh.run("pct set 150 --features nesting=1,keyctl=1 --cores 4 --memory 2048 --ostype ubuntu "
                  "--delete swap")
    assert res.rc == 0, res.err
    conf = ssh.run("cat /etc/pve/lxc/150.conf").out
    main, _, pending = conf.partition("\n[pve:pending]\n")
    # cores is a fast-plug option, memory and swap hot-plug (cgroup); features and ostype wait for a restart
    assert "cores: 4\n" in main and "memory: 2048\n" in main and "swap:" not in main
    assert "features: nesting=1\n" in main and "ostype: debian\n" in main
    assert pending == "features: keyctl=1,nesting=1\nostype: ubuntu\n"
    api = prox.nodes(sim.node).lxc(150)
    assert api.config.get()["features"] == "keyctl=1,nesting=1"  # pending values by default
    assert api.config.get(current=1)["features"] == "nesting=1"
    listed = {e["key"]: e for e in api.pending.get()}
    assert listed["features"] == {"key": "features", "value": "nesting=1", "pending": "keyctl=1,nesting=1"}
    assert listed["cores"] == {"key": "cores", "value": "4"} and "digest" in listed
    shown = ssh.run("pct pending 150").out.splitlines()
    assert "cur features: nesting=1" in shown and "new features: keyctl=1,nesting=1" in shown
    assert "cur cores: 4" in shown and not any(line.startswith("del ") for line in shown)
    ssh.run("pct set 150 --delete ostype")
    assert ssh.run("pct set 150 --delete memory").err == "unable to delete required option 'memory'\n"
    # a stopped container takes changes at once; the next start applies what was pending
    assert ssh.run("pct stop 150 && pct start 150").rc == 0
    assert "[pve:pending]" not in ssh.run("cat /etc/pve/lxc/150.conf").out
    assert api.config.get(current=1)["features"] == "keyctl=1,nesting=1"
    assert [e for e in api.pending.get() if "pending" in e or "delete" in e] == []


def test_privsep_token_gets_only_its_acls(ssh: Any, make_ct: Any, sim: Any) -> None:
    assert make_ct(151).rc == 0
    auditor = _restricted(ssh, sim, "audit", "/vms/151=PVEAuditor")
    assert auditor.nodes(sim.node).lxc(151).config.get()["hostname"] == "ct151"
    assert make_ct(158).rc == 0
    assert [c["vmid"] for c in auditor.nodes(sim.node).lxc.get()] == [151]  # lists show what it may audit
    for call, message in (
            (lambda: auditor.nodes(sim.node).lxc(151).config.put(memory=2048),  # the endpoint's any-of check
             "Permission check failed (/vms/151, VM.Config.Disk|VM.Config.CPU|VM.Config.Memory|VM.Config.Network|"
             "VM.Config.Options)"),
            (lambda: auditor.nodes(sim.node).lxc(151).status.start.post(),
             "Permission check failed (/vms/151, VM.PowerMgmt)"),
            (lambda: auditor.nodes(sim.node).lxc(152).config.get(),
             "Permission check failed (/vms/152, VM.Audit)"),
            (lambda: auditor.nodes(sim.node).lxc.post(vmid=152, ostemplate=TEMPLATE, unprivileged=1),
             "Permission check failed")):
        with pytest.raises(ResourceException) as err:
            call()
        assert (err.value.status_code, err.value.content) == (403, message)
    # a role of its own, granted on the CT, lets it change exactly that
    assert ssh.run("pveum role add DeployCT --privs VM.Config.Memory,VM.PowerMgmt").rc == 0
    assert ssh.run("pveum acl modify /vms/151 --roles DeployCT --tokens 'root@pam!audit'").rc == 0
    auditor.nodes(sim.node).lxc(151).config.put(memory=2048)
    with pytest.raises(ResourceException) as err:
        auditor.nodes(sim.node).lxc(151).config.put(cores=3)
    assert err.value.content == "Permission check failed (/vms/151, VM.Config.CPU)"
    upid = auditor.nodes(sim.node).lxc(151).status.start.post()
    status = Tasks.blocking_status(auditor, upid, polling_interval=0.1)
    assert (status["exitstatus"], status["user"], status["tokenid"]) == ("OK", "root@pam", "audit")
    # a token sees its own tasks; another user's task needs Sys.Audit on the node
    other = ssh.run(f"pvesh get /nodes/{sim.node}/tasks --output-format json")
    root_upid = next(t["upid"] for t in json.loads(other.out) if t["user"] == "root@pam" and "tokenid" not in t)
    with pytest.raises(ResourceException) as err:
        auditor.nodes(sim.node).tasks(root_upid).status.get()
    assert err.value.content == f"Permission check failed (/nodes/{sim.node}, Sys.Audit)"
    # a wrong secret is still a 401
    bad = ProxmoxAPI(sim.address, port=sim.api_port, user="root@pam", token_name="audit", token_value="x",
                     verify_ssl=str(sim.ca_file), timeout=15)
    with pytest.raises(ResourceException) as err:
        bad.version.get()
    assert err.value.status_code == 401
    assert oct(sim.host_dir.joinpath("fs/etc/pve/priv/token.cfg").stat().st_mode & 0o777) == "0o600"


def test_missing_device_fails_at_set_and_create(ssh: Any, make_ct: Any, prox: Any, sim: Any) -> None:
    assert make_ct(153).rc == 0
    res = ssh.run("pct set 153 --dev0 /dev/nvidia9,mode=0666")
    assert (res.rc, res.err) == (255, "Device /dev/nvidia9 does not exist\n")
    res = ssh.run("pct set 153 --dev0 /dev/pve,mode=0666")
    assert res.rc == 255 and res.err in ("/dev/pve is not a device\n", "Device /dev/pve does not exist\n")
    res = make_ct(154, "--dev0 /dev/nvidia-uvm-nope")
    assert (res.rc, res.err) == (255, "Device /dev/nvidia-uvm-nope does not exist\n")
    assert ssh.run("test -e /etc/pve/lxc/154.conf").rc == 1  # nothing was created
    assert "dev0" not in ssh.run("pct config 153").out


def test_driver_reload_changes_uvm_major_under_a_running_container(ssh: Any, make_ct: Any, sim: Any) -> None:
    devs = "--dev0 /dev/nvidia0,mode=0666 --dev1 /dev/nvidiactl,mode=0666 --dev2 /dev/nvidia-uvm,mode=0666"
    assert make_ct(155, devs).rc == 0 and ssh.run("pct start 155").rc == 0
    major = "stat -c '%t' /dev/nvidia-uvm"
    before = ssh.run(major).out.strip()
    assert ssh.run(f"pct exec 155 -- {major}").out.strip() == before
    set_faults(sim.host_dir.parent.parent, sim.name, driver_reload=True)
    after = ssh.run(major).out.strip()
    assert int(after, 16) == int(before, 16) - 1
    assert re.search(rf"^{int(after, 16)} nvidia-uvm$", ssh.run("cat /proc/devices").out, re.M)
    assert ssh.run(f"pct exec 155 -- {major}").out.strip() == before  # the running CT keeps the stale node
    assert ssh.run("pct stop 155 && pct start 155").rc == 0
    assert ssh.run(f"pct exec 155 -- {major}").out.strip() == after


def test_task_status_names_the_token_and_unknown_upids_are_400(prox: Any, sim: Any) -> None:
    upid = prox.nodes(sim.node).lxc.post(vmid=156, ostemplate=TEMPLATE, hostname="t156", unprivileged=1)
    status = Tasks.blocking_status(prox, upid, polling_interval=0.1)
    assert (status["user"], status["tokenid"], status["type"]) == ("root@pam", "deploy", "vzcreate")
    listed = prox.nodes(sim.node).tasks.get(vmid=156)
    assert listed[0]["tokenid"] == "deploy" and listed[0]["user"] == "root@pam"
    unknown = upid.replace(":vzcreate:", ":vzstart:")
    for bad, message in ((unknown, "no such task\n"), ("UPID:nonsense", "unable to parse worker upid\n")):
        with pytest.raises(ResourceException) as err:
            prox.nodes(sim.node).tasks(bad).status.get()
        assert err.value.status_code == 400 and err.value.errors == {"upid": message}
    # the log of a task that has no file reads like PVE's dump_logfile
    assert prox.nodes(sim.node).tasks(unknown).log.get() == [
        {"n": 1, "t": "unable to open file - No such file or directory"}]


def test_task_log_pages_with_start_limit_and_total(ssh: Any, sim: Any, tmp_path: Path) -> None:
    # The simulator's own tasks log a few lines; a real vzcreate with a hook script logs hundreds. Lengthen a
    # finished task's log file the way such a worker would have written it.
    res = ssh.run(f"pvesh create /nodes/{sim.node}/aplinfo --storage local "
                  "--template debian-13-standard_13.1-2_amd64.tar.zst --output-format json")
    upid = json.loads(res.out.splitlines()[-1])
    log = sim.host_dir / "tasks" / f"{upid}.log"
    lines = log.read_text().splitlines()
    log.write_text("\n".join([*lines[:-1], *(f"line {i}" for i in range(120)), lines[-1]]) + "\n")
    total = len(lines) + 120
    secret = sim.token_secret_file.read_text().strip()
    url = f"https://{sim.address}:{sim.api_port}/api2/json/nodes/{sim.node}/tasks/{upid}/log"
    headers = {"Authorization": f"PVEAPIToken={sim.token_id}={secret}"}
    first = requests.get(url, headers=headers, verify=str(sim.ca_file), timeout=10).json()
    assert first["total"] == total and len(first["data"]) == 50 and first["data"][0]["n"] == 1
    page = requests.get(url, params={"start": 100, "limit": 50}, headers=headers, verify=str(sim.ca_file),
                        timeout=10).json()
    assert [e["n"] for e in page["data"]] == list(range(101, total + 1))
    assert page["data"][-1]["t"] == "TASK OK"
    everything = requests.get(url, params={"limit": 0}, headers=headers, verify=str(sim.ca_file), timeout=10).json()
    assert len(everything["data"]) == total
    # the tool reads the whole log when it reports a failed task (here through its real token client)
    from orchestrator.inventory.loader import load_inventory
    from orchestrator.remote.pve import HttpsPve, read_task_log
    from orchestrator.runlog import Metrics

    inv_dir = tmp_path / "inventory"
    inv_dir.mkdir()
    (inv_dir / "sim.yaml").write_text((sim.host_dir.parent.parent / "inventory.yaml").read_text())
    for name in ("profiles.yaml", "presets.yaml"):
        shutil.copy(EXAMPLE_INVENTORY / name, inv_dir / name)
    client = HttpsPve(load_inventory(inv_dir).hosts[sim.name], Metrics())
    assert read_task_log(client, sim.node, upid) == [e["t"] for e in everything["data"]]


def test_pvesh_prints_text_unless_asked_for_json(ssh: Any, make_ct: Any, sim: Any) -> None:
    assert make_ct(157).rc == 0
    text = ssh.run(f"LC_ALL=C pvesh get /nodes/{sim.node}/lxc/157/config").out
    lines = text.splitlines()
    assert lines[0].startswith("+--") and lines[1].split() == ["|", "key", "|", "value", "|"]
    assert lines[2].startswith("+==")
    assert any(re.fullmatch(r"\| hostname +\| ct157 +\|", ln) for ln in lines)
    utf8 = ssh.run(f"LC_ALL=C.UTF-8 pvesh get /nodes/{sim.node}/lxc").out.splitlines()
    assert utf8[0].startswith("┌─") and utf8[2].startswith("╞═") and utf8[-1].startswith("└─")
    assert "157" in utf8[3] and "stopped" in utf8[3]
    plain = ssh.run(f"pvesh get /nodes/{sim.node}/lxc/157/config --noborder --noheader").out
    assert re.search(r"^hostname +ct157$", plain, re.M) and "|" not in plain
    assert ssh.run(f"pvesh get /nodes/{sim.node}/lxc/157/status/current --output-format json").out.startswith("{")
    assert ssh.run("pvesh get /version").out.count("release") == 1


def test_a_token_lacking_sdn_use_allocate_or_datastore_privileges_gets_pves_403_and_the_tool_names_it(
        ssh: Any, sim: Any, tmp_path: Path) -> None:
    """pve-container check_ct_modify_config_perm / pve-guest-common check_vnet_access (net0 bridge: SDN.Use on the
    localnetwork zone; nesting: VM.Allocate), pve-manager apl_download (Datastore.AllocateTemplate) and create's
    rootfs volume (Datastore.AllocateSpace): each a 403 with PVE's text, each named by the tool's error."""
    from orchestrator.errors import PermissionDenied
    from orchestrator.inventory.loader import load_inventory
    from orchestrator.remote.pve import HttpsPve
    from orchestrator.runlog import Metrics

    made = ssh.run("pct create 159 local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst --hostname ct159 "
                   "--rootfs local-lvm:8 --unprivileged 1 --net0 name=eth0,bridge=vmbr0,ip=dhcp")
    assert made.rc == 0, made.err
    res = ssh.run("pveum user token add root@pam lean --privsep 1 --output-format json")
    secret = tmp_path / "lean-token"
    secret.write_text(json.loads(res.out)["value"] + "\n")
    secret.chmod(0o600)
    # every VM.Config.* privilege on the CTs, but not VM.Allocate; nothing on storage or SDN
    assert ssh.run("pveum role add DeployLean --privs VM.Audit,VM.PowerMgmt,VM.Config.Network,VM.Config.Options,"
                   "VM.Config.CPU,VM.Config.Memory,VM.Config.Disk").rc == 0
    assert ssh.run("pveum acl modify /vms --roles DeployLean --tokens 'root@pam!lean'").rc == 0
    inv_dir = tmp_path / "inventory"
    inv_dir.mkdir()
    (inv_dir / "sim.yaml").write_text((sim.host_dir.parent.parent / "inventory.yaml").read_text()
                                      .replace(sim.token_id, "root@pam!lean")
                                      .replace(str(sim.token_secret_file), str(secret)))
    for name in ("profiles.yaml", "presets.yaml"):
        shutil.copy(EXAMPLE_INVENTORY / name, inv_dir / name)
    client = HttpsPve(load_inventory(inv_dir).hosts[sim.name], Metrics())
    assert client.identity == "root@pam!lean"
    node = f"/nodes/{sim.node}"
    for (method, path, params), (acl_path, priv, role) in (
            (("put", f"{node}/lxc/159/config", {"net0": "name=eth0,bridge=vmbr0,ip=dhcp,tag=30"}),
             ("/sdn/zones/localnetwork/vmbr0", "SDN.Use", "PVESDNUser")),  # the old value (untagged) first
            (("put", f"{node}/lxc/159/config", {"features": "nesting=1"}), ("/vms/159", "VM.Allocate", "PVEVMAdmin")),
            (("post", f"{node}/aplinfo", {"storage": "local", "template": "debian-13-standard_13.1-2_amd64.tar.zst"}),
             ("/storage/local", "Datastore.AllocateTemplate", "PVEDatastoreAdmin"))):
        with pytest.raises(PermissionDenied) as err:
            client.call(method, path, **params)
        assert f"403 Forbidden: Permission check failed ({acl_path}, {priv})" in err.value.what, \
            err.value.what
        assert err.value.details["missing"] == {"path": acl_path, "privileges": [priv]}
        assert f"lacks {priv} on {acl_path}" in err.value.fix and f"--roles {role}" in err.value.fix
    # then the new one: a tagged bridge needs SDN.Use on that VLAN (or propagated from the bridge)
    assert ssh.run("pveum acl modify /sdn/zones/localnetwork/vmbr0 --roles PVESDNUser --propagate 0 "
                   "--tokens 'root@pam!lean'").rc == 0
    with pytest.raises(PermissionDenied) as err:
        client.call("put", f"{node}/lxc/159/config", net0="name=eth0,bridge=vmbr0,ip=dhcp,tag=30")
    assert err.value.details["missing"] == {"path": "/sdn/zones/localnetwork/vmbr0/30", "privileges": ["SDN.Use"]}
    # granted as the fix says, each call goes through
    assert ssh.run("pveum acl modify /sdn/zones/localnetwork/vmbr0 --roles PVESDNUser --tokens 'root@pam!lean'"
                   ).rc == 0
    client.call("put", f"{node}/lxc/159/config", net0="name=eth0,bridge=vmbr0,ip=dhcp,tag=30")
    assert ssh.run("pveum acl modify /vms/159 --roles PVEVMAdmin --tokens 'root@pam!lean'").rc == 0
    client.call("put", f"{node}/lxc/159/config", features="nesting=1")
    assert "features: nesting=1\n" in ssh.run("cat /etc/pve/lxc/159.conf").out
    # creating needs Datastore.AllocateSpace on the rootfs storage (VM.Allocate on the new CT is there now)
    assert ssh.run("pveum acl modify /vms/160 --roles PVEVMAdmin --tokens 'root@pam!lean'").rc == 0
    with pytest.raises(PermissionDenied) as err:
        client.call("post", f"{node}/lxc", vmid=160, ostemplate=TEMPLATE, unprivileged=1, rootfs="local-lvm:8")
    assert err.value.details["missing"] == {"path": "/storage/local-lvm", "privileges": ["Datastore.AllocateSpace"]}
    assert "--roles PVEDatastoreUser" in err.value.fix
