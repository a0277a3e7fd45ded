"""Pure parsers for PVE command output: `pct status`, container config JSON, pending changes, property strings,
permission errors."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from orchestrator.parsers import ParseError


def parse_pct_status(text: str) -> str | None:
    """`status: running` → "running"; None when the output is not a status line (e.g. no such CT)."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "status" and value.strip():
            return value.strip()
    return None


def parse_config_json(text: str) -> dict[str, Any]:
    """`pvesh get …/config --output-format json` or the API's data: keys → values, plus `digest`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError("container config is not JSON", text) from exc
    if isinstance(data, dict) and "data" in data and len(data) == 1:
        data = data["data"]
    if not isinstance(data, dict):
        raise ParseError("container config JSON is not an object", text)
    return data


@dataclass(frozen=True)
class Appliance:
    """One template of the node's appliance index (`GET /nodes/N/aplinfo`)."""

    template: str  # debian-12-standard_12.12-1_amd64.tar.zst
    package: str  # debian-12-standard
    version: str  # 12.12-1


def version_key(version: str) -> tuple[int, ...]:
    """`12.12-1` → (12, 12, 1): 12.12-1 is newer than 12.7-1 (as numbers, not as text)."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


def parse_aplinfo(text: str) -> list[Appliance]:
    """`pvesh get /nodes/N/aplinfo --output-format json`; empty when not read (the container exists) or not JSON."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return []
    if isinstance(data, dict) and "data" in data:
        data = data["data"]
    return [Appliance(str(e["template"]), str(e.get("package") or str(e["template"]).split("_", 1)[0]),
                      str(e.get("version") or ""))
            for e in data if isinstance(e, dict) and e.get("template")] if isinstance(data, list) else []


def template_family(template: str) -> str:
    """`debian-12-standard_12.12-1_amd64.tar.zst` → `debian-12-standard` (names are PACKAGE_VERSION_ARCH)."""
    return template.split("_", 1)[0]


def parse_property_string(value: str, default_key: str | None = None) -> dict[str, str]:
    """`/dev/nvidia0,mode=0666` → {"path": "/dev/nvidia0", "mode": "0666"} with the schema's default key."""
    out: dict[str, str] = {}
    for part in value.split(","):
        if not part:
            continue
        key, sep, val = part.partition("=")
        if sep:
            out[key] = val
        elif default_key is not None:
            out[default_key] = key
        else:
            out[key] = ""
    return out


def volids(templates_json: str) -> set[str]:
    try:
        data = json.loads(templates_json)
    except json.JSONDecodeError:
        return set()
    return {str(item.get("volid")) for item in data if isinstance(item, dict)} if isinstance(data, list) else set()


@dataclass(frozen=True)
class PendingChange:
    """One key of `GET …/lxc/{vmid}/pending` that waits for the container's next start."""

    key: str
    current: str | None
    pending: str | None  # None with delete=True: the key is deleted at the next start
    delete: bool = False


def parse_pending(text: str) -> dict[str, PendingChange]:
    """`pvesh get …/pending --output-format json`: only the keys with a pending value or deletion.

    Empty when the output is not a list (no such container, or the call failed: the config read says why).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return {}
    out: dict[str, PendingChange] = {}
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict) or "key" not in item:
            continue
        if "pending" in item or item.get("delete"):
            key = str(item["key"])
            out[key] = PendingChange(key, None if item.get("value") is None else str(item["value"]),
                                     None if item.get("pending") is None else str(item["pending"]),
                                     bool(item.get("delete")))
    return out


PERM_RE = re.compile(r"Permission check failed(?: \((?P<path>/[^,)]*), (?P<privs>[\w.|]+)\))?")


@dataclass(frozen=True)
class MissingPrivilege:
    """PVE's `Permission check failed (PATH, PRIV)`; `privs` has several entries when any one of them would do."""

    path: str
    privs: tuple[str, ...]


def parse_permission_error(message: str) -> MissingPrivilege | None:
    """The path and privilege(s) a 403 names; None for other errors or a bare "Permission check failed"."""
    m = PERM_RE.search(message)
    if not m or not m.group("path"):
        return None
    return MissingPrivilege(m.group("path"), tuple(m.group("privs").split("|")))


@dataclass(frozen=True)
class ClusterNode:
    """One node of `GET /cluster/status`."""

    name: str
    ip: str | None
    local: bool


@dataclass(frozen=True)
class ClusterView:
    """What a node says about its cluster: `GET /cluster/status` (name, quorum, members) and the cluster-wide
    guests of `GET /cluster/resources --type vm` (VMID → node). A standalone node has no name and is its own
    only member; VMIDs are unique across a cluster (pve-cluster's check_vmid_unused)."""

    name: str | None
    quorate: bool
    nodes: tuple[ClusterNode, ...]
    guests: dict[int, str]

    @property
    def clustered(self) -> bool:
        return self.name is not None


def _json_lines(text: str, what: str) -> list[Any]:
    values = []
    for line in text.splitlines():
        if line.strip():
            try:
                values.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ParseError(f"{what}: a line is not JSON", text) from exc
    return values


def parse_cluster_view(text: str) -> ClusterView:
    """The `cluster` fact: `pvesh get /cluster/status` and `pvesh get /cluster/resources --type vm`, one JSON
    document a line (pvesh's `--output-format json`), in that order."""
    docs = _json_lines(text, "cluster status")
    if len(docs) != 2 or not all(isinstance(d, list) for d in docs):
        raise ParseError("cluster status: expected the JSON lists of /cluster/status and /cluster/resources", text)
    status, resources = docs
    entry = next((e for e in status if isinstance(e, dict) and e.get("type") == "cluster"), None)
    nodes = tuple(ClusterNode(name=str(e.get("name", "")), ip=str(e["ip"]) if e.get("ip") else None,
                              local=bool(int(e.get("local") or 0)))
                  for e in status if isinstance(e, dict) and e.get("type") == "node")
    guests = {int(g["vmid"]): str(g.get("node", "")) for g in resources
              if isinstance(g, dict) and str(g.get("vmid", "")).isdigit()}
    return ClusterView(name=str(entry["name"]) if entry is not None and entry.get("name") else None,
                       quorate=entry is None or bool(int(entry.get("quorate") or 0)), nodes=nodes, guests=guests)


#: Ends the recorded `vmid: auto` VMID (a file that may be missing) in the output of steps/vmid.py's read.
AUTO_VMID_MARK = "@@deploy-auto-vmid@@"


@dataclass(frozen=True)
class AutoVmidRead:
    """What `vmid: auto` decides from: the VMID recorded on the node (None: none yet, or not a VMID), the
    cluster's `/cluster/nextid` and the cluster's view."""

    recorded: int | None
    nextid: int
    cluster: ClusterView


def parse_auto_vmid(text: str) -> AutoVmidRead:
    """`cat RECORD; echo MARK; pvesh get /cluster/nextid; <the cluster fact's commands>`."""
    head, mark, rest = text.partition(AUTO_VMID_MARK)
    if not mark:
        raise ParseError("auto VMID: the record's end mark is missing", text)
    first, _, cluster = rest.strip().partition("\n")
    try:
        nextid = int(json.loads(first))
    except (json.JSONDecodeError, TypeError, ValueError) as exc:
        raise ParseError("auto VMID: /cluster/nextid is not a number", text) from exc
    recorded = head.strip()
    return AutoVmidRead(recorded=int(recorded) if recorded.isdigit() and 100 <= int(recorded) <= 999_999_999 else None,
                        nextid=nextid, cluster=parse_cluster_view(cluster))


def upid_type(upid: str) -> str | None:
    """A task's type from its UPID (`UPID:node:pid:pstart:starttime:TYPE:ID:user:`): `vzstart`, `hastart`, …"""
    parts = upid.split(":")
    return parts[5] if len(parts) > 8 and parts[0] == "UPID" else None
