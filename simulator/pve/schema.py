"""Request validation against the real PVE API schema (pve-docs 9.1.3 apidata, bundled as pve-api-schema.json.gz).

Mirrors what PVE's JSONSchema does before a handler runs, with its error texts: unknown parameters, missing
required ones, type/enum/range/pattern checks, named string formats, and property strings (`net0`, `rootfs`,
`features`, `dev0`, ...) parsed as comma-separated key=value lists with a default key. Array-style keys such as
`dev0`..`dev255` are looked up as the schema's `dev[n]` entry. Error values end in a newline, like PVE's.
"""

from __future__ import annotations

import functools
import gzip
import ipaddress
import json
import marshal
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator import derived

# Gzipped: 1.2 MB of JSON on one line becomes ~150 KB, and its example prose stays out of line-based scans.
SCHEMA_FILE = Path(__file__).with_name("pve-api-schema.json.gz")

#: Highest index (exclusive) of array-style keys, from pve-container/pve-manager constants.
ARRAY_LIMITS = {"dev": 256, "net": 32, "mp": 256, "unused": 256}

MSG_UNKNOWN = "property is not defined in schema and the schema does not allow additional properties"
MSG_MISSING = "property is missing and it is not optional"


class ParamError(Exception):
    """HTTP 400 "Parameter verification failed." with a param -> message map."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("Parameter verification failed.")
        self.errors = {k: v if v.endswith("\n") else v + "\n" for k, v in errors.items()}


@dataclass(frozen=True)
class Endpoint:
    template: str  # e.g. /nodes/{node}/lxc/{vmid}/config
    method: str
    info: dict[str, Any]
    path_params: dict[str, str]

    @property
    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = self.info.get("parameters", {}).get("properties", {}) or {}
        return props

    @property
    def allowtoken(self) -> bool:
        return bool(self.info.get("allowtoken", 1))


@dataclass(frozen=True)
class _Index:
    """The schema tree flattened for one lookup: each path's `info` still marshalled (decoded only when found),
    and each path's first `{var}` child. Loading it costs a few ms; json-parsing the 1.2 MB tree costs ~60 ms,
    paid by every `pct`/`pvesh` call on a simulated host."""

    infos: dict[str, bytes]
    var_child: dict[str, str]


def _build_index() -> dict[str, dict[str, Any]]:
    tree: list[dict[str, Any]] = json.loads(gzip.decompress(SCHEMA_FILE.read_bytes()))
    infos: dict[str, bytes] = {}
    var_child: dict[str, str] = {}

    def walk(parent: str, nodes: list[dict[str, Any]]) -> None:
        for node in nodes:
            infos[node["path"]] = marshal.dumps(node.get("info") or {})
            if node["path"].rsplit("/", 1)[-1].startswith("{"):
                var_child.setdefault(parent, node["path"])
            walk(node["path"], node.get("children") or [])

    walk("", tree)
    return {"infos": infos, "var_child": var_child}


@functools.lru_cache(maxsize=1)
def _index() -> _Index:
    data = derived.cached(SCHEMA_FILE, _build_index)
    return _Index(data["infos"], data["var_child"])


def find(method: str, path: str) -> Endpoint | None:
    """Walk the schema tree segment by segment; `{var}` children match any segment (literal ones win)."""
    index = _index()
    current = ""
    values: dict[str, str] = {}
    for seg in (s for s in path.strip("/").split("/") if s):
        literal = f"{current}/{seg}"
        if literal in index.infos:
            current = literal
            continue
        var = index.var_child.get(current)
        if var is None:
            return None
        values[var.rsplit("/", 1)[-1].strip("{}")] = seg
        current = var
    if not current:
        return None
    info = marshal.loads(index.infos[current]).get(method.upper())
    if info is None:
        return None
    return Endpoint(current, method.upper(), info, values)


def schema_for_key(props: dict[str, Any], key: str) -> dict[str, Any] | None:
    if key in props:
        schema: dict[str, Any] = props[key]
        return schema
    m = re.fullmatch(r"([a-z]+)(\d+)", key)
    if m and f"{m.group(1)}[n]" in props and int(m.group(2)) < ARRAY_LIMITS.get(m.group(1), 256):
        schema = props[f"{m.group(1)}[n]"]
        return schema
    return None


# --------------------------------------------------------------------------------------------- named formats


def _v_node(v: str) -> None:
    if not re.fullmatch(r"[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?", v):
        raise ValueError("value does not look like a valid node name")


def _v_dns(v: str) -> None:
    label = r"[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?"
    if not re.fullmatch(rf"({label}\.)*{label}", v):
        raise ValueError("value does not look like a valid DNS name")


def _v_storage(v: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9\-_.]*[a-z0-9]", v, re.I):
        raise ValueError(f"storage ID '{v}' contains illegal characters")


def _v_configid(v: str) -> None:
    if not re.fullmatch(r"[a-z][a-z_]*\d*", v, re.I) and not re.fullmatch(r"[a-z][a-z0-9_\-]*", v, re.I):
        raise ValueError(f"invalid configuration ID '{v}'")


def _v_configid_list(v: str) -> None:
    for item in re.split(r"[,;\s]+", v.strip()):
        if item:
            _v_configid(item)


def _v_ipv4(v: str) -> None:
    try:
        ipaddress.IPv4Address(v)
    except ValueError:
        raise ValueError("value does not look like a valid IPv4 address") from None


def _v_ipv6(v: str) -> None:
    try:
        ipaddress.IPv6Address(v)
    except ValueError:
        raise ValueError("value does not look like a valid IPv6 address") from None


def _v_mac(v: str) -> None:
    if not re.fullmatch(r"[a-f0-9][02468ace](?::[a-f0-9]{2}){5}", v, re.I):
        raise ValueError("value does not look like a valid unicast MAC address")


def _cidr_ok(v: str, version: int) -> bool:
    """pve-common's pve_verify_cidrv4/v6: ADDRESS/PREFIX with a prefix from 8 to 32 (128)."""
    addr, sep, prefix = v.partition("/")
    try:
        ipaddress.IPv4Address(addr) if version == 4 else ipaddress.IPv6Address(addr)
    except ValueError:
        return False
    return bool(sep) and prefix.isdigit() and 8 <= int(prefix) <= (32 if version == 4 else 128)


def _v_ip4cfg(v: str) -> None:
    if v in ("dhcp", "manual"):
        return
    if not _cidr_ok(v, 4):
        raise ValueError("value does not look like a valid ipv4 network configuration")


def _v_ip6cfg(v: str) -> None:
    if v in ("dhcp", "manual", "auto"):
        return
    if not _cidr_ok(v, 6):
        raise ValueError("value does not look like a valid ipv6 network configuration")


def _v_disk_size(v: str) -> None:
    if not re.fullmatch(r"\d+(\.\d+)?[KMGT]?", v):
        raise ValueError("value does not look like a valid disk size")


def _v_volume_id(v: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9\-_.]*[a-z0-9]:.+", v, re.I):
        raise ValueError(f"unable to parse volume ID '{v}'")


def _v_mp_string(v: str) -> None:
    if re.search(r"(^|/)\.\.?(/|$)", v):
        raise ValueError("path with '.' or '..' components is not allowed")


def _v_dev_string(v: str) -> None:
    if not v.startswith("/dev/"):
        raise ValueError(f"'{v}' is not a path below /dev")
    if "/./" in v or "/../" in v:
        raise ValueError(f"'{v}' contains illegal path components")


FORMATS = {
    "pve-node": _v_node,
    "dns-name": _v_dns,
    "pve-storage-id": _v_storage,
    "pve-configid": _v_configid,
    "pve-configid-list": _v_configid_list,
    "ipv4": _v_ipv4,
    "ipv6": _v_ipv6,
    "mac-addr": _v_mac,
    "pve-ipv4-config": _v_ip4cfg,
    "pve-ipv6-config": _v_ip6cfg,
    "disk-size": _v_disk_size,
    "pve-volume-id": _v_volume_id,
    "pve-lxc-mp-string": _v_mp_string,
    "pve-lxc-dev-string": _v_dev_string,
}

_BOOL_TRUE = {"1", "true", "yes", "on"}
_BOOL_FALSE = {"0", "false", "no", "off"}


def parse_bool(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    s = str(value).strip().lower()
    if s in _BOOL_TRUE:
        return 1
    if s in _BOOL_FALSE:
        return 0
    return None


def _pattern(p: str) -> str:
    return p.replace("(?^:", "(?:").replace("(?^i:", "(?i:")


def check_value(schema: dict[str, Any], value: Any, path: str, errors: dict[str, str]) -> Any:
    """Check one value; returns the normalised value (int for integer/boolean) or records an error."""
    typ = schema.get("type", "string")
    text = str(value)
    if typ == "boolean":
        b = parse_bool(value)
        if b is None:
            errors[path] = f"type check ('boolean') failed - got '{text}'"
        return b
    if typ == "integer":
        if not re.fullmatch(r"[+-]?\d+", text.strip()):
            errors[path] = f"type check ('integer') failed - got '{text}'"
            return None
        num: int | float = int(text)
    elif typ == "number":
        try:
            num = float(text)
        except ValueError:
            errors[path] = f"type check ('number') failed - got '{text}'"
            return None
    else:
        num = 0
    if typ in ("integer", "number"):
        if "minimum" in schema and num < schema["minimum"]:
            errors[path] = f"value must have a minimum value of {schema['minimum']}"
        elif "maximum" in schema and num > schema["maximum"]:
            errors[path] = f"value must have a maximum value of {schema['maximum']}"
        return num
    if typ != "string":
        return value
    if "enum" in schema and text not in schema["enum"]:
        errors[path] = f"value '{text}' does not have a value in the enumeration '{', '.join(schema['enum'])}'"
        return text
    if "maxLength" in schema and len(text) > schema["maxLength"]:
        errors[path] = f"value may only be {schema['maxLength']} characters long"
        return text
    if "minLength" in schema and len(text) < schema["minLength"]:
        errors[path] = f"value must be at least {schema['minLength']} characters long"
        return text
    if "pattern" in schema and not re.fullmatch(_pattern(schema["pattern"]), text):
        errors[path] = "value does not match the regex pattern"
        return text
    fmt = schema.get("format")
    if isinstance(fmt, dict):
        try:
            parse_property_string(fmt, text, path)
        except ValueError as exc:
            errors[path] = f"invalid format - {exc}"
    elif isinstance(fmt, str) and fmt in FORMATS:
        try:
            FORMATS[fmt](text)
        except ValueError as exc:
            errors[path] = f"invalid format - {exc}"
    return text


def parse_property_string(fmt: dict[str, Any], value: str, path: str = "") -> dict[str, Any]:
    """Parse `k=v,k2=v2` (first item may omit its key if the format has a default key) and check each part."""
    default_key = next((k for k, s in fmt.items() if s.get("default_key")), None)
    res: dict[str, Any] = {}
    for part in value.split(","):
        if not part.strip():  # PVE: `next if $part =~ /^\s*$/`
            continue
        if "=" in part:
            k, v = part.split("=", 1)
        elif default_key is not None:
            if default_key in res:
                raise ValueError(f"duplicate key in comma-separated list property: {default_key}")
            k, v = default_key, part
        else:
            raise ValueError("value without key, but schema does not define a default key")
        if k in res:
            raise ValueError(f"duplicate key in comma-separated list property: {k}")
        if k not in fmt:
            raise ValueError(f"invalid key in comma-separated list property: {k}")
        res[k] = v
    errors: dict[str, str] = {}
    prefix = f"{path}." if path else ""
    for k, sub in fmt.items():
        if k not in res:
            if not sub.get("optional"):
                errors[f"{prefix}{k}"] = MSG_MISSING
            continue
        res[k] = check_value(sub, res[k], f"{prefix}{k}", errors)
    if errors:
        lines = "".join(f"{k}: {v}\n" for k, v in sorted(errors.items()))
        raise ValueError(f"format error\n{lines}")
    return res


def validate(ep: Endpoint, params: dict[str, Any]) -> dict[str, Any]:
    """Validate path + query/body parameters; returns them normalised or raises ParamError."""
    props = ep.properties
    additional = ep.info.get("parameters", {}).get("additionalProperties", 0)
    merged = {**params, **ep.path_params}
    errors: dict[str, str] = {}
    out: dict[str, Any] = {}
    for key, value in merged.items():
        schema = schema_for_key(props, key)
        if schema is None:
            if not additional:
                errors[key] = MSG_UNKNOWN
            else:
                out[key] = value
            continue
        out[key] = check_value(schema, value, key, errors)
    for key, schema in props.items():
        if key.endswith("[n]"):
            continue
        if key not in merged and not schema.get("optional"):
            errors[key] = MSG_MISSING
        req = schema.get("requires")
        if key in merged and isinstance(req, str) and req not in merged:
            errors[req] = f"missing property - '{key}' requires this property"
    if errors:
        raise ParamError(errors)
    return out
