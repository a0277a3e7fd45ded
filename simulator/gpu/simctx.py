"""Where a simulator command runs: which host directory, which container, which /dev.

The GPU stand-ins (nvidia-smi, ...) run in the SSH session's host view, where `/root` and friends are bind
mounts, or in a real container, where only simulator/ctside.py's mounts show the simulated world. This module is
stdlib-only on purpose: in the host view only the system Python is reachable without site packages, and in a
container only the payload the .run unpacks, so nothing here may need pydantic. host.json / state.json are read
as plain JSON; their models live in `simulator.config` (part 1) and this module only reads the few keys it needs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator import ctside

DEFAULT_ROOT = "/var/lib/deploy-sim"
DEFAULT_PROFILE = "rtx-pro-6000-x8"


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from disk, or {} when it is missing or half-written (readers never crash on it)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write via rename so a concurrent reader never sees a torn file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def faults_of(data: dict[str, Any]) -> dict[str, Any]:
    """The `faults` object of host.json/state.json; tolerant of null."""
    faults = data.get("faults") or {}
    return faults if isinstance(faults, dict) else {}


@dataclass(frozen=True)
class SimContext:
    """Resolved environment of one stand-in invocation."""

    host_dir: Path
    vmid: int | None  # None: the host view
    dev_dir: Path  # where /dev/nvidia* are looked up
    #: Inside a container: the container's root ("/", or a directory in tests). The simulated world is then read
    #: only through simulator/ctside.py's mounts under it, and host_dir is its HOST_DIR.
    ct_root: Path | None = None

    @property
    def host_json(self) -> dict[str, Any]:
        return read_json(self.host_dir / "host.json")

    @property
    def ct_dir(self) -> Path:
        if self.ct_root is None:
            raise ValueError("not in a container")
        return self.ct_root / ctside.CT_DIR.lstrip("/")

    @property
    def load_root(self) -> Path:
        """The directory whose gpu/ holds the model servers' load files (telemetry.py)."""
        return self.ct_root / ctside.SIM_DIR.lstrip("/") if self.ct_root is not None else self.host_dir

    @property
    def ct_state(self) -> dict[str, Any]:
        return read_json(self.ct_dir / "state.json") if self.vmid is not None else {}

    @property
    def profile_name(self) -> str:
        return str(self.host_json.get("gpu_profile") or DEFAULT_PROFILE)

    @property
    def time_scale(self) -> float:
        try:
            return max(float(self.host_json.get("time_scale") or 1.0), 1e-6)
        except (TypeError, ValueError):
            return 1.0


def context_from_ctside(ct_root: Path) -> SimContext:
    """The context of a stand-in installed in a real container whose root is `ct_root`."""
    try:
        vmid_s = (ct_root / ctside.VMID_FILE.lstrip("/")).read_text().strip()
    except OSError:
        vmid_s = ""
    return SimContext(host_dir=ct_root / ctside.HOST_DIR.lstrip("/"), vmid=int(vmid_s) if vmid_s.isdigit() else 0,
                      dev_dir=ct_root / "dev", ct_root=ct_root)


def host_dir_from_env(env: dict[str, str] | None = None) -> Path:
    """$DEPLOY_SIM_HOST_DIR (tests) or $DEPLOY_SIM_ROOT/hosts/$DEPLOY_SIM_HOST (the layout contract)."""
    env = dict(os.environ) if env is None else env
    if env.get("DEPLOY_SIM_HOST_DIR"):
        return Path(env["DEPLOY_SIM_HOST_DIR"])
    root = Path(env.get("DEPLOY_SIM_ROOT") or DEFAULT_ROOT)
    host = env.get("DEPLOY_SIM_HOST") or "sim-1"
    return root / "hosts" / host


def context_from_env(env: dict[str, str] | None = None) -> SimContext:
    """The host view's context (in a container, context_from_ctside is the only way in)."""
    return SimContext(host_dir=host_dir_from_env(env), vmid=None, dev_dir=Path("/dev"))
