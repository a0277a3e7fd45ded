"""Where the simulated sglang runs: installed version, the simulated host/container, time scale, faults.

Self-contained (stdlib only) on purpose: this package is imported from a container venv, where only the
venv, the system site-packages and this directory (via a .pth file) are on sys.path.
"""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

KNOWN_VERSIONS = ("0.5.12.post1", "0.5.23")
DEFAULT_VERSION = "0.5.12.post1"
VERSION_FILE = "sglang-sim.json"  # in sys.prefix (the venv root); written by provisioning and the pip shim
#: In a wheel: the release's own schema, baked in at build time (simulator/software/wheels.py).
WHEEL_SCHEMAS = Path(__file__).resolve().parent / "schemas"
#: In the repo (view runtime): the real flag schemas, shared with the tool (orchestrator/flags/schemas).
REPO_SCHEMAS = Path(__file__).resolve().parents[4] / "orchestrator" / "flags" / "schemas"
SCHEMAS = WHEEL_SCHEMAS if WHEEL_SCHEMAS.is_dir() else REPO_SCHEMAS


def version_file(prefix: str | None = None) -> Path:
    return Path(prefix or sys.prefix) / VERSION_FILE


def wheel_version() -> str | None:
    """The version in the installed wheel's metadata, when this very tree was installed by pip."""
    if not WHEEL_SCHEMAS.is_dir():
        return None
    try:
        dist = metadata.distribution("sglang")
        if Path(str(dist.locate_file("sglang/_sim/env.py"))).resolve() == Path(__file__).resolve():
            return str(dist.version)
    except (metadata.PackageNotFoundError, OSError):
        pass
    return None


def installed_version() -> str:
    """$SGLANG_SIM_VERSION, else the wheel's metadata, else the view venv's version file, else the default."""
    if os.environ.get("SGLANG_SIM_VERSION"):
        return os.environ["SGLANG_SIM_VERSION"]
    from_wheel = wheel_version()
    if from_wheel:
        return from_wheel
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


def _load_ctside() -> Any:
    """simulator/ctside.py: baked into the wheel as sglang/_sim/ctside.py, else read from the repo tree."""
    try:
        from sglang._sim import ctside  # type: ignore[attr-defined,unused-ignore]
        return ctside
    except ImportError:
        import importlib.util

        path = Path(__file__).resolve().parents[3] / "ctside.py"
        spec = importlib.util.spec_from_file_location("_deploy_sim_ctside", path)
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod


ctside = _load_ctside()


def ct_root() -> Path:
    """The container's root: "/" in a real container; $DEPLOY_SIM_CT_ROOT lets tests point at a directory."""
    return Path(os.environ.get("DEPLOY_SIM_CT_ROOT") or "/")


def in_path(absolute: str) -> Path:
    return ct_root() / absolute.lstrip("/")


def real_container() -> bool:
    """True inside a real LXC container: the simulator's mounts (ctside.py) are there, and no view env is set."""
    if os.environ.get("DEPLOY_SIM_HOST_DIR") or os.environ.get("DEPLOY_SIM_HOST"):
        return False
    return in_path(ctside.VMID_FILE).is_file()


def host_dir() -> Path | None:
    """The simulated host's directory (view runtime), or None outside any simulated host / in a real container."""
    if os.environ.get("DEPLOY_SIM_HOST_DIR"):
        return Path(os.environ["DEPLOY_SIM_HOST_DIR"])
    if os.environ.get("DEPLOY_SIM_HOST"):
        root = Path(os.environ.get("DEPLOY_SIM_ROOT") or "/var/lib/deploy-sim")
        return root / "hosts" / os.environ["DEPLOY_SIM_HOST"]
    return None


def vmid() -> int | None:
    v = (_read_text(in_path(ctside.VMID_FILE)) or "") if real_container() else os.environ.get("DEPLOY_SIM_CT", "")
    return int(v) if v.isdigit() else None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def host_config() -> dict[str, Any]:
    if real_container():
        return _read(in_path(ctside.HOST_DIR) / "host.json")
    h = host_dir()
    return _read(h / "host.json") if h else {}


def ct_state() -> dict[str, Any]:
    if real_container():
        return _read(in_path(ctside.CT_DIR) / "state.json")
    h, v = host_dir(), vmid()
    return _read(h / "ct" / str(v) / "state.json") if h and v is not None else {}


def gpu_dir() -> Path | None:
    """Where the server reports its GPU load for nvidia-smi (ctside GPU_DIR, or <host_dir>/gpu)."""
    if real_container():
        return in_path(ctside.GPU_DIR)
    h = host_dir()
    return h / "gpu" if h else None


#: Where the .run stand-in puts NVML in a real container; its link target names the userspace version.
NVML_LINK = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"


def userspace_version() -> str | None:
    """The container's NVIDIA userspace version: from the installed libnvidia-ml (real container), else the
    view runtime's record."""
    if real_container():
        link = in_path(NVML_LINK)
        target = os.readlink(link) if link.is_symlink() else ""
        return target.split("libnvidia-ml.so.", 1)[1] if "libnvidia-ml.so." in target else None
    h, v = host_dir(), vmid()
    return _read_text(h / "ct" / str(v) / "fs/opt/sim-nvidia/version") if h and v is not None else None


def dev_dir() -> Path:
    if os.environ.get("DEPLOY_SIM_DEV"):
        return Path(os.environ["DEPLOY_SIM_DEV"])
    return in_path("/dev")


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
