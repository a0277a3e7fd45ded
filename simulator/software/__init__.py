"""Software of the simulated host and its containers (part 2 of the simulator).

Part 1 calls `provision_host(host_dir, cfg)` at `sim up` and `provision_container(host_dir, vmid, cfg)` at
`pct create`. `cfg` is part 1's HostConfig (simulator.config) or an equivalent dict; optional
attributes `sglang_preinstalled` (default True) and `sglang_version` (default 0.5.12.post1) are honoured
when present. The container's faults (driver_mismatch) are read from its state.json.

What a real LXC container installs (docs/simulator.md): `wheels` (sglang/torch stand-ins as real wheels),
`wheelhouse` + `index` (`start_index`, a PEP 503 index per host), `runfile` + `nvrun` (the .run's self-contained
real-container install), `hub` (`start_hub`, the model hub stand-in for `hf download`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulator.gpu import provision_gpu_host
from simulator.gpu.profiles import get_profile

from .installer import set_userspace, write_installer
from .venv import create_model_dir, create_venv

DEFAULT_SGLANG = "0.5.12.post1"
MODEL_DIR = "models/GLM-5-NVFP4"


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    if cfg is None:
        return default
    if isinstance(cfg, dict):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


def _host_values(host_dir: Path, cfg: Any) -> tuple[str, str, bool]:
    if cfg is None:
        try:
            cfg = json.loads((host_dir / "host.json").read_text())
        except (OSError, ValueError):
            cfg = {}
    profile = str(_get(cfg, "gpu_profile") or "rtx-pro-6000-x8")
    driver = str(_get(cfg, "driver_version") or get_profile(profile).driver_version)
    missing_uvm = bool(_get(_get(cfg, "faults", {}) or {}, "missing_uvm", False))
    return profile, driver, missing_uvm


def provision_host(host_dir: Path, cfg: Any) -> None:
    """GPU device nodes, /proc files, modprobe.d, cmdline and the NVIDIA installer in the host's /root."""
    profile, driver, missing_uvm = _host_values(host_dir, cfg)
    provision_gpu_host(host_dir, profile, driver, missing_uvm)
    write_installer(host_dir, driver)


def provision_container(host_dir: Path, vmid: int, cfg: Any) -> None:
    """Userspace driver (host's, unless the ct fault driver_mismatch says otherwise), venv and model dir."""
    _, driver, _ = _host_values(host_dir, cfg)
    ct = host_dir / "ct" / str(vmid)
    try:
        faults = json.loads((ct / "state.json").read_text()).get("faults") or {}
    except (OSError, ValueError):
        faults = {}
    set_userspace(host_dir, vmid, str(faults.get("driver_mismatch") or driver))
    fs = ct / "fs"
    for d in ("root", "etc/systemd/system", "etc/sglang", "var/lib/deploy", "var/log", "tmp", "opt"):
        (fs / d).mkdir(parents=True, exist_ok=True)
    (ct / "journal").mkdir(parents=True, exist_ok=True)
    (ct / "run").mkdir(parents=True, exist_ok=True)
    if _get(cfg, "sglang_preinstalled", True):
        version = str(_get(cfg, "sglang_version") or DEFAULT_SGLANG)
        create_venv(fs / "root" / "ml-env", version, sim_root=host_dir.parent.parent)
    create_model_dir(fs / MODEL_DIR)

