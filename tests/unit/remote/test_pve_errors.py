"""The PVE adapter's reading of PVE answers: a 403's missing privilege and the pveum commands that grant it, and
pending changes. (Reading a failed task's whole log in pages is tested against the simulated API: tests/sim.)"""

from __future__ import annotations

from orchestrator.parsers.pve import MissingPrivilege, parse_pending, parse_permission_error
from orchestrator.remote.pve import grant_fix, required_privilege


def test_the_missing_privilege_is_read_from_pves_message() -> None:
    assert parse_permission_error("Permission check failed (/vms/120, VM.PowerMgmt)\n") == MissingPrivilege(
        "/vms/120", ("VM.PowerMgmt",))
    any_of = parse_permission_error("Permission check failed (/vms/120, VM.Config.Disk|VM.Config.CPU)")
    assert any_of == MissingPrivilege("/vms/120", ("VM.Config.Disk", "VM.Config.CPU"))
    assert parse_permission_error("Permission check failed") is None
    assert parse_permission_error("configuring device passthrough is only allowed for root@pam") is None
    assert required_privilege("post", "/nodes/pve1/lxc", {"vmid": 120}) == MissingPrivilege("/vms/120",
                                                                                            ("VM.Allocate",))
    assert required_privilege("put", "/nodes/pve1/lxc/120/config", {}) is None


def test_the_fix_names_the_privilege_path_and_the_pveum_commands() -> None:
    fix = grant_fix("root@pam!deploy", MissingPrivilege("/vms/120", ("VM.PowerMgmt",)))
    assert "lacks VM.PowerMgmt on /vms/120" in fix
    assert "pveum acl modify /vms/120 --tokens 'root@pam!deploy' --roles PVEVMAdmin" in fix
    assert "pveum role add DeployPriv --privs VM.PowerMgmt" in fix
    store = grant_fix("root@pam!deploy", MissingPrivilege("/storage/local-lvm", ("Datastore.AllocateSpace",)))
    assert "--roles PVEDatastoreUser" in store
    root_only = grant_fix("root@pam!deploy", MissingPrivilege("/", ("Sys.Modify",)))
    assert "Sys.Modify is kept for administrators" in root_only and "unprivileged: true" in root_only
    assert "one of VM.Config.Disk, VM.Config.CPU" in grant_fix(
        "u@pve!t", MissingPrivilege("/vms/1", ("VM.Config.Disk", "VM.Config.CPU")))


def test_pending_lists_only_waiting_keys() -> None:
    text = ('[{"key":"cores","value":"4"},{"key":"features","value":"nesting=1","pending":"keyctl=1,nesting=1"},'
            '{"key":"dev3","value":"/dev/nvidia3","delete":1},{"key":"digest","value":"ab"}]')
    got = parse_pending(text)
    assert sorted(got) == ["dev3", "features"]
    assert got["features"].pending == "keyctl=1,nesting=1" and got["dev3"].delete
    assert parse_pending("CT 120 does not exist") == {}
