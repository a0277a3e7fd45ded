"""Where the simulated sglang runs: installed version, the simulated host/container, time scale, faults.

Self-contained (stdlib only) on purpose: this package is imported from a container venv, where only the
venv, the system site-packages and this directory (via a .pth file) are on sys.path.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

KNOWN_VERSIONS = ("0.5.12.post1", "0.5.23")
DEFAULT_VERSION = "0.5.12.post1"
VERSION_FILE = "sglang-sim.json"  # in sys.prefix (the venv root); written by provisioning and the pip shim
#: The real flag schemas, shared with the tool (orchestrator/flags/schemas): one copy of each release's parser.
SCHEMAS = Path(__file__).resolve().parents[4] / "orchestrator" / "flags" / "schemas"


def version_file(prefix: str | None = None) -> Path:
    return Path(prefix or sys.prefix) / VERSION_FILE


def installed_version() -> str:
    """$SGLANG_SIM_VERSION, else the venv's version file, else the default release."""
    if os.environ.get("SGLANG_SIM_VERSION"):
        return os.environ["SGLANG_SIM_VERSION"]
    try:
        return str(json.loads(version_file().read_text())["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_VERSION


def schema_path(version: str) -> Path:
    return SCHEMAS / f"sglang-{version}.json"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def host_dir() -> Path | None:
    """The simulated host's directory, or None when running outside any simulated host."""
    if os.environ.get("DEPLOY_SIM_HOST_DIR"):
        return Path(os.environ["DEPLOY_SIM_HOST_DIR"])
    if os.environ.get("DEPLOY_SIM_HOST"):
        root = Path(os.environ.get("DEPLOY_SIM_ROOT") or "/var/lib/deploy-sim")
        return root / "hosts" / os.environ["DEPLOY_SIM_HOST"]
    return None


def vmid() -> int | None:
    v = os.environ.get("DEPLOY_SIM_CT", "")
    return int(v) if v.isdigit() else None


def host_config() -> dict[str, Any]:
    h = host_dir()
    return _read(h / "host.json") if h else {}


def ct_state() -> dict[str, Any]:
    h, v = host_dir(), vmid()
    return _read(h / "ct" / str(v) / "state.json") if h and v is not None else {}


def ct_faults() -> dict[str, Any]:
    faults = ct_state().get("faults") or {}
    return faults if isinstance(faults, dict) else {}


def time_scale() -> float:
    """host.json time_scale (model seconds per real second); $SGLANG_SIM_TIME_SCALE overrides."""
    raw = os.environ.get("SGLANG_SIM_TIME_SCALE") or host_config().get("time_scale") or 1.0
    try:
        return max(float(raw), 1e-6)
    except (TypeError, ValueError):
        return 1.0


def dev_dir() -> Path:
    return Path(os.environ.get("DEPLOY_SIM_DEV") or "/dev")
