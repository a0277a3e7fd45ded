"""torch.cuda stand-in: device list, peer access and timed copies from the simulated topology."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from contextlib import contextmanager

GBPS = {"PIX": 53.0, "PXB": 52.0, "PHB": 48.0, "NODE": 49.0, "SYS": 38.0}
NO_PEER_GBPS = 11.5  # bounce through host memory
_elapsed_s = [0.0]


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
    _elapsed_s[0] += nbytes / (gbps * 1e9)


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
