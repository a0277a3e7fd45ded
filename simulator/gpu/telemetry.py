"""Live GPU readings: the profile's real idle values, raised by whatever model servers report as load.

Contract with the model-server stand-in (simulator/sglang_standin): every running server writes
`<host_dir>/gpu/load-<vmid>.json` about twice a second:

    {"vmid": 120, "pid": 4711, "updated": <epoch s>, "minors": [0, 1, ...],
     "power_fraction": 0.35, "util": 0.97, "mem_fraction": 0.9, "pcie_rx_mb_s": 180, "pcie_tx_mb_s": 160}

`minors` are the /dev/nvidiaN minor numbers the server uses. A file older than STALE_S counts as absent
(the server died without cleaning up). Several containers add up, capped at the limit.
Power = idle + (0.99 * limit - idle) * power_fraction, with a little deterministic jitter, like the real
under-load capture (≈690 W of 700 W at fraction ~1).
Imports only builtin modules and `os` (smi.py says why).
"""

from __future__ import annotations

import math
import os
import time

from .jsonfile import loads as json_loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .profiles import Gpu, GpuProfile

STALE_S = 3.0


class GpuLoad:
    __slots__ = ("mem_fraction", "pcie_rx_mb_s", "pcie_tx_mb_s", "power_fraction", "util")

    def __init__(self, power_fraction: float = 0.0, util: float = 0.0, mem_fraction: float = 0.0,
                 pcie_rx_mb_s: float = 0.0, pcie_tx_mb_s: float = 0.0) -> None:
        self.power_fraction = power_fraction
        self.util = util
        self.mem_fraction = mem_fraction
        self.pcie_rx_mb_s = pcie_rx_mb_s
        self.pcie_tx_mb_s = pcie_tx_mb_s


class Sample:
    """One reading of one GPU, in the units nvidia-smi prints."""

    __slots__ = ("limit_w", "mem_mhz", "mem_temp_c", "mem_used_mib", "pcie_gen", "power_avg_w", "power_w", "pstate",
                 "pviol", "rx_mb_s", "sm_mhz", "temp_c", "tx_mb_s", "util_gpu", "util_mem")

    def __init__(self, *, power_w: float, power_avg_w: float, util_gpu: int, util_mem: int, mem_used_mib: int,
                 temp_c: int, mem_temp_c: int | None, sm_mhz: int, mem_mhz: int, pcie_gen: int, pviol: int,
                 rx_mb_s: int, tx_mb_s: int, pstate: str, limit_w: float) -> None:
        self.limit_w = limit_w  # the power limit in force (powercap.py: the default one unless -pl set another)
        self.power_w = power_w
        self.power_avg_w = power_avg_w
        self.util_gpu = util_gpu
        self.util_mem = util_mem
        self.mem_used_mib = mem_used_mib
        self.temp_c = temp_c
        self.mem_temp_c = mem_temp_c
        self.sm_mhz = sm_mhz
        self.mem_mhz = mem_mhz
        self.pcie_gen = pcie_gen
        self.pviol = pviol
        self.rx_mb_s = rx_mb_s
        self.tx_mb_s = tx_mb_s
        self.pstate = pstate


def _load_files(folder: str) -> list[str]:
    """The load-*.json files in `folder`, in directory order (as Path.glob lists them)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [os.path.join(folder, n) for n in names if n.startswith("load-") and n.endswith(".json")]


def read_loads(host_dir: str | os.PathLike[str], now: float | None = None) -> dict[int, GpuLoad]:
    """Sum the fresh load files per minor number."""
    now = time.time() if now is None else now
    loads: dict[int, GpuLoad] = {}
    for path in _load_files(os.path.join(host_dir, "gpu")):
        try:
            with open(path) as f:
                data = json_loads(f.read())
            if now - float(data.get("updated", 0)) > STALE_S:
                continue
            for minor in data.get("minors", []):
                acc = loads.setdefault(int(minor), GpuLoad())
                acc.power_fraction = min(1.0, acc.power_fraction + float(data.get("power_fraction", 0)))
                acc.util = min(1.0, acc.util + float(data.get("util", 0)))
                acc.mem_fraction = min(0.99, acc.mem_fraction + float(data.get("mem_fraction", 0)))
                acc.pcie_rx_mb_s += float(data.get("pcie_rx_mb_s", 0))
                acc.pcie_tx_mb_s += float(data.get("pcie_tx_mb_s", 0))
        except (OSError, ValueError, TypeError):
            continue
    return loads


def _jitter(gpu: Gpu, now: float, amplitude: float) -> float:
    """Deterministic wobble (no RNG: two calls in the same instant agree)."""
    return 1.0 + amplitude * math.sin(now * 3.7 + gpu.index * 1.3) * math.cos(now * 1.1 + gpu.minor)


def sample(profile: GpuProfile, gpu: Gpu, load: GpuLoad | None, now: float, limit_w: float | None = None) -> Sample:
    """`limit_w`: the limit `nvidia-smi -pl` set (powercap.py); the draw never passes it, as the driver's power
    capping holds it there (the server reports the load it could run under the cap, its own powercap.py)."""
    ld = load or GpuLoad()
    f = max(0.0, min(1.0, ld.power_fraction))
    busy = ld.util > 0.005
    limit = profile.power_limit_w if limit_w is None else limit_w
    power = gpu.idle_power_w + (0.99 * profile.power_limit_w - gpu.idle_power_w) * f
    power *= _jitter(gpu, now, 0.01 if busy else 0.015)
    power = min(power, limit * 0.999)
    shape = profile.load
    if busy:
        sm = shape.busy_sm_mhz - (shape.busy_sm_mhz - shape.busy_sm_min_mhz) * f
        sm = round(sm * _jitter(gpu, now * 1.7, 0.02) / 15.0) * 15
        mem_clk = shape.busy_mem_mhz
        gen = profile.pcie_max_gen
        pstate = "P1" if f < 0.5 else "P0"
    else:
        sm, mem_clk, gen = gpu.idle_sm_mhz, gpu.idle_mem_mhz, shape.idle_pcie_gen
        pstate = "P8" if shape.idle_pcie_gen < profile.pcie_max_gen else "P0"
    return Sample(
        power_w=power,
        power_avg_w=min(power * _jitter(gpu, now - 1.0, 0.005), limit * 0.999),  # capping holds the average too
        util_gpu=round(ld.util * 100),
        util_mem=round(shape.mem_util_at_full * f + 3) if busy else 0,
        mem_used_mib=int(gpu.mem_total_mib * ld.mem_fraction),
        temp_c=gpu.idle_temp_c + round(shape.temp_rise_c * f),
        mem_temp_c=None if gpu.idle_mem_temp_c is None else gpu.idle_mem_temp_c + round(8 * f),
        sm_mhz=sm,
        mem_mhz=mem_clk,
        pcie_gen=gen,
        pviol=100 if power >= 0.97 * limit else 0,
        rx_mb_s=int(ld.pcie_rx_mb_s),
        tx_mb_s=int(ld.pcie_tx_mb_s),
        pstate=pstate,
        limit_w=limit,
    )
