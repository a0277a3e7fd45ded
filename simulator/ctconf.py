"""/etc/pve/lxc/<vmid>.conf in PVE's own format: `key: value` lines, description as leading `#` comments,
raw `lxc.*` lines kept verbatim and in order, written sorted by key like pve-container's write_pct_config.
Changes that a running container cannot take live in a `[pve:pending]` section (a `delete:` line lists pending
deletions), as pve-container writes it. The digest is the SHA-1 of the file content, exactly what PVE compares
for optimistic locking.
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class CtConf:
    options: dict[str, str] = field(default_factory=dict)
    lxc: list[tuple[str, str]] = field(default_factory=list)
    description: str = ""
    #: `[pve:pending]`: values that apply at the next start (description included as the key "description").
    pending: dict[str, str] = field(default_factory=dict)
    #: The pending section's `delete:` list, in order.
    pending_delete: list[str] = field(default_factory=list)

    def render(self) -> str:
        out = [f"#{_encode(line)}\n" for line in self.description.splitlines()]
        out.extend(_options(self.options))
        out.extend(f"{k}: {v}\n" for k, v in self.lxc)
        if self.pending or self.pending_delete:
            out.append("\n[pve:pending]\n")
            pending = dict(self.pending)
            out.extend(f"#{_encode(line)}\n" for line in pending.pop("description", "").splitlines())
            if self.pending_delete:
                pending["delete"] = ",".join(self.pending_delete)
            out.extend(_options(pending))
        return "".join(out)

    def digest(self) -> str:
        return hashlib.sha1(self.render().encode()).hexdigest()

    def dev_entries(self) -> dict[str, str]:
        """devN keys in numeric order."""
        keys = sorted((k for k in self.options if re.fullmatch(r"dev\d+", k)), key=lambda k: int(k[3:]))
        return {k: self.options[k] for k in keys}


def _encode(line: str) -> str:
    return urllib.parse.quote(line, safe=" !#$&()*+,-./:;<=>?@[]^_`{|}~")


def _options(options: dict[str, str]) -> list[str]:
    out = []
    for key in sorted(options):
        value = options[key]
        if "\n" in value:
            raise ValueError(f"detected invalid newline inside property '{key}'")
        out.append(f"{key}: {value}\n")
    return out


def parse(text: str) -> CtConf:
    conf = CtConf()
    descr: list[str] = []
    pending_descr: list[str] = []
    section = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line:
            continue
        if line.startswith("["):
            section = line.strip("[]")
            if section != "pve:pending":  # snapshots are not simulated: stop at the first one
                break
            continue
        if line.startswith("#"):
            (pending_descr if section else descr).append(urllib.parse.unquote(line[1:]))
            continue
        m = re.fullmatch(r"(lxc\.[a-z0-9_.\-]+)\s*[:=]\s*(.*)", line)
        if m:
            if not section:
                conf.lxc.append((m.group(1), m.group(2)))
            continue
        m = re.fullmatch(r"([a-z][a-z_\-]*\d*):\s*(.*)", line)
        if not m:
            raise ValueError(f"unable to parse config line: {line}")
        if not section:
            conf.options[m.group(1)] = m.group(2)
        elif m.group(1) == "delete":
            conf.pending_delete = [d for d in re.split(r"[,;\s]+", m.group(2)) if d]
        else:
            conf.pending[m.group(1)] = m.group(2)
    conf.description = "\n".join(descr)
    if pending_descr:
        conf.pending["description"] = "\n".join(pending_descr)
    return conf


def read(path: Path) -> tuple[CtConf, str]:
    """Parse a conf file; returns the model and the digest of the bytes on disk."""
    text = path.read_text()
    return parse(text), hashlib.sha1(text.encode()).hexdigest()


def split_property(value: str, default_key: str) -> dict[str, str]:
    """Loose `k=v,...` split for the simulator's own use (validation is schema.parse_property_string)."""
    out: dict[str, str] = {}
    for part in value.split(","):
        if not part:
            continue
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v
        else:
            out[default_key] = part
    return out


def join_property(items: dict[str, str], default_key: str | None = None) -> str:
    parts = []
    if default_key and default_key in items:
        parts.append(items[default_key])
    parts.extend(f"{k}={v}" for k, v in items.items() if k != default_key)
    return ",".join(parts)
