"""Where a simulator command runs: which host directory, which container, which /dev.

The GPU stand-ins (nvidia-smi, ...) run in the SSH session's host view, where `/root` and friends are bind
mounts, or in a real container, where only simulator/ctside.py's mounts show the simulated world. This module is
stdlib-only on purpose: in the host view only the system Python is reachable without site packages, and in a
container only the payload the .run unpacks, so nothing here may need pydantic. host.json / state.json are read
as plain JSON; their models live in `simulator.config` (part 1) and this module only reads the few keys it needs.
Paths are plain strings and the imports builtin modules and `os` (smi.py says why).
"""

from __future__ import annotations

import os

from simulator import ctside

from .jsonfile import loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_ROOT = "/var/lib/deploy-sim"
DEFAULT_PROFILE = "rtx-pro-6000-x8"


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JSON object from disk, or {} when it is missing or half-written (readers never crash on it)."""
    try:
        with open(path) as f:
            data = loads(f.read())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class SimContext:
    """Resolved environment of one stand-in invocation."""

    __slots__ = ("ct_root", "dev_dir", "host_dir", "vmid")

    def __init__(self, host_dir: str, vmid: int | None, dev_dir: str, ct_root: str | None = None) -> None:
        self.host_dir = host_dir
        self.vmid = vmid  # None: the host view
        self.dev_dir = dev_dir  # where /dev/nvidia* are looked up
        #: Inside a container: the container's root ("/", or a directory in tests). The simulated world is then
        #: read only through simulator/ctside.py's mounts under it, and host_dir is its HOST_DIR.
        self.ct_root = ct_root

    @property
    def host_json(self) -> dict[str, Any]:
        return read_json(os.path.join(self.host_dir, "host.json"))

    @property
    def load_root(self) -> str:
        """The directory whose gpu/ holds the model servers' load files (telemetry.py)."""
        return self.host_dir if self.ct_root is None else os.path.join(self.ct_root, ctside.SIM_DIR.lstrip("/"))

    @property
    def profile_name(self) -> str:
        return str(self.host_json.get("gpu_profile") or DEFAULT_PROFILE)


def context_from_ctside(ct_root: str | os.PathLike[str]) -> SimContext:
    """The context of a stand-in installed in a real container whose root is `ct_root`."""
    root = os.fspath(ct_root)
    try:
        with open(os.path.join(root, ctside.VMID_FILE.lstrip("/"))) as f:
            vmid_s = f.read().strip()
    except OSError:
        vmid_s = ""
    return SimContext(host_dir=os.path.join(root, ctside.HOST_DIR.lstrip("/")),
                      vmid=int(vmid_s) if vmid_s.isdigit() else 0, dev_dir=os.path.join(root, "dev"), ct_root=root)


def host_dir_from_env(env: dict[str, str] | None = None) -> str:
    """$DEPLOY_SIM_HOST_DIR (tests) or $DEPLOY_SIM_ROOT/hosts/$DEPLOY_SIM_HOST (the layout contract)."""
    env = dict(os.environ) if env is None else env
    if env.get("DEPLOY_SIM_HOST_DIR"):
        return env["DEPLOY_SIM_HOST_DIR"]
    root = env.get("DEPLOY_SIM_ROOT") or DEFAULT_ROOT
    host = env.get("DEPLOY_SIM_HOST") or "sim-1"
    return os.path.join(root, "hosts", host)


def context_from_env(env: dict[str, str] | None = None) -> SimContext:
    """The host view's context (in a container, context_from_ctside is the only way in)."""
    return SimContext(host_dir=host_dir_from_env(env), vmid=None, dev_dir="/dev")
