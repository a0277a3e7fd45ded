"""The simulated host's wheelhouse: the stand-in wheels plus the real wheels they and the tool need.

Why: a real container installs sglang with its own pip from a package index. The simulated host provides that
index (simulator/software/index.py) from this directory, so containers install offline and fast, and the
same files serve every simulated host. Filled once per machine under a lock; the real wheels come from
`pip download` with this machine's own pip configuration (no index is named here).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from simulator.lxc.template import RELEASES

from .wheels import SGLANG_REQUIRES, build_standin_wheels

DEFAULT_DIR = Path("/var/cache/deploy-sim/wheelhouse")
#: Real packages the tool installs next to sglang: `hf` (huggingface_hub 1.x) and the routers (both releases deploy
#: drives, orchestrator/router/release.py; smg's wheel is abi3, so one serves both Pythons).
EXTRA_REQUIREMENTS = ("huggingface_hub>=1,<2", "sglang-router==0.3.2", "smg==1.13.0")
#: The containers' Pythons: each template release's python3 (Debian 12: 3.11, Debian 13: 3.13). Pure wheels
#: serve both; compiled ones (pydantic_core, aiohttp, pyyaml, ...) are downloaded once per version.
TARGET_PYTHONS = tuple(r.python for r in RELEASES)
TARGET_PYTHON = TARGET_PYTHONS[0]
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64", "linux_x86_64")
MARKER = ".filled.json"


def marker_name(python_version: str) -> str:
    """The fill marker of one Python: the first keeps `.filled.json`, so a wheelhouse an older checkout filled
    for 3.11 alone stays valid for it and is only topped up with the other versions' wheels."""
    return MARKER if python_version == TARGET_PYTHON else f".filled-{python_version}.json"


@dataclass(frozen=True)
class Wheelhouse:
    """A filled wheelhouse: where it is and what the fill cost."""

    path: Path
    downloaded: bool  # False: the real wheels were already there
    fill_s: float

    @property
    def wheels(self) -> list[Path]:
        return sorted(self.path.glob("*.whl"))

    @property
    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.wheels)


def wheelhouse_dir() -> Path:
    """$DEPLOY_SIM_WHEELHOUSE (tests, CI caches) or /var/cache/deploy-sim/wheelhouse."""
    return Path(os.environ.get("DEPLOY_SIM_WHEELHOUSE") or DEFAULT_DIR)


def requirements() -> list[str]:
    """What `pip download` fetches: the stand-ins' real dependencies (torch is a stand-in) and the extras."""
    return [r for r in SGLANG_REQUIRES if r != "torch"] + list(EXTRA_REQUIREMENTS)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def download_command(dest: Path, python_version: str = TARGET_PYTHON) -> list[str]:
    """`pip download` of binary wheels for the container's Python, with this machine's pip configuration."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "-d", str(dest),
           "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    return cmd + requirements()


def fill(path: Path | None = None, python_versions: tuple[str, ...] = TARGET_PYTHONS) -> Wheelhouse:
    """Build the stand-in wheels into the wheelhouse (always: cheap and deterministic) and download the real
    ones once per Python; concurrent callers wait on the lock, then find it filled."""
    path = path or wheelhouse_dir()
    t0 = time.monotonic()
    downloaded = False
    with _locked(path.parent / f".{path.name}.lock"):
        path.mkdir(parents=True, exist_ok=True)
        for version in python_versions:
            downloaded = _fill_for(path, version) or downloaded
        build_standin_wheels(path)
    return Wheelhouse(path, downloaded, time.monotonic() - t0)


def _fill_for(path: Path, python_version: str) -> bool:
    """Download the real wheels for one Python unless its marker says they are there; True when it did."""
    want = {"requirements": requirements(), "python": python_version}
    marker = path / marker_name(python_version)
    try:
        if json.loads(marker.read_text()) == want:
            return False
    except (OSError, ValueError):
        pass
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        res = subprocess.run(download_command(Path(tmp), python_version), capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"wheelhouse {path}: pip download for Python {python_version} failed (exit "
                               f"{res.returncode}); check this machine's pip configuration and package access:\n"
                               f"{res.stderr[-2000:]}")
        for whl in Path(tmp).glob("*.whl"):
            shutil.move(str(whl), path / whl.name)
    marker.write_text(json.dumps(want) + "\n")
    return True


def main() -> int:
    """`python -m simulator.software.wheelhouse [DIR]`: fill and report size and time."""
    wh = fill(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
    print(f"{wh.path}: {len(wh.wheels)} wheels, {wh.size_bytes / 1e6:.1f} MB, "
          f"{'downloaded' if wh.downloaded else 'cached'}, {wh.fill_s:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
