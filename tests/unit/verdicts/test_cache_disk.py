"""doctor's kernel-cache row (orchestrator/verdicts/cache_disk.py): where the caches live, the room left there and
the caches' bytes, read from the facts' real output (tests/facts/HOST.kernel_cache_usage, CT.pip_cache_usage)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.verdicts.cache_disk import LOW_FREE_BYTES, DiskUsage, cache_finding, parse_usage

FACTS = Path(__file__).resolve().parents[2] / "facts"
GB = 1000 ** 3


def fixture(name: str) -> DiskUsage:
    usage = parse_usage(json.loads((FACTS / name).read_text())["output"]["stdout"])
    assert usage is not None
    return usage


def test_the_usage_names_the_filesystem_the_free_space_and_the_caches() -> None:
    kernel = fixture("HOST.kernel_cache_usage/two-caches-one-set-aside.json")
    assert (kernel.filesystem, kernel.fstype, kernel.mount) == ("dt-caches", "tmpfs", "/var/tmp/dt-caches")
    assert kernel.exists and kernel.caches == 1 and kernel.set_aside == 1 and kernel.used == 100200
    absent = fixture("HOST.kernel_cache_usage/not-there-yet.json")
    assert not absent.exists and absent.mount == "/" and absent.free is not None and absent.free > 0
    assert parse_usage("") is None
    garbled = parse_usage("path\t/x\ndf\tnot a df line\n")
    assert garbled is not None and garbled.filesystem is None and garbled.free is None


def test_a_roomy_cache_is_ok_and_shows_the_configured_root_and_both_caches() -> None:
    kernel = DiskUsage("/tank/kernel-cache/120", "tank/cache", "zfs", "/tank", 2000 * GB, 900 * GB, 6 * GB,
                       (".deploy-made-this-dir", "a-b", "c-d", "a-b.set-aside-20261201T000000", "flashinfer-cubins"))
    pip = DiskUsage("/opt/deploy/stacks/.pip-cache", "/dev/loop0", "ext4", "/", 200 * GB, 150 * GB, 4 * GB,
                    ("http-v2",))
    found = cache_finding(kernel, pip, configured=True, vmid=120)
    assert found.check == "kernel-cache" and found.status == "ok", found
    assert found.observed == ("/tank/kernel-cache/120 (container.kernel_cache) on tank/cache (zfs, mounted at /tank): "
                              "900.0 GB free of 2000.0 GB; kernel caches 6.0 GB in 2 dir(s), 1 set aside (the newest "
                              "2 kept); pip cache /opt/deploy/stacks/.pip-cache 4.0 GB (container on /dev/loop0 (ext4, "
                              "mounted at /): 150.0 GB free of 200.0 GB)")
    default = cache_finding(kernel, None, configured=False, vmid=120)
    assert "(the default, one per container (CT 120))" in default.observed
    assert default.observed.endswith("; pip cache not read (the container is not running)")


def test_low_room_is_a_warning_with_the_fix_for_each_filesystem() -> None:
    low = DiskUsage("/var/lib/deploy/kernel-cache/120", "/dev/mapper/pve-root", "ext4", "/", 30 * GB,
                    LOW_FREE_BYTES - 1, 8 * GB, ("a-b",))
    roomy_pip = DiskUsage("/opt/deploy/stacks/.pip-cache", "/dev/loop0", "ext4", "/", 200 * GB, 150 * GB)
    found = cache_finding(low, roomy_pip, configured=False, vmid=120)
    assert found.status == "warn" and found.observed.endswith(": under 20.0 GB free"), found
    assert found.fix.startswith("point container.kernel_cache at a directory on a storage with room") and \
        found.fix.endswith("free space on /") and "pip cache" not in found.fix
    aside = DiskUsage(low.path, low.filesystem, low.fstype, "/", 30 * GB, GB, 8 * GB, ("a-b", "a-b.set-aside-1"))
    assert cache_finding(aside, None, configured=False, vmid=120).fix.endswith(
        "; the 1 set-aside cache(s) can be removed (rm -rf /var/lib/deploy/kernel-cache/120/*.set-aside-*)")
    low_pip = DiskUsage("/opt/deploy/stacks/.pip-cache", "/dev/loop0", "ext4", "/", 60 * GB, GB, 4 * GB, ())
    roomy = DiskUsage(low.path, low.filesystem, low.fstype, "/", 2000 * GB, 900 * GB, 0, ())
    found = cache_finding(roomy, low_pip, configured=False, vmid=120)
    assert found.status == "warn" and "container.kernel_cache" not in found.fix
    assert "stacks_disk_budget_gb, which empties the pip cache /opt/deploy/stacks/.pip-cache first" in found.fix
    # A filesystem df could not read is no proof of room.
    unread = cache_finding(DiskUsage(low.path), None, configured=False, vmid=120)
    assert unread.status == "warn" and "free space unknown" in unread.observed
    assert cache_finding(None, None, configured=False, vmid=120).status == "warn"
