"""Software of the simulated host and what its containers install (part 2 of the simulator).

Part 1 calls `provision_host(host_dir, cfg)` at `sim up`; `cfg` is part 1's HostConfig (simulator.config) or an
equivalent dict. A new container gets nothing from here: like PVE's, it starts bare from the template.

What a container installs (docs/simulator.md): `wheels` (sglang, torch, flashinfer-python, flashinfer-cubin and
sglang-kernel stand-ins as real wheels under the real names and versions, each with its real installed size:
`real_sizes`, `standin_size_hook`), `wheelhouse` + `index` (`start_index`, a PEP 503 index per host; `publish`, a
build published while hosts run, maybe a regressed one), `runfile` + `nvrun` (the .run's self-contained
real-container install), `hub` (`start_hub`, the model hub stand-in for `hf download`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulator.gpu.devfs import provision_gpu_host
from simulator.gpu.profiles import get_profile

from .installer import write_installer


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

