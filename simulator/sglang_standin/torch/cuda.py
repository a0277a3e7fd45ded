"""torch.cuda stand-in: device list, peer access and timed copies from the simulated topology.

The copies load the simulated GPUs as real ones would: while a pair copies, a load file tells the simulated
nvidia-smi that both GPUs are busy (simulator/gpu/telemetry.py's contract, `load-p2p-<vmid>.json`), so a link with
the `link=GPU:idle-downshift` knob trains to its maximum under the copies and a link sampler running alongside sees
it; each pair stays loaded for at least MIN_PAIR_WALL_S of wall time (the simulated copy itself takes none). A GPU
whose link is stuck at Gen2 (`link=GPU:stuck-gen2`) copies at Gen2 x16 speed, as a real one does.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

GBPS = {"PIX": 53.0, "PXB": 52.0, "PHB": 48.0, "NODE": 49.0, "SYS": 38.0}
NO_PEER_GBPS = 11.5  # bounce through host memory
GEN2_X16_GBPS = 6.8  # 5 GT/s x16 after encoding and protocol overhead
SIM_DIR = "/run/deploy-sim"  # simulator/ctside.py's mounts in a simulated container
MIN_PAIR_WALL_S = 0.06
_elapsed_s = [0.0]


class _Load:
    """The pair now copying, since when (wall), and its simulated copy time so far."""

    pair: tuple[int, int] | None = None
    since = 0.0
    sim_s = 0.0


def _sim(path: str) -> str:
    return os.path.join(os.environ.get("DEPLOY_SIM_CT_ROOT") or "/", SIM_DIR.lstrip("/"), path)


@functools.lru_cache(maxsize=1)
def _host() -> dict:
    try:
        with open(_sim("host/host.json")) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _stuck_gen2() -> set[int]:
    faults = _host().get("faults") or {}
    out = set()
    for part in str(faults.get("link") or "").split(","):
        gpu, _, mode = part.strip().partition(":")
        if gpu.isdigit() and mode.strip() == "stuck-gen2":
            out.add(int(gpu))
    return out


@functools.lru_cache(maxsize=1)
def _minors() -> list[int]:
    dev = os.path.join(os.environ.get("DEPLOY_SIM_CT_ROOT") or "/", "dev")
    try:
        names = os.listdir(dev)
    except OSError:
        return []
    return sorted(int(n[6:]) for n in names if n.startswith("nvidia") and n[6:].isdigit())


@functools.lru_cache(maxsize=1)
def _vmid() -> int | None:
    try:
        with open(_sim("vmid")) as f:
            vmid = f.read().strip()
    except OSError:
        return None
    return int(vmid) if vmid.isdigit() else None


def _load_path() -> str | None:
    vmid = _vmid()
    return _sim(f"gpu/load-p2p-{vmid}.json") if vmid is not None else None


def _hold_pair() -> None:
    """Keep the finished pair loaded for its copy time (scaled) or MIN_PAIR_WALL_S, whichever is longer."""
    if _Load.pair is None:
        return
    scale = float(_host().get("time_scale") or 1.0) or 1.0
    left = max(MIN_PAIR_WALL_S, _Load.sim_s / scale) - (time.time() - _Load.since)
    if left > 0:
        time.sleep(left)


def _report(src: int, dst: int) -> None:
    path, minors = _load_path(), _minors()
    if path is None or not minors:
        return
    busy = sorted({minors[i] for i in (src, dst) if i < len(minors)})
    data = {"vmid": _vmid(), "pid": os.getpid(), "updated": time.time(), "minors": busy, "power_fraction": 0.15,
            "util": 0.35, "mem_fraction": 0.05, "pcie_rx_mb_s": 26000, "pcie_tx_mb_s": 26000}
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        return


def _loading(src: int, dst: int, seconds: float) -> None:
    if _Load.pair != (src, dst):
        _hold_pair()
        if _Load.pair is None:
            atexit.register(_done)
        _Load.pair, _Load.since, _Load.sim_s = (src, dst), time.time(), 0.0
        _report(src, dst)
    _Load.sim_s += seconds


def _done() -> None:
    _hold_pair()
    path = _load_path()
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass


@functools.lru_cache(maxsize=1)
def _topology() -> tuple[list[str], dict[tuple[int, int], str], dict[tuple[int, int], str]]:
    import torch

    names = [m.group(1) for m in re.finditer(r"^GPU \d+: (.+?) \(UUID", torch._smi("-L"), re.MULTILINE)]
    return names, torch._matrix(torch._smi("topo", "-m")), torch._matrix(torch._smi("topo", "-p2p", "r"))


def is_available() -> bool:
    return bool(_topology()[0])


def device_count() -> int:
    return len(_topology()[0])


def get_device_name(i: int) -> str:
    return _topology()[0][i]


def can_device_access_peer(a: int, b: int) -> bool:
    return _topology()[2].get((a, b)) == "OK"


def _copy(src: int, dst: int, nbytes: int) -> None:
    link = _topology()[1].get((src, dst), "SYS")
    m = re.fullmatch(r"NV(\d+)", link)
    gbps = (int(m.group(1)) * 21.45) if m else GBPS.get(link, 38.0)
    if not can_device_access_peer(src, dst):
        gbps = NO_PEER_GBPS
    if _stuck_gen2() & {src, dst}:
        gbps = min(gbps, GEN2_X16_GBPS)
    seconds = nbytes / (gbps * 1e9)
    _elapsed_s[0] += seconds
    _loading(src, dst, seconds)


def synchronize(device: int | None = None) -> None:
    return None


def empty_cache() -> None:
    return None


@contextmanager
def device(i: int) -> Iterator[None]:
    yield


class Event:
    def __init__(self, enable_timing: bool = False) -> None:
        self.at = 0.0

    def record(self) -> None:
        self.at = _elapsed_s[0]

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end: Event) -> float:
        return (end.at - self.at) * 1000.0
