"""API tokens, roles and ACLs of the simulated node, kept in PVE's own `/etc/pve/user.cfg` line format.

Privileges and the built-in roles follow pve-access-control (PVE/AccessControl.pm `$privgroups`): every category
has admin, user and audit privileges, and PVE<Cat>Admin / PVE<Cat>User / PVEAuditor are built from them. A token
without privilege separation (`privsep=0`, like `deploy sim up`'s `root@pam!deploy`) has its user's rights, so
root@pam's token may do everything except what PVE keeps for root@pam itself (devN, ...). A `privsep=1` token
has only the ACLs granted to the token; a missing privilege is a 403
`Permission check failed (<path>, <privilege>)` (RPCEnvironment check / check_any). Token secrets live in the 0600 file
`/etc/pve/priv/token.cfg`, as on a real node.
"""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.config import HostPaths, locked, write_text_atomic
from simulator.pve.errors import PveError

#: PVE's superuser: every permission check passes for it.
ROOT_USER = "root@pam"

#: category -> (root-only, admin, user, audit) privileges (pve-access-control's privilege groups).
PRIV_GROUPS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "VM": ((), ("VM.Config.Disk", "VM.Config.CPU", "VM.Config.Memory", "VM.Config.Network", "VM.Config.HWType",
                "VM.Config.Options", "VM.Allocate", "VM.Clone", "VM.GuestAgent.Unrestricted", "VM.Migrate",
                "VM.Replicate", "VM.Snapshot", "VM.Snapshot.Rollback"),
           ("VM.Config.CDROM", "VM.Config.Cloudinit", "VM.Console", "VM.Backup", "VM.GuestAgent.FileRead",
            "VM.GuestAgent.FileSystemMgmt", "VM.GuestAgent.FileWrite", "VM.PowerMgmt"),
           ("VM.Audit", "VM.GuestAgent.Audit")),
    "Sys": (("Sys.PowerMgmt", "Sys.Modify", "Sys.Incoming", "Sys.AccessNetwork"), ("Sys.Console", "Sys.Syslog"),
            (), ("Sys.Audit",)),
    "Datastore": ((), ("Datastore.Allocate", "Datastore.AllocateTemplate"), ("Datastore.AllocateSpace",),
                  ("Datastore.Audit",)),
    "SDN": ((), ("SDN.Allocate", "SDN.Audit"), ("SDN.Use",), ("SDN.Audit",)),
    "User": (("Realm.Allocate",), ("User.Modify", "Group.Allocate", "Realm.AllocateUser"), (), ()),
    "Pool": ((), ("Pool.Allocate",), ("Pool.Audit",), ("Pool.Audit",)),
    "Mapping": ((), ("Mapping.Modify",), ("Mapping.Use",), ("Mapping.Audit",)),
}


def builtin_roles() -> dict[str, frozenset[str]]:
    roles: dict[str, set[str]] = {"NoAccess": set(), "Administrator": {"Permissions.Modify"}, "PVEAdmin": set(),
                                  "PVEAuditor": set(), "PVETemplateUser": {"VM.Clone", "VM.Audit"}}
    for cat, (root, admin, user, audit) in PRIV_GROUPS.items():
        roles["Administrator"] |= {*root, *admin, *user, *audit}
        roles[f"PVE{cat}Admin"] = {*admin, *user, *audit}
        roles["PVEAdmin"] |= {*admin, *user, *audit}
        if user:
            roles[f"PVE{cat}User"] = {*user, *audit}
        roles["PVEAuditor"] |= set(audit)
    roles["PVEAdmin"].discard("Mapping.Modify")
    return {k: frozenset(v) for k, v in roles.items()}


BUILTIN_ROLES = builtin_roles()
#: `deploy sim up`'s token: not listed in user.cfg, privsep=0 (root@pam's rights).
DEFAULT_TOKEN = "root@pam!deploy"
ALL_PRIVS = BUILTIN_ROLES["Administrator"]


@dataclass
class Acl:
    path: str
    ugid: str  # user, @group or token id
    role: str
    propagate: bool = True


@dataclass
class UserCfg:
    """The parts of /etc/pve/user.cfg the simulator uses: tokens (privsep flag), custom roles, ACL entries."""

    tokens: dict[str, bool] = field(default_factory=dict)  # token id -> privsep
    roles: dict[str, frozenset[str]] = field(default_factory=dict)
    acl: list[Acl] = field(default_factory=list)

    def render(self) -> str:
        out = ["user:root@pam:1:0:::root@localhost:::\n"]
        out += [f"token:{tid}:0:{int(privsep)}::\n" for tid, privsep in sorted(self.tokens.items())]
        out += [f"role:{name}:{','.join(sorted(privs))}:\n" for name, privs in sorted(self.roles.items())]
        out += [f"acl:{int(a.propagate)}:{a.path}:{a.ugid}:{a.role}:\n" for a in self.acl]
        return "".join(out)

    def all_roles(self) -> dict[str, frozenset[str]]:
        return {**BUILTIN_ROLES, **self.roles}


def _path(hp: HostPaths) -> Path:
    return hp.fs / "etc" / "pve" / "user.cfg"


def _secrets(hp: HostPaths) -> Path:
    return hp.fs / "etc" / "pve" / "priv" / "token.cfg"


def load(hp: HostPaths) -> UserCfg:
    cfg = UserCfg()
    try:
        text = _path(hp).read_text()
    except FileNotFoundError:
        return cfg
    for line in text.splitlines():
        kind, _, rest = line.partition(":")
        fields = rest.split(":")
        if kind == "token" and len(fields) >= 3:
            cfg.tokens[fields[0]] = fields[2] == "1"
        elif kind == "role" and len(fields) >= 2:
            cfg.roles[fields[0]] = frozenset(p for p in fields[1].split(",") if p)
        elif kind == "acl" and len(fields) >= 4:
            for ugid in fields[2].split(","):
                for role in fields[3].split(","):
                    cfg.acl.append(Acl(fields[1], ugid, role, fields[0] == "1"))
    return cfg


def _save(hp: HostPaths, cfg: UserCfg) -> None:
    write_text_atomic(_path(hp), cfg.render(), 0o640)


def _normalise(path: str) -> str:
    return "/" + "/".join(p for p in path.split("/") if p)


def privileges(hp: HostPaths, user: str, path: str) -> frozenset[str]:
    """The privileges `user` (a user or a token id) has on `path` (AccessControl::roles + permissions)."""
    if user == ROOT_USER:
        return ALL_PRIVS
    cfg = load(hp)
    if "!" in user:
        base = user.split("!", 1)[0]
        privsep = cfg.tokens.get(user, False if user == DEFAULT_TOKEN else None)
        if privsep is None:
            return frozenset()
        if not privsep:
            return privileges(hp, base, path)
    path = _normalise(path)
    parts = [""] + [p for p in path.split("/") if p]
    all_roles = cfg.all_roles()
    roles: set[str] = set()
    for depth in range(1, len(parts) + 1):
        here = _normalise("/".join(parts[:depth]))
        final = depth == len(parts)
        entries = [a for a in cfg.acl if a.ugid == user and _normalise(a.path) == here and (final or a.propagate)]
        if entries:
            roles = {a.role for a in entries}
    if "NoAccess" in roles:
        return frozenset()
    return frozenset().union(*(all_roles.get(r, frozenset()) for r in roles)) if roles else frozenset()


def allowed(hp: HostPaths, user: str, path: str, privs: list[str], any_of: bool = False) -> bool:
    have = privileges(hp, user, path)
    return any(p in have for p in privs) if any_of else all(p in have for p in privs)


def require(hp: HostPaths, user: str, path: str, privs: list[str], any_of: bool = False) -> None:
    """RPCEnvironment check / check_any: 403 naming the path and the first missing privilege (or all, joined
    with `|`, for any-of checks)."""
    have = privileges(hp, user, path)
    if any_of:
        if not any(p in have for p in privs):
            raise PveError(f"Permission check failed ({path}, {'|'.join(privs)})", 403)
        return
    for priv in privs:
        if priv not in have:
            raise PveError(f"Permission check failed ({path}, {priv})", 403)


# ------------------------------------------------------------------------------------------------ pveum actions


def add_token(hp: HostPaths, tokenid: str, privsep: bool = True) -> str:
    """`pveum user token add USER NAME --privsep B`: returns the new secret (stored 0600, like PVE)."""
    if "!" not in tokenid or "@" not in tokenid.split("!", 1)[0]:
        raise PveError(f"invalid token id '{tokenid}'", 400)
    with locked(_path(hp)):
        cfg = load(hp)
        if tokenid in cfg.tokens:
            raise PveError("Token already exists.", 500)
        cfg.tokens[tokenid] = privsep
        _save(hp, cfg)
        secret = f"{secrets.token_hex(4)}-{secrets.token_hex(2)}-{secrets.token_hex(2)}-{secrets.token_hex(2)}-" \
                 f"{secrets.token_hex(6)}"
        sfile = _secrets(hp)
        sfile.parent.mkdir(parents=True, exist_ok=True)
        old = sfile.read_text() if sfile.exists() else ""
        write_text_atomic(sfile, old + f"{tokenid} {secret}\n", 0o600)
        os.chmod(sfile, 0o600)
    return secret


def token_secret(hp: HostPaths, tokenid: str) -> str | None:
    try:
        lines = _secrets(hp).read_text().splitlines()
    except FileNotFoundError:
        return None
    return next((ln.split(" ", 1)[1] for ln in lines if ln.split(" ", 1)[0] == tokenid), None)


def add_role(hp: HostPaths, name: str, privs: list[str]) -> None:
    """`pveum role add NAME --privs A,B`."""
    unknown = [p for p in privs if p not in ALL_PRIVS]
    if unknown:
        raise PveError(f"invalid privilege '{unknown[0]}'", 400)
    with locked(_path(hp)):
        cfg = load(hp)
        if name in cfg.all_roles():
            raise PveError(f"role '{name}' already exists", 500)
        cfg.roles[name] = frozenset(privs)
        _save(hp, cfg)


def modify_acl(hp: HostPaths, path: str, roles: list[str], tokens: list[str], propagate: bool = True,
               delete: bool = False) -> None:
    """`pveum acl modify PATH --roles R --tokens T [--propagate B] [--delete]`."""
    with locked(_path(hp)):
        cfg = load(hp)
        for role in roles:
            if role not in cfg.all_roles():
                raise PveError(f"role '{role}' does not exist", 500)
        for tid in tokens:
            if tid not in cfg.tokens:
                raise PveError(f"token '{tid}' does not exist", 500)
        path = _normalise(path)
        cfg.acl = [a for a in cfg.acl if not (_normalise(a.path) == path and a.ugid in tokens and a.role in roles)]
        if not delete:
            cfg.acl += [Acl(path, t, r, propagate) for t in tokens for r in roles]
        _save(hp, cfg)


def config_privilege(key: str) -> str | None:
    """The privilege check_ct_modify_config_perm asks for one config key (None: a root@pam-only key, checked by
    Node.check_modify_perm, or `tags`, which has rules of its own that the simulator does not model)."""
    if key in ("cores", "cpuunits", "cpulimit"):
        return "VM.Config.CPU"
    if key == "rootfs" or re.fullmatch(r"mp\d+", key):
        return "VM.Config.Disk"
    if key in ("memory", "swap"):
        return "VM.Config.Memory"
    if re.fullmatch(r"net\d+", key) or key in ("nameserver", "searchdomain", "hostname"):
        return "VM.Config.Network"
    if re.fullmatch(r"dev\d+", key) or key in ("hookscript", "features", "tags"):
        return None
    return "VM.Config.Options"


def check_schema(hp: HostPaths, user: str, check: list[Any], params: dict[str, Any]) -> None:
    """An endpoint's `permissions.check` from the API schema: `["perm", PATH, PRIVS, "any", 1]` (path
    templates filled from the call). Other check kinds are left to the handlers."""
    if user == ROOT_USER or not check or check[0] != "perm":
        return
    path = re.sub(r"\{(\w+)\}", lambda m: str(params.get(m.group(1), m.group(0))), str(check[1]))
    require(hp, user, path, list(check[2]), any_of="any" in check[3:])
