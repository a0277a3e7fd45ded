"""The real installed bytes of what the stand-in wheels stand for, with where each figure comes from.

Why: the disk budget (`stacks_disk_budget_gb`, orchestrator/stacks/stack.py) decides by `du -sb` of each stack's
venv; a stand-in venv is ~70 MB where a real one is ~10 GB, so on the simulator the budget pruned and refused on
fiction (issue 48 item 5). Each stand-in wheel (wheels.py) declares the real bytes of its distribution and shows
them to `du` as a hole (standin_size_hook.py). The figures are the sums of the size column of each real wheel's
RECORD (what pip writes, before byte-compiling), read with `python -m simulator.software.real_sizes WHEEL…` from
the released wheels (`pip download --no-deps --only-binary=:all: --python-version 3.11`, manylinux x86_64).

What no stand-in models (transformers, triton, the nvidia-* CUDA libraries, …) is carried by the sglang stand-in,
so that a stand-in venv of a release measures what that release's real venv measures (CLOSURES).
"""

from __future__ import annotations

import hashlib
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RealSize:
    """One real wheel: its distribution, file, sha256 and the bytes its RECORD says it installs."""

    name: str  # normalised (PEP 503)
    version: str
    wheel: str
    sha256: str
    installed_bytes: int


@dataclass(frozen=True)
class Closure:
    """A release's whole real venv for one Python: what `du -sb` of it measures, and how that was measured."""

    release: str
    python: str
    venv_bytes: int
    how: str


def record_bytes(zf: zipfile.ZipFile) -> int:
    """The sum of the size column of the wheel's RECORD (pure over the open archive)."""
    name = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD") and n.count("/") == 1)
    total = 0
    for line in zf.read(name).decode().splitlines():
        size = line.rsplit(",", 1)[-1].strip()
        total += int(size) if size.isdigit() else 0
    return total


def measure(wheel: Path) -> RealSize:
    """A real wheel's RealSize (name and version from its file name, as pip reads them)."""
    name, version = wheel.name.split("-")[:2]
    h = hashlib.sha256()
    with open(wheel, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    with zipfile.ZipFile(wheel) as zf:
        size = record_bytes(zf)
    return RealSize(name.lower().replace("_", "-"), version, wheel.name, h.hexdigest(), size)


#: The real distributions the stand-in wheels stand for, by (name, version).
REAL_SIZES: dict[tuple[str, str], RealSize] = {(r.name, r.version): r for r in (
    RealSize("sglang", "0.5.12.post1", "sglang-0.5.12.post1-cp311-cp311-manylinux_2_34_x86_64.whl",
             "94b3f3cc6b97f1364f247b8d9c1d106ec63cf22c55d6b65bc40ff29b0206ef5f", 31_157_758),
    RealSize("sglang", "0.5.23", "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
             "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937", 122_500_076),
    RealSize("torch", "2.11.0", "torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl",
             "7aa2f9bbc6d4595ba72138026b2074be1233186150e9292865e04b7a63b8c67a", 1_135_224_372),
    RealSize("torch", "2.14.1", "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl",
             "305a61f61f35f128579f299c5bd33d475f6a01c6307336139632e30856c4854d", 1_142_780_319),
    RealSize("sglang-kernel", "0.4.2.post2", "sglang_kernel-0.4.2.post2-cp310-abi3-manylinux2014_x86_64.whl",
             "f275ce01010933c4ea655e832a05442b766ab8f23dcfd6ff678b15e295d42203", 1_168_590_443),
    RealSize("sglang-kernel", "0.4.10", "sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl",
             "043cbe4a10e7887ea1b25599b729ff1ce115a0d5217b2c177aff9f9ae5327724", 1_202_597_292),
    RealSize("flashinfer-python", "0.6.11.post1", "flashinfer_python-0.6.11.post1-py3-none-any.whl",
             "52c6dbd1262ff0d46dce0253996108e0c55e86faa7c25a1bed7072b31d23551a", 72_478_793),
    RealSize("flashinfer-python", "0.7.2", "flashinfer_python-0.7.2-py3-none-any.whl",
             "770550a0aa92b2f10e6c9a1f048dd43713f0f3bb6a12710186fcf8e4e9c99bd8", 451_478_252),
    RealSize("flashinfer-cubin", "0.6.11.post1", "flashinfer_cubin-0.6.11.post1-py3-none-any.whl",
             "1eb801fc80b5576760d356e31eb452d05ab240f44185f539331bd5f2236e504a", 1_510_879_281),
    RealSize("kernels", "0.14.1", "kernels-0.14.1-py3-none-any.whl",
             "be1a91116e14be1e012fc8f47afb51173ee052586a570fba3d594ef0d1b38920", 203_493),
)}

#: Each release's real venv (Python 3.11, the profile's `sglang==R` with the pins it needs to import today).
CLOSURES: dict[str, Closure] = {c.release: c for c in (
    Closure("0.5.12.post1", "3.11", 9_844_450_267,
            "`du -sb` of the real stack's venv a real roll built in a simulated Debian 12 container (python 3.11, "
            "192 distributions from a lock with `kernels<0.15`; docs/stacks.md, the real sglang stack's figures)"),
    Closure("0.5.23", "3.11", 10_738_793_890,
            "`du -sb` of a venv on ext4 made by Debian 12's python3 3.11.2 (`python3 -m venv`, pip 23.0.1, as a "
            "container's) with `pip install --no-index --no-deps` of the 207 real wheels `python -m "
            "simulator.software.realhouse --release 0.5.23 --python 3.11` resolved (4,345,210,781 bytes of wheels, "
            "9,940,902,069 bytes in their RECORDs; 2026-12-07)"),
)}
#: `du -sb` of a stand-in venv before its holes (pip, setuptools, the real aiohttp, requests, huggingface_hub, …
#: and the stand-ins' own few KB): the part of the real venv the stand-in venv really holds.
STANDIN_BASE_BYTES = 70_354_461


def real_size(name: str, version: str) -> RealSize | None:
    """The real bytes of `name` at `version`, else at its newest measured version (a build the index publishes
    while hosts run, `0.7.2+cu130` or a newer release, carries the bytes of the nearest real one); None: unmeasured."""
    public = version.split("+", 1)[0]
    if (name, public) in REAL_SIZES:
        return REAL_SIZES[(name, public)]
    known = [r for (n, _), r in REAL_SIZES.items() if n == name]
    return known[-1] if known else None


def main(argv: list[str]) -> int:
    """`python -m simulator.software.real_sizes WHEEL…`: each wheel's RealSize, as the table above holds it."""
    for arg in argv:
        print(f"    {measure(Path(arg))!r},")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
