"""Parse the real rendered unit file the way systemd reads the parts the simulator honours.

[Unit] Description; [Service] ExecStart (backslash continuations, quoting, $VAR/${VAR} expansion),
Environment= (several quoted assignments per line), EnvironmentFile= (optional '-' prefix), Restart=,
RestartSec=, TimeoutStartSec=, TimeoutStopSec=, WorkingDirectory=. Everything else (LimitMEMLOCK=, ...) is
accepted and ignored, as harmless for the simulation.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CT_PERSISTENT_PATHS = ("/root", "/etc/systemd/system", "/etc/sglang", "/etc/sglang-router", "/var/lib/deploy",
                       "/var/log", "/models", "/tmp", "/opt")


def parse_seconds(value: str, default: float) -> float:
    """systemd time spans: '10', '10s', '500ms', '2min', '1min 30s', 'infinity'."""
    value = value.strip()
    if not value:
        return default
    if value == "infinity":
        return 1e9
    total = 0.0
    units = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "": 1}
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value):
        total += float(num) * units.get(unit, 1)
    return total


@dataclass
class Unit:
    name: str
    description: str = ""
    exec_start: str = ""
    environment: dict[str, str] = field(default_factory=dict)
    environment_files: list[str] = field(default_factory=list)  # keep '-' prefix
    restart: str = "no"
    restart_sec: float = 0.1
    timeout_start_sec: float = 90.0
    timeout_stop_sec: float = 90.0
    working_directory: str = ""
    fragment_path: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Unit:
        return cls(**data)


def _logical_lines(text: str) -> list[str]:
    out: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith(("#", ";"))):
            continue
        if buf and line.lstrip().startswith(("#", ";")):
            continue  # comment lines inside a continuation are skipped, as systemd does
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append(buf + line)
        buf = ""
    if buf:
        out.append(buf)
    return out


def parse_unit(name: str, text: str, fragment_path: str = "") -> Unit:
    unit = Unit(name=name, fragment_path=fragment_path)
    section = ""
    for line in _logical_lines(text):
        s = line.strip()
        if s.startswith("[") and s.endswith("]"):
            section = s[1:-1]
            continue
        key, _, value = s.partition("=")
        key, value = key.strip(), value.strip()
        if section == "Unit" and key == "Description":
            unit.description = value
        if section != "Service":
            continue
        if key == "ExecStart":
            unit.exec_start = value  # an empty assignment resets; the last one wins for Type=simple
        elif key == "Environment":
            for assignment in shlex.split(value):
                k, _, v = assignment.partition("=")
                unit.environment[k] = v
        elif key == "EnvironmentFile":
            unit.environment_files.append(value)
        elif key == "Restart":
            unit.restart = value
        elif key == "RestartSec":
            unit.restart_sec = parse_seconds(value, 0.1)
        elif key == "TimeoutStartSec":
            unit.timeout_start_sec = parse_seconds(value, 90.0)
        elif key == "TimeoutStopSec":
            unit.timeout_stop_sec = parse_seconds(value, 90.0)
        elif key == "TimeoutSec":
            unit.timeout_start_sec = unit.timeout_stop_sec = parse_seconds(value, 90.0)
        elif key == "WorkingDirectory":
            unit.working_directory = value
    return unit


def read_env_file(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in _logical_lines(path.read_text()):
        s = line.strip()
        if s.startswith("export "):
            s = s[7:]
        key, sep, value = s.partition("=")
        if not sep:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def expand_command(cmd: str, env: dict[str, str]) -> list[str]:
    """ExecStart -> argv: strip the special prefixes, split like systemd, expand $VAR (splits) and ${VAR}."""
    cmd = cmd.lstrip()
    while cmd and cmd[0] in "-@+!:":
        cmd = cmd[1:]
    argv: list[str] = []
    for word in shlex.split(cmd):
        m = re.fullmatch(r"\$(\w+)", word)
        if m:
            argv.extend(env.get(m.group(1), "").split())
            continue
        argv.append(re.sub(r"\$\{(\w+)\}", lambda mm: env.get(mm.group(1), ""), word))
    return argv


def ct_path(ct_fs: Path, path: str) -> Path:
    """A container path on disk: persistent container paths live under ct/<vmid>/fs, the rest is shared."""
    for prefix in CT_PERSISTENT_PATHS:
        if path == prefix or path.startswith(prefix + "/"):
            return ct_fs / path.lstrip("/")
    return Path(path)
