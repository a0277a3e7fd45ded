"""What a test's container costs: `pct create` + `pct start` (to systemd running) + `pct destroy`, from the stock
template and from the site template (tests/e2e/site_template.py), with container filesystems on disk or on a
tmpfs (simulator/lxc/storage.py). Each cycle destroys the previous container first, as the test suite does.
Nothing is asserted: this is a measurement.

Run as root: `DEPLOY_SIM_FIRST=N python tests/perf/ct_storage.py [--cycles 5]` (uses sim-N and sim-(N+1)). The
site template is built first if this code version has none yet (about 30 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from simulator.config import SimPaths  # noqa: E402
from simulator.lxc import template  # noqa: E402
from simulator.manager.lifecycle import sim_down, sim_up  # noqa: E402
from simulator.pve.lxc import Node  # noqa: E402
from tests.e2e import site_template  # noqa: E402


def _cycles(node: Node, volid: str, cycles: int) -> tuple[list[float], list[float], list[float]]:
    creates, starts, destroys = [], [], []
    for _ in range(cycles):
        params = {"vmid": 120, "ostemplate": volid, "hostname": "ct120", "unprivileged": 0,
                  "net0": "name=eth0,bridge=vmbr0,ip=dhcp"}
        t0 = time.monotonic()
        node.create(params, node.build_conf(params, lambda _k, v: str(v)), lambda _line: None)
        t1 = time.monotonic()
        node.start(120, lambda _line: None)
        t2 = time.monotonic()
        node.stop(120, lambda _line: None)
        node.destroy(120, lambda _line: None)
        t3 = time.monotonic()
        creates.append(t1 - t0)
        starts.append(t2 - t1)
        destroys.append(t3 - t2)
    return creates, starts, destroys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=5)
    args = parser.parse_args()
    first = int(os.environ.get("DEPLOY_SIM_FIRST", "90"))
    with tempfile.TemporaryDirectory(prefix="deploy-ct-storage-") as tmp:
        site = site_template.site_template()
        print(f"site template: {site.name}, {site.stat().st_size / 1e6:.0f} MB compressed")
        for offset, storage in enumerate(("disk", "tmpfs")):
            root = Path(tmp) / storage
            (info,) = sim_up(root, first=first + offset, time_scale=5.0, ct_storage=storage)
            try:
                hp = SimPaths(root).host(info.name)
                site_volid = site_template.install(hp.dir)
                for label, volid in (("stock", f"local:vztmpl/{template.TEMPLATE_NAME}"), ("site", site_volid)):
                    creates, starts, destroys = _cycles(Node(hp), volid, args.cycles)
                    print(f"{storage:5} {label:5}: create median {statistics.median(creates):.2f} s "
                          f"(max {max(creates):.2f}), start {statistics.median(starts):.2f} s, "
                          f"stop+destroy {statistics.median(destroys):.2f} s  ({args.cycles} cycles)")
            finally:
                sim_down(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
