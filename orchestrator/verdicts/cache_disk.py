"""Where the caches live and how much room is left: `doctor`'s `kernel-cache` row (issue 48 items 5 and 6).

A real host's caches are big and grow at every cold start: the kernel caches (one directory per stack and server
shape, on the PVE host: container.kernel_cache, default /var/lib/deploy/kernel-cache/<vmid>, bind-mounted at
/var/cache/deploy/kernels) and the managed pip cache beside the stacks in the container (PATHS.pip_cache_dir, ~4 GB
of wheels per real stack). A default PVE root LV is small, so the row names the directory, the filesystem it is on,
the free space there and the caches' bytes, and warns with the fix (a storage with room) when free space is low.

Pure: `usage_command` is what the facts run (on the host for the kernel caches, in the container for the pip
cache); `parse_usage` makes its output a value; `cache_finding` judges.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from orchestrator.stacks.kernel_caches import KEEP_SET_ASIDE, SHARED_CUBINS
from orchestrator.stacks.pip_progress import human
from orchestrator.verdicts.host import Finding

#: Below this much free space on the caches' filesystem, doctor warns: a real stack's build writes ~10 GB of venv
#: and ~4 GB of pip cache, and a cold start's kernel caches come on top.
LOW_FREE_BYTES = 20 * 1000 ** 3


def usage_command(path: str) -> str:
    """`df` of `path` (or of its nearest existing parent, when it is not there yet), `du -sb` of it, and the names
    in it, one a line after the path itself: `path<TAB>PATH`, `df<TAB>LINE`, `du<TAB>BYTES`, `entry<TAB>NAME`.
    Never fails."""
    d = shlex.quote(path)
    return (f"printf 'path\\t%s\\n' {d}; p={d}; while [ ! -e \"$p\" ]; do p=$(dirname \"$p\"); done; "
            "printf 'df\\t%s\\n' \"$(df -P -T -B1 \"$p\" 2>/dev/null | tail -n 1)\"; "
            f"if [ -d {d} ]; then printf 'du\\t%s\\n' \"$(du -sb {d} 2>/dev/null | cut -f1)\"; "
            f"ls -1A {d} 2>/dev/null | sed 's/^/entry\\t/'; fi; true")


@dataclass(frozen=True)
class DiskUsage:
    """A cache directory as `usage_command` read it: its filesystem (None: df said nothing readable), the free
    and total bytes there, its own bytes and its entries (None: the directory is not there)."""

    path: str
    filesystem: str | None = None
    fstype: str | None = None
    mount: str | None = None
    size: int | None = None
    free: int | None = None
    used: int | None = None
    entries: tuple[str, ...] | None = None

    @property
    def exists(self) -> bool:
        return self.entries is not None

    @property
    def set_aside(self) -> int:
        """Kernel cache directories set aside after a failed check (orchestrator/stacks/kernel_caches.py)."""
        return sum(1 for e in self.entries or () if ".set-aside-" in e)

    @property
    def caches(self) -> int:
        """Kernel cache directories in use (`<stack>-<shape>`): not set aside, not a file of deploy's, not the shared
        flashinfer cubins."""
        return sum(1 for e in self.entries or ()
                   if ".set-aside-" not in e and not e.startswith(".") and e != SHARED_CUBINS)

    def where(self) -> str:
        if self.filesystem is None:
            return "on a filesystem df could not read"
        return f"on {self.filesystem} ({self.fstype}, mounted at {self.mount})"

    def room(self) -> str:
        if self.free is None or self.size is None:
            return "free space unknown"
        return f"{human(self.free)} free of {human(self.size)}"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "exists": self.exists, "filesystem": self.filesystem, "fstype": self.fstype,
                "mount": self.mount, "size_bytes": self.size, "free_bytes": self.free, "bytes": self.used or 0}


def parse_usage(text: str) -> DiskUsage | None:
    """`usage_command`'s output → the value (None: no path line; a df line that does not parse leaves the
    filesystem unknown)."""
    path: str | None = None
    fs = fstype = mount = None
    size = free = used = None
    entries: list[str] | None = None
    for line in text.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "path":
            path = rest
        elif kind == "df":
            cols = rest.split()
            if len(cols) >= 7 and cols[2].isdigit() and cols[4].isdigit():
                fs, fstype, size, free, mount = cols[0], cols[1], int(cols[2]), int(cols[4]), " ".join(cols[6:])
        elif kind == "du":
            entries = entries if entries is not None else []
            used = int(rest.strip()) if rest.strip().isdigit() else None
        elif kind == "entry" and rest:
            entries = [*(entries or []), rest]
    if path is None:
        return None
    return DiskUsage(path, fs, fstype, mount, size, free, used, tuple(entries) if entries is not None else None)


def low_on_room(usage: DiskUsage) -> bool:
    return usage.free is None or usage.free < LOW_FREE_BYTES


def cache_finding(kernel: DiskUsage | None, pip: DiskUsage | None, *, configured: bool, vmid: int) -> Finding:
    """The `kernel-cache` row: the kernel cache directory (the inventory's container.kernel_cache or the default),
    its filesystem and free space, the kernel caches' and the pip cache's bytes; warn when a cache's filesystem has
    less than LOW_FREE_BYTES free (or could not be read)."""
    if kernel is None:
        return Finding("kernel-cache", "warn", "the kernel cache directory could not be read",
                       "check that the SSH user may run df and du on the PVE host")
    origin = "container.kernel_cache" if configured else f"the default, one per container (CT {vmid})"
    if kernel.exists:
        caches = (f"kernel caches {human(kernel.used or 0)} in {kernel.caches} dir(s), {kernel.set_aside} set aside "
                  f"(the newest {KEEP_SET_ASIDE} kept)")
    else:
        caches = "not there yet (`deploy up` creates it)"
    observed = f"{kernel.path} ({origin}) {kernel.where()}: {kernel.room()}; {caches}"
    if pip is None:
        observed += "; pip cache not read (the container is not running)"
    else:
        observed += (f"; pip cache {pip.path} {human(pip.used or 0) if pip.exists else 'empty'} "
                     f"(container {pip.where()}: {pip.room()})")
    kernel_low, pip_low = low_on_room(kernel), pip is not None and low_on_room(pip)
    if not kernel_low and not pip_low:
        return Finding("kernel-cache", "ok", observed)
    fixes = []
    if kernel_low:
        fixes.append(f"point container.kernel_cache at a directory on a storage with room (e.g. "
                     f"/tank/kernel-cache/{vmid}; `deploy up` creates and mounts it, a new directory starts cold) or "
                     f"free space on {kernel.mount or 'its filesystem'}"
                     + (f"; the {kernel.set_aside} set-aside cache(s) can be removed "
                        f"(rm -rf {kernel.path}/*.set-aside-*)" if kernel.set_aside else ""))
    if pip is not None and pip_low:
        fixes.append(f"grow the container's rootfs (container.rootfs_size_gb) or set the profile's "
                     f"stacks_disk_budget_gb, which empties the pip cache {pip.path} first and prunes old stacks "
                     "(docs/stacks.md#pruning-keep_stacks-and-a-disk-budget)")
    return Finding("kernel-cache", "warn", f"{observed}: under {human(LOW_FREE_BYTES)} free", "; ".join(fixes))
