"""A stand-in package's real installed size, as `du -sb` sees it (shipped in each stand-in wheel, see real_sizes.py).

Why: the disk budget (`stacks_disk_budget_gb`) decides by `du -sb` of a stack's venv, and a stand-in package is a
few KB where the real one is GBs. A wheel cannot carry a sparse file (pip writes every byte of a member), so each
stand-in wheel carries its distribution's real bytes (`<package>/_standin_size`), an empty `<package>/_standin_ballast`
(listed in its RECORD, so `pip uninstall` removes it) and this module under its own name
(`_deploy_standin_<package>.py`), which a `.pth` line imports at every Python start in the venv: it extends the
ballast to that size as a hole (`truncate`), so the apparent size is real and no block is written (a tmpfs holds
a 10 GB hole in no memory). Stdlib only, no output, never an error: a read-only venv keeps its stand-in size.
"""

from __future__ import annotations

import os

PREFIX = "_deploy_standin_"
SIZE_FILE = "_standin_size"
BALLAST_FILE = "_standin_ballast"


def materialise(package_dir: str) -> int | None:
    """Extend `package_dir`'s ballast to its declared size (a hole); the size, or None where none was declared or
    the venv cannot be written."""
    try:
        with open(os.path.join(package_dir, SIZE_FILE), encoding="ascii") as fh:
            size = int(fh.read().split()[0])
        ballast = os.path.join(package_dir, BALLAST_FILE)
        if os.stat(ballast).st_size != size:
            os.truncate(ballast, size)
        return size
    except (OSError, ValueError, IndexError):
        return None


if __name__.startswith(PREFIX):  # imported by its .pth line: this wheel's own package
    materialise(os.path.join(os.path.dirname(os.path.abspath(__file__)), __name__[len(PREFIX):]))
