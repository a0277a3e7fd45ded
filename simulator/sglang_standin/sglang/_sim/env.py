"""Where the simulated sglang runs: installed version, the simulated host/container, time scale, faults.

Self-contained (stdlib only) on purpose: it runs from a wheel in a container's venv, where nothing of the
simulator but the ctside mounts (ctside.py) is reachable. Outside a container (tests running the tree from the
repo) there is no host, no container and no GPU check.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

KNOWN_VERSIONS = ("0.5.12.post1", "0.5.23")
DEFAULT_VERSION = "0.5.12.post1"
#: In a wheel: the release's own schema, baked in at build time (simulator/software/wheels.py).
WHEEL_SCHEMAS = Path(__file__).resolve().parent / "schemas"
#: In the repo (tests): the real flag schemas, shared with the tool (orchestrator/flags/schemas).
REPO_SCHEMAS = Path(__file__).resolve().parents[4] / "orchestrator" / "flags" / "schemas"
SCHEMAS = WHEEL_SCHEMAS if WHEEL_SCHEMAS.is_dir() else REPO_SCHEMAS


def wheel_version() -> str | None:
    """The installed wheel's version: the constant its build baked in (simulator/software/wheels.py), else its
    metadata when this very tree was installed by pip (a wheel built before the constant existed).

    The constant first because importlib.metadata (with email, zipfile, csv) costs about 40 ms of CPU, and every
    server, bench and flag probe in a container imports sglang.
    """
    try:
        from sglang._sim.wheel_version import VERSION  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        pass
    else:
        return str(VERSION)
    if not WHEEL_SCHEMAS.is_dir():
        return None
    from importlib import metadata

    try:
        dist = metadata.distribution("sglang")
        if Path(str(dist.locate_file("sglang/_sim/env.py"))).resolve() == Path(__file__).resolve():
            return str(dist.version)
    except (metadata.PackageNotFoundError, OSError):
        pass
    return None


def installed_version() -> str:
    """$SGLANG_SIM_VERSION, else the wheel's version, else (the tree run from the repo) the default."""
    if os.environ.get("SGLANG_SIM_VERSION"):
        return os.environ["SGLANG_SIM_VERSION"]
    return wheel_version() or DEFAULT_VERSION


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
    """True inside a container of a simulated host: the simulator's mounts (ctside.py) are there."""
    return in_path(ctside.VMID_FILE).is_file()


def vmid() -> int | None:
    v = (_read_text(in_path(ctside.VMID_FILE)) or "") if real_container() else ""
    return int(v) if v.isdigit() else None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def host_config() -> dict[str, Any]:
    return _read(in_path(ctside.HOST_DIR) / "host.json") if real_container() else {}


def ct_state() -> dict[str, Any]:
    return _read(in_path(ctside.CT_DIR) / "state.json") if real_container() else {}


def hopper() -> bool:
    """The host's GPUs are Hopper (SM90: the h200 profiles), where real sglang 0.5.12 picks other defaults (FA3
    attention, MoE `auto`) than on the RTX PRO 6000 (SM120) the stand-in models otherwise. Outside a container:
    SGLANG_SIM_GPU=hopper."""
    profile = str(host_config().get("gpu_profile") or os.environ.get("SGLANG_SIM_GPU") or "")
    return profile.startswith(("h200", "h100", "hopper"))


def gpu_dir() -> Path | None:
    """Where the server reports its GPU load for nvidia-smi (ctside GPU_DIR; None outside a container)."""
    return in_path(ctside.GPU_DIR) if real_container() else None


#: Where the .run stand-in puts NVML in a real container; its link target names the userspace version.
NVML_LINK = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"


def userspace_version() -> str | None:
    """The container's NVIDIA userspace version: the one the installed libnvidia-ml.so.1 links to."""
    link = in_path(NVML_LINK)
    target = os.readlink(link) if link.is_symlink() else ""
    return target.split("libnvidia-ml.so.", 1)[1] if "libnvidia-ml.so." in target else None


def dev_dir() -> Path:
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


def kernel_cache_dir() -> Path:
    """Where this stack's JIT kernel caches live: $SGLANG_SIM_CACHE_DIR, else flashinfer's JIT directory under
    $FLASHINFER_WORKSPACE_BASE (`<base>/.cache/flashinfer`, as flashinfer's jit env puts it; deploy's managed cache
    sets it), else $XDG_CACHE_HOME or ~/.cache (flashinfer, DeepGEMM and triton keep theirs there), one directory
    per venv: a cache belongs to its stack."""
    import hashlib
    import sys

    if os.environ.get("SGLANG_SIM_CACHE_DIR"):
        return Path(os.environ["SGLANG_SIM_CACHE_DIR"])
    if os.environ.get("FLASHINFER_WORKSPACE_BASE"):
        return Path(os.environ["FLASHINFER_WORKSPACE_BASE"]) / ".cache" / "flashinfer"
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME") or "/root", ".cache")
    return Path(home) / "sglang-sim" / hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]


def health_check_timeout_s() -> float:
    """$SGLANG_HEALTH_CHECK_TIMEOUT, as real sglang reads it (20 s when unset): how long /health waits for its
    one-token generation before it answers 503."""
    try:
        return max(float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT") or 20), 0.0)
    except ValueError:
        return 20.0
