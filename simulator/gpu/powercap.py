"""The simulated driver's power limits: what `nvidia-smi -pl` set, until the module reloads or the host reboots.

The real limit lives in the driver, so the simulated one lives in `<host_dir>/gpu/power-limits.json` (the folder
the model servers' load files share, which containers see through simulator/ctside.py's GPU_DIR):

    {"<minor>": {"limit_w": 300.0, "idle_w": 39.2, "full_w": 594.0}, ...}

`idle_w`/`full_w` are the GPU's idle draw and its draw at full load (0.99 × the default limit, telemetry.py), so
the stand-in server can turn its load into watts and follow the cap (sglang_standin/_sim/powercap.py). A minor not
in the file runs at its default limit. simulator/host/reboot.py deletes the file (a boot loads a fresh driver).
Imports only builtin modules and `os` (smi.py says why).
"""

from __future__ import annotations

import os

from .jsonfile import loads as json_loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .profiles import Gpu, GpuProfile

FILE = "power-limits.json"


def path(root: str) -> str:
    """The limits file under `root` (a host directory, or a container's SIM_DIR: both have gpu/)."""
    return os.path.join(root, "gpu", FILE)


def read(root: str) -> dict[int, float]:
    """Minor → the limit set on it (watts); {} when none was set since the last boot."""
    try:
        with open(path(root)) as f:
            data = json_loads(f.read())
        return {int(k): float(v["limit_w"]) for k, v in data.items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def limit_of(caps: dict[int, float], profile: GpuProfile, gpu: Gpu) -> float:
    return caps.get(gpu.minor, profile.power_limit_w)


def write(root: str, profile: GpuProfile, limits: dict[int, float]) -> None:
    """Record `limits` (minor → watts) over the ones already set, atomically (readers never see half a file)."""
    import json

    try:
        with open(path(root)) as f:
            data = json_loads(f.read())
    except (OSError, ValueError):
        data = {}
    by_minor = {g.minor: g for g in profile.gpus}
    for minor, watts in limits.items():
        g = by_minor[minor]
        data[str(minor)] = {"limit_w": watts, "idle_w": g.idle_power_w, "full_w": 0.99 * profile.power_limit_w}
    os.makedirs(os.path.dirname(path(root)), exist_ok=True)
    tmp = path(root) + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(data))
    os.replace(tmp, path(root))


def clear(root: str) -> None:
    """A fresh driver: every GPU back at its default limit."""
    try:
        os.unlink(path(root))
    except FileNotFoundError:
        pass
