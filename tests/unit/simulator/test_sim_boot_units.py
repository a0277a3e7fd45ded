"""The simulated host's boot as systemd orders it, and nvidia-modprobe's GPU nodes: pure parts of the simulator."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from simulator.gpu import modprobe
from simulator.hostunits import boot_order, parse_unit

NODES = "[Unit]\nAfter=systemd-modules-load.service nvidia-persistenced.service\nBefore=pve-guests.service\n"
PERSISTENCED = "[Unit]\nAfter=syslog.target\n[Service]\nType=forking\nExecStart=/usr/bin/nvidia-persistenced\n"


def test_a_unit_that_a_pre_guests_unit_is_after_starts_before_the_guests_too() -> None:
    units = [parse_unit("deploy-nvidia-nodes.service", NODES), parse_unit("nvidia-persistenced.service", PERSISTENCED),
             parse_unit("apt-daily.service", "[Unit]\nDescription=x\n")]
    early, late = boot_order(units)
    assert [u.name for u in early] == ["nvidia-persistenced.service", "deploy-nvidia-nodes.service"]
    assert [u.name for u in late] == ["apt-daily.service"]


def test_before_orders_within_a_phase_and_a_cycle_does_not_hang() -> None:
    a = parse_unit("a.service", "[Unit]\nAfter=b.service\n")
    b = parse_unit("b.service", "[Unit]\nAfter=a.service\n")
    c = parse_unit("c.service", "[Unit]\nBefore=a.service\n")
    early, late = boot_order([a, b, c])
    assert early == [] and {u.name for u in late} == {"a.service", "b.service", "c.service"}
    names = [u.name for u in late]
    assert names.index("c.service") < names.index("a.service")


def test_minor_255_is_nvidiactl_and_nvml_makes_only_the_missing_gpu_nodes(tmp_path: Path) -> None:
    assert modprobe.run(modprobe.parse(["-c0", "-c", "255"]), None, tmp_path, 511) == 0
    ctl = (tmp_path / "dev/nvidiactl").lstat()
    assert stat.S_ISCHR(ctl.st_mode) and ctl.st_rdev == os.makedev(195, 255)
    assert not (tmp_path / "dev/nvidia255").exists() and (tmp_path / "dev/nvidia0").exists()
    modprobe.nvml_makes_nodes(tmp_path, [0, 1], 511)
    assert sorted(p.name for p in (tmp_path / "dev").iterdir()) == ["nvidia0", "nvidia1", "nvidiactl"]
