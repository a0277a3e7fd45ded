"""Thin ctypes wrappers for unshare(2), setns(2), mount(2) and sethostname(2).

Python 3.11 has no os.unshare/os.setns, and running the `unshare`/`mount` binaries would cost a fork+exec per mount
on every simulated SSH command; doing it in-process keeps the session shell cheap. Only used as root.
"""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL("libc.so.6", use_errno=True)  # not find_library(): it forks ldconfig


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def setns(path: str, nstype: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), f"setns {path}")
    finally:
        os.close(fd)


def mount(source: str, target: str, fstype: str | None = None, flags: int = 0, data: str | None = None) -> None:
    _check(
        _libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {source} on {target}",
    )


def bind(source: str, target: str, recursive: bool = False) -> None:
    mount(source, target, None, MS_BIND | (MS_REC if recursive else 0))


def make_private(path: str = "/") -> None:
    """Stop mount events propagating back to the real host (the whole point of the private views)."""
    mount("none", path, None, MS_REC | MS_PRIVATE)


def tmpfs(target: str, mode: str = "0755") -> None:
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode}")


def sethostname(name: str) -> None:
    raw = name.encode()
    _check(_libc.sethostname(raw, ctypes.c_size_t(len(raw))), "sethostname")


def ensure_mountpoint(target: str, kind: str) -> None:
    """Create a missing mountpoint on the real filesystem (an empty dir or file; harmless outside the views)."""
    if os.path.lexists(target):
        return
    if kind == "dir":
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a"):
            pass
