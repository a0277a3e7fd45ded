"""/etc/pve/lxc/<vmid>.conf in PVE's own format: `key: value` lines, description as leading `#` comments,
raw `lxc.*` lines kept verbatim and in order, written sorted by key like pve-container's write_pct_config.
The digest is the SHA-1 of the file content, exactly what PVE compares for optimistic locking.
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

    def render(self) -> str:
        out = [f"#{urllib.parse.quote(line, safe=' !#$&()*+,-./:;<=>?@[]^_`{|}~')}\n"
               for line in self.description.splitlines()]
        for key in sorted(self.options):
            value = self.options[key]
            if "\n" in value:
                raise ValueError(f"detected invalid newline inside property '{key}'")
            out.append(f"{key}: {value}\n")
        out.extend(f"{k}: {v}\n" for k, v in self.lxc)
        return "".join(out)

    def digest(self) -> str:
        return hashlib.sha1(self.render().encode()).hexdigest()

    def dev_entries(self) -> dict[str, str]:
        """devN keys in numeric order."""
        keys = sorted((k for k in self.options if re.fullmatch(r"dev\d+", k)), key=lambda k: int(k[3:]))
        return {k: self.options[k] for k in keys}


def parse(text: str) -> CtConf:
    conf = CtConf()
    descr: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line:
            continue
        if line.startswith("["):  # snapshot / pending sections: not simulated, stop at the first one
            break
        if line.startswith("#"):
            descr.append(urllib.parse.unquote(line[1:]))
            continue
        m = re.fullmatch(r"(lxc\.[a-z0-9_.\-]+)\s*[:=]\s*(.*)", line)
        if m:
            conf.lxc.append((m.group(1), m.group(2)))
            continue
        m = re.fullmatch(r"([a-z][a-z_\-]*\d*):\s*(.*)", line)
        if not m:
            raise ValueError(f"unable to parse config line: {line}")
        conf.options[m.group(1)] = m.group(2)
    conf.description = "\n".join(descr)
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
