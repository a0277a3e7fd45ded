"""The REAL router for simulated fleets (sglang-router or smg): pip-installed into its own venv, run detached.

Nothing about the router is simulated: `ensure_router_venv` creates a venv once per machine and package (cached
under /var/cache/deploy-sim, like a downloaded template) and pip-installs the pinned `sglang-router` or `smg` with
this machine's pip configuration; `start_router` runs `python -m <module>.launch_router` on a loopback address.
The tool reaches it only through its worker API (orchestrator/router/client.py).

    python -m simulator.router install [--package smg] [--version 1.13.0]
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

from simulator import procs

ROUTER_VERSION = "0.3.2"
#: The pinned release of each package (the inventory's defaults, orchestrator/inventory/models.py).
VERSIONS = {"sglang-router": ROUTER_VERSION, "smg": "1.13.0"}
MODULES = {"sglang-router": "sglang_router", "smg": "smg"}
CACHE = Path(os.environ.get("DEPLOY_SIM_CACHE", "/var/cache/deploy-sim"))


def router_venv(version: str = ROUTER_VERSION, package: str = "sglang-router") -> Path:
    """The operator-side venv (a router in a simulated container is installed there by the tool itself)."""
    return CACHE / f"{package}-{version}"


def installed(version: str = ROUTER_VERSION, package: str = "sglang-router") -> bool:
    return (router_venv(version, package) / ".installed").is_file()


def ensure_router_venv(version: str = ROUTER_VERSION, timeout_s: float = 900, package: str = "sglang-router") -> Path:
    """The venv with sglang-router==VERSION (created and pip-installed on first use; ~30 MB wheel).

    Built under an exclusive lock, checked again once held: two test processes that both found it missing ran
    `venv --clear` over each other, and one started a router from a venv the other had just emptied."""
    venv = router_venv(version, package)
    if installed(version, package):
        return venv
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed(version, package):
            return venv
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=timeout_s)
        proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                               "-q", f"{package}=={version}"], capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"pip install {package}=={version} failed: {proc.stderr.strip()[-800:]}")
        (venv / ".installed").write_text(f"{version}\n")
    return venv


def start_router(run_dir: Path, address: str, port: int, worker_urls: list[str] | None = None,
                 policy: str = "round_robin", extra: list[str] | None = None,
                 version: str | None = None, package: str = "sglang-router") -> int:
    """Start the router detached (pid file and log in run_dir) and wait for its /health; returns its pid. Its
    metrics listen at the same address, port + 1."""
    assert address.startswith("127."), "the simulator only listens on 127.0.0.0/8"
    venv = ensure_router_venv(version or VERSIONS[package], package=package)
    run_dir.mkdir(parents=True, exist_ok=True)
    pid = procs.read_pid(run_dir / "router.pid")
    if pid is not None:
        return pid
    argv = [str(venv / "bin" / "python"), "-m", f"{MODULES[package]}.launch_router", "--host", address,
            "--port", str(port), "--policy", policy, "--log-level", "warn",
            # The metrics exporter defaults to 0.0.0.0:29000: two routers would collide, and the simulator listens
            # on its own loopback address only.
            "--prometheus-host", address, "--prometheus-port", str(port + 1)]
    if worker_urls:
        argv += ["--worker-urls", *worker_urls]
    argv += extra or []
    proc = procs.start_detached(argv, run_dir / "router.log", env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    (run_dir / "router.pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 60
    import urllib.request

    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{package} exited ({proc.returncode}); see {run_dir / 'router.log'}")
        try:
            with urllib.request.urlopen(f"http://{address}:{port}/health", timeout=1) as resp:
                if resp.status == 200:
                    return proc.pid
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{package} did not answer /health within 60 s; see {run_dir / 'router.log'}")


def stop_router(run_dir: Path) -> None:
    procs.stop_tree(run_dir / "router.pid")


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m simulator.router")
    sub = ap.add_subparsers(dest="cmd", required=True)
    inst = sub.add_parser("install")
    inst.add_argument("--package", choices=sorted(VERSIONS), default="sglang-router")
    inst.add_argument("--version")
    args = ap.parse_args(argv)
    print(ensure_router_venv(args.version or VERSIONS[args.package], package=args.package))
    return 0


if __name__ == "__main__":
    sys.exit(main())
