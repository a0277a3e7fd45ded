"""Data derived from a bundled file (the PVE API schema, an `nvidia-smi -q` capture), kept in __pycache__.

The stand-ins run as a new process per simulated command, so whatever they parse from a large bundled file is
parsed again every time: ~60 ms of JSON for each `pct`/`pvesh`, ~25 ms of `-q` text for each `nvidia-smi`. Like
Python's own .pyc files, the parsed form is marshalled next to its source once, keyed by the source's size and
mtime (and the interpreter version: marshal's format), and each later process only loads it.
Imports only builtin modules and `os`: the container's `nvidia-smi` imports it on every run.
"""

from __future__ import annotations

import marshal
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def cached(source: str | os.PathLike[str], build: Callable[[], Any]) -> Any:
    """`build()` (marshallable: dicts, lists, str, bytes, numbers), from the cache file of `source` when current."""
    src = os.fspath(source)
    st = os.stat(src)
    folder, name = os.path.split(src)
    cache_dir = os.path.join(folder, "__pycache__")
    path = os.path.join(cache_dir, f"{name}.{st.st_size}-{st.st_mtime_ns}.py{sys.version_info[0]}"
                                   f"{sys.version_info[1]}.marshal")
    try:
        with open(path, "rb") as f:
            return marshal.loads(f.read())
    except (OSError, ValueError, EOFError, TypeError):
        pass
    data = build()
    try:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(marshal.dumps(data))
        os.replace(tmp, path)  # atomic: concurrent sessions may build it at the same time
    except OSError:
        pass  # a read-only checkout: parse each time
    return data
