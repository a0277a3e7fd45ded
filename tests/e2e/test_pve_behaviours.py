"""`deploy` against what a real PVE node does: keys that stay pending on a running container, a driver reload
under a running container, and a privilege-separated API token that lacks a privilege."""

from __future__ import annotations

import json
import re

import yaml

from tests.e2e.conftest import DeployEnv


def test_pending_features_make_plan_and_up_restart_the_container(converged: DeployEnv) -> None:
    host = converged.host
    assert converged.ssh("pct set 120 --features nesting=0").rc == 0  # a running CT keeps it pending
    assert "[pve:pending]\nfeatures: nesting=0" in converged.ssh("cat /etc/pve/lxc/120.conf").stdout
    plan = converged.run("--json", "plan", "host", host)
    assert plan.rc == 0, plan.text
    changes = {s["name"]: s for s in plan.json["steps"]}["container"]["changes"]
    assert changes == ["config of CT 120: features: nesting=0 → nesting=1",
                       "restart CT 120: features cannot change on a running container (PVE keeps it pending "
                       "until the next start)", "start CT 120"]
    up = converged.run("up", "host", host, "--skip-bench")
    assert up.rc == 0, up.text
    assert "restarting CT 120: features cannot change on a running container" in up.stdout
    conf = converged.ssh("cat /etc/pve/lxc/120.conf").stdout
    assert "features: nesting=1\n" in conf and "[pve:pending]" not in conf
    again = converged.run("--json", "up", "host", host, "--skip-bench")
    assert again.rc == 0 and {s["name"]: s for s in again.json["steps"]}["container"]["changes"] == []


def test_up_after_a_driver_reload_restarts_the_container_onto_the_new_uvm_major(converged: DeployEnv) -> None:
    host = converged.host
    old = converged.ct("stat -c %t:%T /dev/nvidia-uvm").stdout.strip()
    converged.faults(driver_reload=True)
    new = converged.ssh("stat -c %t:%T /dev/nvidia-uvm").stdout.strip()
    assert new != old and converged.ct("stat -c %t:%T /dev/nvidia-uvm").stdout.strip() == old
    plan = converged.run("--json", "plan", "host", host)
    changes = {s["name"]: s for s in plan.json["steps"]}["container"]["changes"]
    assert changes[0].startswith("restart CT 120: /dev/nvidia-uvm is ") and "driver reloaded" in changes[0]
    up = converged.run("up", "host", host, "--skip-bench")
    assert up.rc == 0, up.text
    assert converged.ct("stat -c %t:%T /dev/nvidia-uvm").stdout.strip() == new
    assert converged.run("status", "host", host).rc == 0


def test_a_token_lacking_a_privilege_gets_the_pveum_command_that_grants_it(converged: DeployEnv) -> None:
    host = converged.host
    made = converged.ssh("pveum user token add root@pam ops --privsep 1 --output-format json")
    assert made.rc == 0, made.stderr
    secret_file = converged.inventory.parent / "ops-token"
    secret_file.write_text(json.loads(made.stdout)["value"] + "\n")
    secret_file.chmod(0o600)
    assert converged.ssh("pveum acl modify /vms/120 --roles PVEAuditor --tokens 'root@pam!ops'").rc == 0
    inv = yaml.safe_load((converged.inventory / "sim.yaml").read_text())
    inv["hosts"][host]["pve"]["api"].update(token_id="root@pam!ops", token_secret={"file": str(secret_file)})
    (converged.inventory / "sim.yaml").write_text(yaml.safe_dump(inv))
    assert converged.ssh("pct stop 120").rc == 0

    up = converged.run("--json", "up", "host", host, "--skip-bench")
    assert up.rc == 2, up.text
    err = up.json
    assert (err["error"], err["exit_code"], err["host"], err["step"]) == ("permission-denied", 2, host, "container")
    assert "403" in err["what"] and "Permission check failed (/vms/120, VM.PowerMgmt)" in err["what"]
    assert err["details"]["missing"] == {"path": "/vms/120", "privileges": ["VM.PowerMgmt"]}
    assert "lacks VM.PowerMgmt on /vms/120" in err["fix"]
    grant = re.search(r"pveum acl modify /vms/120 --tokens 'root@pam!ops' --roles PVEVMAdmin", err["fix"])
    assert grant, err["fix"]
    assert converged.ssh("pct status 120").stdout == "status: stopped\n"

    assert converged.ssh(grant.group(0)).rc == 0  # the command the error names, as the operator would run it
    again = converged.run("up", "host", host, "--skip-bench")
    assert again.rc == 0, again.text
    assert converged.ssh("pct status 120").stdout == "status: running\n"
