"""The methods `dataclasses` writes for each class, compiled once and kept between runs, by their source text.

Why: a converged `deploy up` defines about 200 dataclasses while it imports. For each, the standard library writes
`__init__`, `__repr__`, `__eq__`, … as Python source text and compiles it with `exec()`: about 1,000 compiles, 0.1 s
of the run's 0.5 s of client CPU (tests/perf/client_cost.py). The same text compiled by the same interpreter is the
same code object, which is what `__pycache__` relies on for whole modules. So the compiled code is kept in one file
per interpreter (named by its bytecode magic number) under `<state dir>/cache/`, keyed by the exact source text, and
`exec()` runs the kept code object with the same globals and locals as it would have run the text: the class gets
the same methods, with the same defaults, annotations and closures (those come from the globals and locals, never
from the cache).

What is trusted, and why that is no new trust: the file holds code, like `__pycache__`, so it is read only when it
and its directory belong to this user and nobody else may write them (0600 in a 0700 directory, as written here).
Anything else (missing, foreign, damaged, another interpreter's) is ignored and the text is compiled as before; a
failed write only costs the next run the compiles. Only `dataclasses`' own `exec` is routed here.
"""

from __future__ import annotations

import marshal
import os
import stat
from types import CodeType
from typing import Any

#: Past this many entries (code of many deploy versions), a save keeps only what this run used.
MAX_ENTRIES = 6000

_cache: dict[str, CodeType] = {}
_used: set[str] = set()
_new = 0
_path = ""


def _cache_path() -> str:
    from importlib.util import MAGIC_NUMBER

    from orchestrator.local.paths import state_dir

    return os.path.join(str(state_dir()), "cache", f"dataclass-code-{MAGIC_NUMBER.hex()}.marshal")


def _owned_and_private(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _load(path: str) -> dict[str, CodeType]:
    from pathlib import Path

    from orchestrator.local.paths import state_dir_problem

    try:
        if state_dir_problem(Path(path).parent.parent) is not None:  # the state dir: nobody else may write there
            return {}
        if not _owned_and_private(os.stat(os.path.dirname(path))):
            return {}
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            if not _owned_and_private(os.fstat(f.fileno())):
                return {}
            data = marshal.loads(f.read())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, CodeType)}


def _exec(source: Any, globals: dict[str, Any] | None = None, locals: dict[str, Any] | None = None) -> None:
    """`exec` as dataclasses calls it, with the compile of a text seen before taken from the cache."""
    global _new
    if isinstance(source, str):
        _used.add(source)
        code = _cache.get(source)
        if code is None:
            code = _cache[source] = compile(source, "<string>", "exec")
            _new += 1
        source = code
    exec(source, globals, locals)


def install() -> None:
    """Route dataclasses' compiles through the cache. Call before the classes are defined (the CLI's first import)."""
    global _path
    import dataclasses

    if getattr(dataclasses, "exec", None) is _exec:
        return
    _path = _cache_path()
    _cache.update(_load(_path))
    dataclasses.exec = _exec  # type: ignore[attr-defined]  # a module global shadows the builtin for its calls


def save() -> None:
    """Write the cache when this run compiled something new (atomically, 0600 in a 0700 directory)."""
    global _new
    if not _new or not _path:
        return
    folder = os.path.dirname(_path)
    tmp = f"{_path}.{os.getpid()}.tmp"
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if not _owned_and_private(os.stat(folder)):
            return
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            kept = _cache if len(_cache) <= MAX_ENTRIES else {k: _cache[k] for k in _used if k in _cache}
            f.write(marshal.dumps(kept))
        os.replace(tmp, _path)
        _new = 0
    except (OSError, ValueError):
        try:
            os.unlink(tmp)
        except OSError:
            pass

