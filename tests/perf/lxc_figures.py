"""Figures of the simulator's LXC containers: template, `sim up` to a ready host, container create+start, idle
memory per container, lxc-attach cost. Nothing is asserted: this is a measurement.

Run as root: `DEPLOY_SIM_FIRST=N python tests/perf/lxc_figures.py` (uses sim-N and sim-N's bridge /24). The
template figure is the cached one unless the cache is empty; `--cold` builds a fresh template in a temporary
cache directory first (debootstrap: minutes of CPU).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from simulator.config import SimPaths  # noqa: E402
from simulator.lxc import template  # noqa: E402
from simulator.lxc.runtime import LxcRuntime  # noqa: E402
from simulator.manager.lifecycle import sim_down, sim_up  # noqa: E402
from simulator.pve.lxc import Node  # noqa: E402

TEMPLATE = "local:vztmpl/" + template.TEMPLATE_NAME


def _ct_memory(vmid: int) -> int:
    for path in (f"/sys/fs/cgroup/memory/lxc.payload.{vmid}/memory.usage_in_bytes",
                 f"/sys/fs/cgroup/lxc.payload.{vmid}/memory.current"):
        if os.path.exists(path):
            return int(Path(path).read_text())
    return 0


def main() -> int:
    first = int(os.environ.get("DEPLOY_SIM_FIRST", "90"))
    with tempfile.TemporaryDirectory(prefix="deploy-lxc-perf-") as tmp:
        if "--cold" in sys.argv:
            os.environ["DEPLOY_SIM_TEMPLATE_CACHE"] = str(Path(tmp) / "templates")
            template.CACHE_DIR = Path(tmp) / "templates"
        built = template.ensure()
        print(f"template: {built.size_bytes / 1e6:.1f} MB, {'built' if built.built else 'cached'} in "
              f"{built.seconds:.1f} s")
        root = Path(tmp) / "sim"
        t0 = time.monotonic()
        (info,) = sim_up(root, hosts=1, first=first)
        print(f"sim up to a ready host: {time.monotonic() - t0:.2f} s")
        try:
            hp = SimPaths(root).host(info.name)
            node = Node(hp)
            rt = node.lxc
            assert isinstance(rt, LxcRuntime)
            rootfs_mb = 0.0
            for vmid in (120, 121, 122):
                t0 = time.monotonic()
                params = {"vmid": vmid, "ostemplate": TEMPLATE, "hostname": f"ct{vmid}", "unprivileged": 0,
                          "net0": "name=eth0,bridge=vmbr0,ip=dhcp"}
                conf = node.build_conf(params, lambda _k, v: str(v))
                node.create(params, conf, lambda _line: None)
                t1 = time.monotonic()
                node.start(vmid, lambda _line: None)
                t2 = time.monotonic()
                print(f"CT {vmid}: create {t1 - t0:.2f} s, start to systemd running {t2 - t1:.2f} s")
                rootfs_mb = int(subprocess.run(["du", "-sm", str(rt.dirs(vmid).rootfs)], capture_output=True,
                                               text=True).stdout.split()[0])
            print(f"rootfs on disk: {rootfs_mb} MB per container")
            time.sleep(5)
            mems = [_ct_memory(v) / 2**20 for v in (120, 121, 122)]
            print(f"idle memory per container (cgroup usage incl. page cache): "
                  f"{', '.join(f'{m:.1f}' for m in mems)} MiB")
            argv = rt._attach_argv(120, ["true"])
            times = []
            for _ in range(30):
                t0 = time.monotonic()
                subprocess.run(argv, check=True)
                times.append(time.monotonic() - t0)
            print(f"lxc-attach -- true: median {statistics.median(times) * 1000:.1f} ms, "
                  f"min {min(times) * 1000:.1f} ms (30 calls)")
            t0 = time.monotonic()
            node.reboot(120, lambda _line: None)
            print(f"pct reboot (shutdown + start to systemd running): {time.monotonic() - t0:.2f} s")
        finally:
            t0 = time.monotonic()
            sim_down(root)
            print(f"sim down: {time.monotonic() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
