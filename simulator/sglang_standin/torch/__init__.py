"""A tiny `torch` stand-in for the simulated container: just enough CUDA API for the P2P copy probe.

Which GPUs exist, how they are linked and whether peer access works come from the simulated `nvidia-smi`
(so device passthrough and the VM profile behave as they do for nvidia-smi); copy times follow a per-link
bandwidth table taken from real figures (NV18 ≈ 386 GB/s measured on a 2× H200; PCIe Gen5 x16 ≈ 50-54 GB/s;
a copy without peer access bounces through host memory).
"""

from __future__ import annotations

import re
import subprocess

from torch import cuda

__version__ = "0.0.0+deploy-sim"
uint8 = "uint8"
float32 = "float32"
bfloat16 = "bfloat16"


class Tensor:
    def __init__(self, nbytes: int, device: str) -> None:
        self.nbytes = nbytes
        self.device = int(device.split(":")[1]) if ":" in device else 0

    def copy_(self, other: Tensor, non_blocking: bool = False) -> Tensor:
        cuda._copy(other.device, self.device, min(self.nbytes, other.nbytes))
        return self


def empty(n: int, dtype: str = uint8, device: str = "cpu") -> Tensor:
    size = {"uint8": 1, "bfloat16": 2, "float32": 4}.get(str(dtype), 1)
    return Tensor(int(n) * size, device)


def _smi(*args: str) -> str:
    res = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True)
    return res.stdout if res.returncode == 0 else ""


def _matrix(text: str) -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], str] = {}
    for line in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines():
        cells = [c.strip() for c in line.split("\t")]
        if cells and re.fullmatch(r"GPU\d+", cells[0]):
            a = int(cells[0][3:])
            for b, cell in enumerate(c for c in cells[1:] if c):
                if re.fullmatch(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|OK|CNS|GNS|TNS|NS|DR|U", cell):
                    out[(a, b)] = cell
    return out
