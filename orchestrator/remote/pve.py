"""The PVE API adapter: the only module that talks to proxmoxer.

Two paths to one interface:
- `HttpsPve`: proxmoxer's real https backend with an API token. Fine for lifecycle calls; PVE refuses devN and
  raw lxc.* keys for tokens ("configuring device passthrough is only allowed for root@pam").
- `PveshPve`: `pvesh` run as root over our verified SSH connection, which PVE treats as root@pam. We never use
  proxmoxer's own SSH backends: they accept unknown host keys.
`passthrough_client` picks the one allowed to write devN and says why when neither is.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
import warnings
from typing import Any, Protocol

from orchestrator.errors import ConfigError, PermissionDenied, RemoteError, TaskFailed
from orchestrator.inventory.models import Host
from orchestrator.parsers.pve import MissingPrivilege, parse_permission_error
from orchestrator.remote.container import Node
from orchestrator.runlog import Metrics

#: The CA that signs every PVE node's API certificate (pve-cluster), to copy here and name in pve.api.verify.
PVE_CA = "/etc/pve/pve-root-ca.pem"
CERT_FIX = (f"PVE signs its API certificate with the cluster's own CA: copy {PVE_CA} from the node to this machine "
            "and set pve.api.verify to that file's path (or give the node a certificate this machine trusts)")
_warned_unverified: set[str] = set()


def warn_unverified(host: Host) -> None:
    """One warning per host and process: with pve.api.verify false the token travels to whoever answers."""
    import urllib3  # requests' transport: its own warning would repeat on every request; ours says it once

    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    if host.name in _warned_unverified:
        return
    _warned_unverified.add(host.name)
    print(f"warning: host {host.name}: pve.api.verify is false: the PVE API's TLS certificate is not checked, so "
          f"anyone on the path can pose as the node and read the API token. {CERT_FIX}.", file=sys.stderr)


def is_certificate_error(exc: BaseException) -> bool:
    """requests' SSLError (or an ssl error under it) for a certificate the client does not trust."""
    import ssl  # here: loaded by the API client when it connects; a converged run makes no API call

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


UPID_RE = re.compile(r"^UPID:[^:]+:[0-9A-Fa-f]{8}:[0-9A-Fa-f]{8,9}:[0-9A-Fa-f]{8}:[^:]*:[^:]*:[^:]+:")


class PveClient(Protocol):
    identity: str
    can_passthrough: bool

    def call(self, method: str, path: str, **params: Any) -> Any: ...


def _clean(params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value is None:
            continue
        out[key] = int(value) if isinstance(value, bool) else value
    return out


class HttpsPve:
    """proxmoxer https + token. Each call is one HTTPS request (counted as an API call).

    The configuration is checked and the token read here; proxmoxer (and requests under it, ~0.1 s of CPU to
    import) only at the first call: a converged run makes none.
    """

    def __init__(self, host: Host, metrics: Metrics, ssh: Node | None = None) -> None:
        api = host.pve.api
        if api is None:
            raise ConfigError("no PVE API token configured", host=host.name)
        user, token_name = api.token_id.split("!", 1)
        verify: bool | str = str(api.verify.expanduser()) if not isinstance(api.verify, bool) else api.verify
        if verify is False:
            warn_unverified(host)
        self.identity = api.token_id
        self.can_passthrough = False  # a token is never root@pam
        self.metrics = metrics
        self.host = host
        self.ssh = ssh  # its host lock (if taken) must be current before any change made over HTTPS
        host.require_configured()
        self._settings: dict[str, Any] = {
            "port": api.port, "user": user, "token_name": token_name, "token_value": api.token_secret.read(),
            "verify_ssl": verify, "timeout": api.timeout_s, "service": "PVE"}
        self._proxmox: Any = None

    def _api(self, path: str) -> Any:
        if self._proxmox is None:
            from proxmoxer import ProxmoxAPI  # local import: only this module touches proxmoxer

            self._proxmox = ProxmoxAPI(self.host.address, **self._settings)
        return self._proxmox(path)

    def call(self, method: str, path: str, **params: Any) -> Any:
        from proxmoxer.core import ResourceException

        guard = self.ssh.guard if self.ssh is not None else None
        if guard is not None and method.lower() != "get":
            guard.before_change()
        self.metrics.api_call()
        resource = self._api(path.lstrip("/"))
        try:
            return getattr(resource, method.lower())(**_clean(params))
        except ResourceException as exc:
            what = (f"PVE API {method.upper()} {path} → {exc.status_code} {exc.status_message}: "
                    f"{exc.content or ''} {exc.errors or ''}").strip()
            details: dict[str, object] = {"status": exc.status_code, "errors": exc.errors}
            if exc.status_code == 403 and "only allowed for root@pam" not in str(exc.content):
                missing = parse_permission_error(str(exc.content)) or required_privilege(method, path, params)
                if missing is not None:
                    details["missing"] = {"path": missing.path, "privileges": list(missing.privs)}
                raise PermissionDenied(what, fix=grant_fix(self.identity, missing), host=self.host.name,
                                       details=details) from exc
            raise RemoteError(what, fix=_api_fix(exc.status_code, str(exc)), host=self.host.name,
                              details=details) from exc
        except Exception as exc:  # requests' connection errors: keep the message, classify as remote
            if is_certificate_error(exc):
                raise RemoteError(f"PVE API {self.host.address}:{self.host.pve.api.port if self.host.pve.api else 0}"
                                  f": its TLS certificate failed verification ({exc})", fix=CERT_FIX,
                                  host=self.host.name, details={"cause": "certificate"}) from exc
            raise RemoteError(f"PVE API {self.host.address}:{self.host.pve.api.port if self.host.pve.api else 0} "
                              f"unreachable: {exc}",
                              fix="check the API port, the CA in pve.api.verify and the network path",
                              host=self.host.name) from exc


#: The privilege PVE checks first for the calls deploy makes whose 403 names none ("Permission check failed").
BARE_403 = ((re.compile(r"^post /nodes/[^/]+/lxc$"), "/vms/{vmid}", "VM.Allocate"),)
#: Built-in PVE roles (pve-access-control) that carry a privilege, by its prefix: the smallest that fits.
GRANTING_ROLE = (("VM.Audit", "PVEAuditor"), ("VM.", "PVEVMAdmin"), ("Datastore.AllocateSpace", "PVEDatastoreUser"),
                 ("Datastore.Audit", "PVEAuditor"), ("Datastore.", "PVEDatastoreAdmin"), ("Sys.Audit", "PVEAuditor"),
                 ("Sys.Console", "PVESysAdmin"), ("Sys.Syslog", "PVESysAdmin"), ("SDN.Use", "PVESDNUser"),
                 ("SDN.", "PVESDNAdmin"))


def required_privilege(method: str, path: str, params: dict[str, Any]) -> MissingPrivilege | None:
    for pattern, acl_path, priv in BARE_403:
        if pattern.match(f"{method.lower()} {path.rstrip('/')}"):
            return MissingPrivilege(acl_path.format(**{k: params.get(k, "?") for k in ("vmid",)}), (priv,))
    return None


def grant_fix(token_id: str, missing: MissingPrivilege | None) -> str:
    """The pveum commands (run as root on the node) that grant what a 403 says is missing."""
    if missing is None:
        return (f"grant the token {token_id} the privilege PVE names above (pveum acl modify PATH --tokens "
                f"'{token_id}' --roles ROLE), or use root_ssh")
    privs = ",".join(missing.privs)
    needs = missing.privs[0] if len(missing.privs) == 1 else f"one of {', '.join(missing.privs)}"
    role = next((r for prefix, r in GRANTING_ROLE if missing.privs[0].startswith(prefix)), None)
    tok = shlex.quote(token_id)
    own = (f"or a role with only that privilege: pveum role add DeployPriv --privs {shlex.quote(missing.privs[0])}"
           f" && pveum acl modify {shlex.quote(missing.path)} --tokens {tok} --roles DeployPriv")
    grant = (f"pveum acl modify {shlex.quote(missing.path)} --tokens {tok} --roles {role}; " if role else
             f"{missing.privs[0]} is kept for administrators (privileged containers need Sys.Modify on /: set "
             "container.unprivileged: true or use root_ssh); ")
    return f"the token {token_id} lacks {needs} on {missing.path} ({privs}): {grant}{own}"


#: pve-cluster's error on a node outside the quorate partition: /etc/pve is read-only, every change fails.
NO_QUORUM = "cluster not ready - no quorum?"
QUORUM_FIX = ("the node has lost its cluster's quorum: check it on the node (`pvecm status`), bring the other nodes or "
              "the corosync links back, then run deploy again; only when the other nodes are down for good, "
              "`pvecm expected 1` on this node lets it write alone")


def _api_fix(status: int, message: str) -> str:
    if NO_QUORUM in message:
        return QUORUM_FIX
    if "only allowed for root@pam" in message:
        return "devN / raw lxc keys need root@pam: set pve.root_ssh: true so deploy uses pvesh over SSH"
    if status == 401:
        return "check pve.api.token_id and the token secret"
    if status == 403:
        return "grant the token the privileges named above, or use root_ssh"
    return "see the PVE message above"


class PveshPve:
    """pvesh as root over the verified SSH connection: identity root@pam, so devN is allowed."""

    def __init__(self, ssh: Node) -> None:
        self.ssh = ssh
        self.identity = "root@pam"
        self.can_passthrough = True

    @staticmethod
    def command(method: str, path: str, **params: Any) -> str:
        verb = {"get": "get", "post": "create", "put": "set", "delete": "delete"}[method.lower()]
        args = ["pvesh", verb, path]
        for key, value in _clean(params).items():
            args += [f"--{key}", str(value)]
        args += ["--output-format", "json"]
        return shlex.join(args)

    def call(self, method: str, path: str, **params: Any) -> Any:
        """The call's result. A task's result is its UPID whatever pvesh exits with: a real node's pvesh exits 0
        after a failed task (only the task's status says so), so the caller reads the task's own status (wait_task)
        on every path, and a pvesh that exits non-zero after printing a UPID is read the same way."""
        res = self.ssh.run(self.command(method, path, **params), check=False, what=f"pvesh {method} {path}")
        if res.rc != 0 and (upid := task_upid(res.stdout)) is not None:
            return upid
        if res.rc != 0:
            message = res.stderr.strip() or res.stdout.strip()
            raise RemoteError(f"pvesh {method} {path} failed: {message}", fix=_api_fix(0, message),
                              host=self.ssh.host.name)
        return parse_pvesh_output(res.stdout)


def parse_pvesh_output(text: str) -> Any:
    """pvesh's JSON result. Worker calls (create, start, …) print the task log first and the UPID last."""
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    last = text.splitlines()[-1].strip()
    try:
        return json.loads(last)
    except json.JSONDecodeError:
        return last.strip('"')


def task_upid(text: str) -> str | None:
    """The UPID a worker call printed last (bare or as a JSON string), or None when it printed none."""
    for line in reversed(text.strip().splitlines()):
        value = line.strip().strip('"')
        if UPID_RE.match(value):
            return value
    return None


def wait_task(client: PveClient, node: str, upid: str, *, timeout_s: float = 600, poll_s: float = 0.5,
              host: str = "") -> dict[str, Any]:
    """Poll a task until it stops; a TASK ERROR becomes a RemoteError carrying the task log tail."""
    if not isinstance(upid, str) or not UPID_RE.match(upid):
        raise RemoteError(f"expected a task id (UPID), got {upid!r}", host=host)
    deadline = time.monotonic() + timeout_s
    while True:
        status = client.call("get", f"/nodes/{node}/tasks/{upid}/status")
        if status.get("status") == "stopped":
            exit_status = str(status.get("exitstatus", ""))
            if exit_status == "OK" or re.fullmatch(r"WARNINGS: \d+", exit_status):
                return dict(status)
            lines = read_task_log(client, node, upid)
            raise TaskFailed(f"PVE task {status.get('type', '?')} failed: {exit_status}",
                              fix="see the task log: " + " | ".join(lines[-5:]), host=host,
                              details={"upid": upid, "log": lines})
        if time.monotonic() > deadline:
            raise RemoteError(f"PVE task {upid} still running after {timeout_s:.0f} s",
                              fix="check the task in the PVE UI; re-run when it finished", host=host)
        time.sleep(poll_s)


LOG_PAGE = 500


def read_task_log(client: PveClient, node: str, upid: str, max_lines: int = 20000) -> list[str]:
    """The whole task log: PVE pages it (`start`/`limit`, 50 lines by default), so read pages until one is short."""
    lines: list[str] = []
    while len(lines) < max_lines:
        page = client.call("get", f"/nodes/{node}/tasks/{upid}/log", start=len(lines), limit=LOG_PAGE) or []
        lines += [str(entry.get("t", "")) for entry in page if isinstance(entry, dict)]
        if len(page) < LOG_PAGE:
            break
    return lines


def lifecycle_client(host: Host, ssh: Node, metrics: Metrics) -> PveClient:
    """Token API when configured (no root needed for lifecycle), else pvesh over SSH."""
    if host.pve.api is not None:
        return HttpsPve(host, metrics, ssh)
    return PveshPve(ssh)


def runs_as_root(host: Host) -> bool:
    """Whether deploy reaches this node's PVE as root@pam (pvesh over root SSH): what devN needs, and what sees
    every user's tasks."""
    return bool(host.pve.root_ssh and host.ssh.user == "root")


def passthrough_client(host: Host, ssh: Node) -> PveClient:
    """devN needs root@pam: only pvesh over root SSH qualifies."""
    if runs_as_root(host):
        return PveshPve(ssh)
    raise ConfigError(
        "GPU passthrough (devN) can only be configured as root@pam; an API token gets 403 "
        "'configuring device passthrough is only allowed for root@pam'",
        fix="set pve.root_ssh: true and ssh.user: root for this host (deploy then runs pvesh as root over SSH), "
            "or add the devN lines to /etc/pve/lxc/<vmid>.conf yourself (deploy render prints them)",
        host=host.name, step="container")
