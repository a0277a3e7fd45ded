"""Where a sim root's container filesystems live: on its disk (default), or in memory (`ct_storage="tmpfs"`).

Unpacking a 300 MB template right after destroying a container is slow on a disk mounted with online `discard`
(this VM's root: 6-8 s instead of 1.5 s), and the test suite creates and destroys a container per test. A tmpfs
over `<root>/lxc` makes both cheap. It is volatile: `sim down` unmounts it, and the containers are then gone,
so their PVE configs go with them (a PVE host never keeps a config whose volume is lost).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

STORAGES = ("disk", "tmpfs")


class StorageError(RuntimeError):
    """The container storage could not be mounted or unmounted."""


def _mount_type(path: Path) -> str | None:
    target = str(path)
    kind = None
    with open("/proc/self/mounts") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) > 2 and fields[1].replace("\\040", " ") == target:
                kind = fields[2]  # the last mount on a path is the visible one
    return kind


def is_memory(lxc_dir: Path) -> bool:
    return _mount_type(lxc_dir.resolve()) == "tmpfs"


def prepare(lxc_dir: Path, storage: str) -> None:
    """Make `<root>/lxc`; with "tmpfs" mount one over it (kept if already there; refused over containers)."""
    if storage not in STORAGES:
        raise ValueError(f"unknown container storage {storage!r} (known: {', '.join(STORAGES)})")
    lxc_dir.mkdir(parents=True, exist_ok=True)
    if storage == "disk" or is_memory(lxc_dir):
        return
    if any(lxc_dir.iterdir()):
        raise StorageError(f"{lxc_dir} already holds containers on disk; tmpfs storage would hide them "
                           "(bring this root down and remove it, or keep disk storage)")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,nosuid", "deploy-sim-ct", str(lxc_dir)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise StorageError(f"mount tmpfs on {lxc_dir}: {res.stderr.strip()}")


def release(lxc_dir: Path) -> bool:
    """Unmount a tmpfs container storage (lazily, should a process still hold it). True if there was one."""
    if not lxc_dir.exists() or not is_memory(lxc_dir):
        return False
    res = subprocess.run(["umount", "-l", str(lxc_dir.resolve())], capture_output=True, text=True)
    if res.returncode != 0:
        raise StorageError(f"umount {lxc_dir}: {res.stderr.strip()}")
    return True


__all__ = ["STORAGES", "StorageError", "is_memory", "prepare", "release"]
