"""Helpers for the tests of what a real container installs: a fake container root, venvs from the local index.

Everything runs on this machine without LXC: a "container root" is a temp directory laid out like one (the
ctside mounts under run/deploy-sim, /dev nodes as plain files), and the stand-ins are told about it through
$DEPLOY_SIM_CT_ROOT. Venvs are made with the container's interpreter (Debian 12's /usr/bin/python3) and the
machine's pip configuration is switched off, so pip sees only the simulated host's index.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from simulator import ctside
from simulator.gpu.profiles import get_profile
from simulator.software.index import PackageIndex, start_index

CT_PYTHON = "/usr/bin/python3"
HOST_DRIVER = "580.95.05"
REPO = Path(__file__).resolve().parents[3]
LIB = "usr/lib/x86_64-linux-gnu"


def loopback() -> str:
    """A loopback address of this run's range ($DEPLOY_SIM_FIRST), so parallel runs stay apart."""
    first = int(os.environ.get("DEPLOY_SIM_FIRST") or "20")
    return f"127.0.0.{min(first, 250) + 1}"


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a process "in the container": no pip/HF/sim settings of this machine."""
    drop = ("PIP_", "PYTHON", "HF_", "DEPLOY_SIM", "SGLANG_SIM", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", HF_HUB_DISABLE_UPDATE_CHECK="1",
               HF_HUB_DISABLE_TELEMETRY="1")
    env.update(extra)
    return env


@dataclass(frozen=True)
class CtRoot:
    """A directory laid out like a real container's root, with the simulator's ctside mounts."""

    root: Path

    @property
    def sim(self) -> Path:
        return self.root / ctside.SIM_DIR.lstrip("/")

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(DEPLOY_SIM_CT_ROOT=str(self.root), **extra)

    def set_state(self, **faults: object) -> None:
        (self.sim / "ct" / "state.json").write_text(json.dumps({"vmid": 120, "faults": faults}))


def make_ct_root(path: Path, minors: list[int] | None = None, time_scale: float = 4.0,
                 profile: str = "rtx-pro-6000-x8") -> CtRoot:
    """Mounts as the LXC runtime makes them: host.json, state.json, the gpu dir, the vmid file, /dev nodes."""
    ct = CtRoot(path)
    for d in ("host", "ct", "gpu"):
        (ct.sim / d).mkdir(parents=True, exist_ok=True)
    (ct.sim / "host" / "host.json").write_text(json.dumps(
        {"gpu_profile": profile, "driver_version": HOST_DRIVER, "time_scale": time_scale}))
    ct.set_state()
    (path / ctside.VMID_FILE.lstrip("/")).write_text("120\n")
    dev = path / "dev"
    dev.mkdir(exist_ok=True)
    gpus = get_profile(profile).gpus
    wanted = [g.minor for g in gpus] if minors is None else minors
    for name in ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", *(f"nvidia{m}" for m in wanted)]:
        (dev / name).touch()
    with_toolchain(ct)
    return ct


def with_toolchain(ct: CtRoot) -> CtRoot:
    """What `ct_packages` installs for the real first start: a C compiler on PATH and the Python headers, inside the
    container's root (the stand-in looks there, never at the test machine's own gcc)."""
    gcc = ct.root / "usr" / "bin" / "gcc"
    gcc.parent.mkdir(parents=True, exist_ok=True)
    gcc.write_text("#!/bin/sh\nexit 0\n")
    gcc.chmod(0o755)
    for include in {_include(sys.executable), _include(CT_PYTHON)}:  # the tests' interpreter, and the venvs' base
        header = ct.root / include.lstrip("/") / "Python.h"
        header.parent.mkdir(parents=True, exist_ok=True)
        header.touch()
    return ct


def _include(python: str) -> str:
    """The include dir Triton (and the stand-in) passes the compiler for `python` (sysconfig's `include`)."""
    code = ("import sysconfig; s = sysconfig.get_default_scheme(); "
            "print(sysconfig.get_paths(scheme='posix_prefix' if s == 'posix_local' else s)['include'])")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def with_userspace(ct: CtRoot, version: str | None = HOST_DRIVER) -> CtRoot:
    """What the .run leaves behind that the stand-ins look at: libnvidia-ml.so.1 -> libnvidia-ml.so.<version>."""
    lib = ct.root / LIB
    lib.mkdir(parents=True, exist_ok=True)
    link = lib / "libnvidia-ml.so.1"
    link.unlink(missing_ok=True)
    if version:
        (lib / f"libnvidia-ml.so.{version}").write_text("placeholder\n")
        link.symlink_to(f"libnvidia-ml.so.{version}")
    return ct


def ct_smi(ct: CtRoot, *args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """nvidia-smi in the "container" `ct`, as the stub the .run installs runs it (simulator.gpu.smi, ct_root)."""
    code = ("import sys; from pathlib import Path; from simulator.gpu.smi import main; "
            f"sys.exit(main(sys.argv[1:], ct_root=Path({str(ct.root)!r})))")
    return subprocess.run([sys.executable, "-S", "-c", code, *args], env=ct.env(PYTHONPATH=str(REPO)),
                          capture_output=True, text=True, timeout=timeout)


def _session_dir(prefix: str) -> Path:
    """A temporary directory removed when the test session's process exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path


@cache
def session_index() -> PackageIndex:
    """The simulated host's index over the (cached) wheelhouse, once per test session."""
    idx = start_index(_session_dir("sim-host-"), loopback(), 0)
    atexit.register(idx.stop)
    return idx


@dataclass(frozen=True)
class Venv:
    path: Path
    install_s: float

    def bin(self, name: str) -> str:
        return str(self.path / "bin" / name)

    def run(self, *argv: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*argv], env=clean_env(**env), capture_output=True, text=True, timeout=timeout)


def make_venv(path: Path, *requirements: str) -> Venv:
    """`python3 -m venv` + `pip install --index-url <the sim host's index> REQS`, nothing else configured."""
    subprocess.run([CT_PYTHON, "-m", "venv", str(path)], check=True, capture_output=True, timeout=120)
    t0 = time.monotonic()
    res = subprocess.run([str(path / "bin" / "pip"), "install", "--no-cache-dir", "--index-url",
                          session_index().url, *requirements], env=clean_env(), capture_output=True, text=True,
                         timeout=300)
    if res.returncode != 0:
        raise AssertionError(f"pip install {requirements} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return Venv(path, time.monotonic() - t0)


@cache
def sglang_venv() -> Venv:
    """One venv per session with `sglang[tracing]==0.5.23` from the index (it brings `hf`)."""
    return make_venv(_session_dir("ml-env-") / "venv", "sglang[tracing]==0.5.23")
