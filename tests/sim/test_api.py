"""The HTTPS API simulator through proxmoxer/requests with real TLS verification against the simulator's CA."""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests
from proxmoxer import ProxmoxAPI, ResourceException
from proxmoxer.core import AuthenticationError
from proxmoxer.tools import Tasks

from simulator.manager.faults import set_faults

pytestmark = pytest.mark.e2e
TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


def url(sim: Any, path: str) -> str:
    return f"https://{sim.address}:{sim.api_port}/api2/json{path}"


def test_schema_invalid_create_is_rejected_like_pve(sim: Any) -> None:
    secret = sim.token_secret_file.read_text().strip()
    resp = requests.post(url(sim, f"/nodes/{sim.node}/lxc"), verify=str(sim.ca_file), timeout=10,
                         headers={"Authorization": f"PVEAPIToken={sim.token_id}={secret}"},
                         data={"vmid": "130", "ostemplate": TEMPLATE, "net0": "bridge=vmbr0", "bogus": "1",
                               "memory": "8", "ostype": "plan9", "features": "nesting=maybe"})
    assert resp.status_code == 400 and resp.reason == "Parameter verification failed."
    body = resp.json()
    assert body["data"] is None
    assert body["errors"] == {
        "bogus": "property is not defined in schema and the schema does not allow additional properties\n",
        "net0": "invalid format - format error\nnet0.name: property is missing and it is not optional\n",
        "memory": "value must have a minimum value of 16\n",
        "ostype": "value 'plan9' does not have a value in the enumeration 'debian, devuan, ubuntu, centos, "
                  "fedora, opensuse, archlinux, alpine, gentoo, nixos, unmanaged'\n",
        "features": "invalid format - format error\nfeatures.nesting: type check ('boolean') failed - got "
                    "'maybe'\n",
    }


def test_token_cannot_pass_devices(prox: Any, sim: Any) -> None:
    upid = prox.nodes(sim.node).lxc.post(vmid=131, ostemplate=TEMPLATE, hostname="t131", unprivileged=1,
                                         net0="name=eth0,bridge=vmbr0,ip=dhcp", rootfs="local-lvm:8")
    status = Tasks.blocking_status(prox, upid, polling_interval=0.1)
    assert status["exitstatus"] == "OK" and upid.endswith(":vzcreate:131:root@pam!deploy:")
    with pytest.raises(ResourceException) as err:
        prox.nodes(sim.node).lxc(131).config.put(dev0="/dev/nvidia0,mode=0666")
    assert err.value.status_code == 403
    assert "configuring device passthrough is only allowed for root@pam" in err.value.content
    with pytest.raises(ResourceException) as err:
        prox.nodes(sim.node).lxc.post(vmid=132, ostemplate=TEMPLATE, unprivileged=0, features="nesting=1")
    assert err.value.status_code == 403 and "privileged container" in err.value.content
    conf = prox.nodes(sim.node).lxc(131).config.get()
    assert conf["unprivileged"] == 1 and "dev0" not in conf  # PVE 9 default on create


def test_digest_and_duplicate_and_nextid(prox: Any, sim: Any) -> None:
    upid = prox.nodes(sim.node).lxc.post(vmid=133, ostemplate=TEMPLATE, hostname="t133")
    Tasks.blocking_status(prox, upid, polling_interval=0.1)
    conf = prox.nodes(sim.node).lxc(133).config.get()
    prox.nodes(sim.node).lxc(133).config.put(memory=2048, digest=conf["digest"])
    with pytest.raises(ResourceException) as err:
        prox.nodes(sim.node).lxc(133).config.put(memory=4096, digest=conf["digest"])
    assert err.value.status_code == 500
    assert err.value.content == "detected modified configuration - file changed by other user? Try again."
    with pytest.raises(ResourceException) as err:
        prox.nodes(sim.node).lxc.post(vmid=133, ostemplate=TEMPLATE)
    assert err.value.content == f"CT 133 already exists on node '{sim.node}'"
    with pytest.raises(ResourceException) as err:
        prox.cluster.nextid.get(vmid=133)
    assert err.value.status_code == 400 and err.value.errors == {"vmid": "VM 133 already exists\n"}
    assert int(prox.cluster.nextid.get()) == 100
    vms = prox.cluster.resources.get(type="vm")
    assert [(v["id"], v["status"]) for v in vms] == [("lxc/133", "stopped")]


def test_templates_download_and_content(prox: Any, sim: Any) -> None:
    names = [a["template"] for a in prox.nodes(sim.node).aplinfo.get()]
    # the index lists today's versions: the 12.7-1 the host keeps in its storage is no longer offered
    assert "debian-12-standard_12.12-1_amd64.tar.zst" in names and TEMPLATE.split("/")[1] not in names
    with pytest.raises(ResourceException) as err:
        prox.nodes(sim.node).aplinfo.post(storage="local", template=TEMPLATE.split("/")[1])
    assert err.value.status_code == 400 and err.value.errors == {"template": "no such template\n"}
    # another index (the `aplinfo` fault): what the node offers is what it downloads
    set_faults(sim.host_dir.parent.parent, sim.name, aplinfo="debian-12-standard_12.9-1_amd64.tar.zst")
    assert [a["template"] for a in prox.nodes(sim.node).aplinfo.get()] == ["debian-12-standard_12.9-1_amd64.tar.zst"]
    set_faults(sim.host_dir.parent.parent, sim.name, aplinfo=None)
    new = next(n for n in names if n.startswith("debian-13"))
    upid = prox.nodes(sim.node).aplinfo.post(storage="local", template=new)
    assert Tasks.blocking_status(prox, upid, polling_interval=0.1)["exitstatus"] == "OK"
    content = prox.nodes(sim.node).storage("local").content.get(content="vztmpl")
    assert {c["volid"] for c in content} >= {f"local:vztmpl/{new}", TEMPLATE}
    assert all({"volid", "format", "size", "ctime"} <= set(c) for c in content)
    pci = prox.nodes(sim.node).hardware.pci.get()
    assert len([d for d in pci if d["vendor"] == "0x10de"]) == 8


def test_a_debian_template_that_cannot_be_built_fails_the_download_task(sim: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The download of debian-13-standard is the real trixie template built here; a build that fails (no mirror
    serves trixie) is the task's error, with debootstrap's words, as a failed download is on a real node."""
    from simulator.config import HostPaths
    from simulator.lxc import template
    from simulator.pve import api

    def fail(**_: Any) -> Any:
        raise template.TemplateError("debootstrap of Debian trixie from http://m.example/debian failed (exit 1): "
                                     "E: Failed getting release file")

    monkeypatch.setattr(template, "ensure", fail)
    name = "debian-13-standard_13.1-2_amd64.tar.zst"
    stored = HostPaths(sim.host_dir).template_cache / name
    stored.unlink(missing_ok=True)  # an earlier test may have downloaded it
    with pytest.raises(api.TaskFailed) as err:
        api.handle(HostPaths(sim.host_dir), "POST", f"/nodes/{sim.node}/aplinfo", {"storage": "local",
                   "template": name}, api.Caller(background=False))
    assert err.value.exitstatus == (f"download of {name} failed: debootstrap of Debian trixie from "
                                    "http://m.example/debian failed (exit 1): E: Failed getting release file")
    assert not stored.exists()  # nothing half-written in the storage


def test_task_fail_and_api_delay_faults(prox: Any, sim: Any) -> None:
    root = sim.host_dir.parent.parent
    set_faults(root, sim.name, task_fail="vzcreate")
    upid = prox.nodes(sim.node).lxc.post(vmid=134, ostemplate=TEMPLATE)
    running = prox.nodes(sim.node).tasks(upid).status.get()
    assert running["status"] == "running"
    status = Tasks.blocking_status(prox, upid, polling_interval=0.1)
    assert status["status"] == "stopped" and status["exitstatus"].startswith("unable to create CT 134 - ")
    assert prox.nodes(sim.node).tasks(upid).log.get()[-1]["t"].startswith("TASK ERROR: unable to create CT 134")
    set_faults(root, sim.name, task_fail=None, api_delay_s=0.4)
    t0 = time.monotonic()
    prox.version.get()
    assert time.monotonic() - t0 >= 0.4


def test_ticket_auth_and_csrf(sim: Any) -> None:
    password = sim.root_password_file.read_text().strip()
    p = ProxmoxAPI(sim.address, port=sim.api_port, user="root@pam", password=password,
                   verify_ssl=str(sim.ca_file))
    upid = p.nodes(sim.node).lxc.post(vmid=135, ostemplate=TEMPLATE, hostname="t135",
                                      dev0="/dev/nvidia0,mode=0666")
    assert Tasks.blocking_status(p, upid, polling_interval=0.1)["exitstatus"] == "OK"
    assert p.nodes(sim.node).lxc(135).config.get()["dev0"] == "/dev/nvidia0,mode=0666"
    ticket, _csrf = p._backend.auth.get_tokens()
    resp = requests.put(url(sim, f"/nodes/{sim.node}/lxc/135/config"), data={"cores": "2"},
                        cookies={"PVEAuthCookie": ticket}, verify=str(sim.ca_file), timeout=10)
    assert resp.status_code == 401 and "csrf" in resp.reason
    with pytest.raises(AuthenticationError, match="code: 401"):
        ProxmoxAPI(sim.address, port=sim.api_port, user="root@pam", password="wrong",
                   verify_ssl=str(sim.ca_file))


def test_tls_is_verified(sim: Any, tmp_path: Any) -> None:
    other = tmp_path / "other-ca"
    from simulator.pve.tls import ensure_certs

    ensure_certs(other, sim.address, "elsewhere")
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(url(sim, "/version"), verify=str(other / "ca.pem"), timeout=10)
