"""Data derived from a bundled file (the PVE API schema, an `nvidia-smi -q` capture), kept in __pycache__.

The stand-ins run as a new process per simulated command, so whatever they parse from a large bundled file is
parsed again every time: ~60 ms of JSON for each `pct`/`pvesh`, ~25 ms of `-q` text for each `nvidia-smi`. Like
Python's own .pyc files, the parsed form is marshalled next to its source once, keyed by the source's size and
mtime (and the interpreter version: marshal's format), and each later process only loads it.
"""

from __future__ import annotations

import marshal
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cached(source: Path, build: Callable[[], Any]) -> Any:
    """`build()` (marshallable: dicts, lists, str, bytes, numbers), from the cache file of `source` when current."""
    st = source.stat()
    path = (source.parent / "__pycache__" /
            f"{source.name}.{st.st_size}-{st.st_mtime_ns}.py{sys.version_info[0]}{sys.version_info[1]}.marshal")
    try:
        return marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        pass
    data = build()
    try:
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(marshal.dumps(data))
        os.replace(tmp, path)  # atomic: concurrent sessions may build it at the same time
    except OSError:
        pass  # a read-only checkout: parse each time
    return data
