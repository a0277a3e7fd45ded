"""What one run of the container's `nvidia-smi` costs: the stub the `.run` stand-in installs (simulator/software/
nvrun.py), run by its own `#!/usr/bin/python3 -S` line against a directory laid out like a container's root (the
ctside mounts, /dev nodes of all eight GPUs, the userspace at the host driver's version), as the facts read runs it
four times per container. Prints the median wall and CPU time of N runs of each, next to `python3 -S -c pass`, and
the import time of `-L` (`-X importtime`). Nothing is asserted: this is a measurement.

Run: `python tests/perf/smi_cost.py [--runs 20] [--repo DIR]`; `--repo` measures another checkout's simulator
(`git archive COMMIT simulator | tar -x -C DIR` gives one). No root needed.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DRIVER = "580.95.05"
PYTHON = "/usr/bin/python3"  # the container's (Debian 12), as the stub's first line names it
MODES = (["-L"], ["topo", "-m"], ["topo", "-p2p", "r"],
         # orchestrator/parsers/ct_gpus.py's CT_GPU_QUERY
         ["--query-gpu=index,uuid,name,pci.bus_id,driver_version", "--format=csv"])


def ct_root(path: Path) -> Path:
    """A container root with the ctside mounts and the `.run`'s files (from the imported checkout)."""
    from simulator import ctside
    from simulator.software import nvrun, runfile

    sim = path / ctside.SIM_DIR.lstrip("/")
    for d in ("host", "ct", "gpu"):
        (sim / d).mkdir(parents=True)
    (sim / "host" / "host.json").write_text(json.dumps({"gpu_profile": "rtx-pro-6000-x8", "driver_version": DRIVER}))
    (sim / "ct" / "state.json").write_text(json.dumps({"vmid": 120, "faults": {}}))
    (path / ctside.VMID_FILE.lstrip("/")).write_text("120\n")
    (path / "dev").mkdir()
    for name in ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", *(f"nvidia{m}" for m in range(8))]:
        (path / "dev" / name).touch()
    payload = path.parent / "payload"
    for name, data in runfile.payload_files().items():
        (payload / name).parent.mkdir(parents=True, exist_ok=True)
        (payload / name).write_bytes(data)
    nvrun.install(path, DRIVER, payload)
    return path


def measure(argv: list[str], runs: int) -> tuple[float, float, float]:
    """(median wall ms, min wall ms, median CPU ms) of `argv`, after one warm-up run (.pyc, the -q cache)."""
    env = {"PATH": "/usr/bin:/bin"}
    subprocess.run(argv, env=env, capture_output=True, check=True)
    walls, cpus = [], []
    for _ in range(runs):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        walls.append((time.perf_counter() - t0) * 1000)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1000)
    return statistics.median(walls), min(walls), statistics.median(cpus)


def import_times(stub: str) -> list[tuple[int, str]]:
    """(cumulative µs, module) of each top-level import of `nvidia-smi -L`, largest first."""
    res = subprocess.run([PYTHON, "-S", "-X", "importtime", stub, "-L"], env={"PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True)
    top = []
    for line in res.stderr.splitlines()[1:]:
        _, cumulative, name = line.split("|")
        if not name.startswith("  "):  # one space: imported by the stub, not by another module
            top.append((int(cumulative), name.strip()))
    return sorted(top, reverse=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[2],
                    help="the checkout whose simulator/ to install (default: this one)")
    args = ap.parse_args()
    sys.path.insert(0, str(args.repo.resolve()))
    with tempfile.TemporaryDirectory(prefix="smi-cost-") as tmp:
        root = ct_root(Path(tmp) / "ct")
        stub = str(root / "usr/bin/nvidia-smi")
        print(f"simulator from {Path(sys.modules['simulator'].__file__ or '').parent}")
        print(f"{'command':<46} {'wall median':>11} {'wall min':>9} {'CPU median':>11}  (ms, {args.runs} runs)")
        for label, argv in [("python3 -S -c pass", [PYTHON, "-S", "-c", "pass"]),
                            *((f"nvidia-smi {' '.join(m)}", [stub, *m]) for m in MODES)]:
            wall, low, cpu = measure(argv, args.runs)
            print(f"{label[:46]:<46} {wall:>11.1f} {low:>9.1f} {cpu:>11.1f}")
        top = import_times(stub)
        print(f"imports of nvidia-smi -L: {sum(us for us, _ in top) / 1000:.1f} ms; largest: "
              + ", ".join(f"{name} {us / 1000:.1f}" for us, name in top[:6]))


if __name__ == "__main__":
    main()
