"""What the real first start compiles with, looked up the way the real libraries look for it (container only).

Triton 3.6.0 (`runtime/build.py`, `_build`) compiles its CUDA driver module at the first kernel launch: the compiler
is $CC, else `gcc`, else `clang` on PATH, and the module includes `Python.h` from the interpreter's include dir.
Without them the real server dies there (tests/fixtures/sglang/fatal/no-c-compiler.log, no-python-headers.log):
the stand-in dies with the same lines at the same point (after the KV cache, before capture).
"""

from __future__ import annotations

import os
import shutil
import sysconfig
from pathlib import Path

from sglang._sim import env

#: Triton 3.6.0's `raise RuntimeError(...)` in `_build`, as Python prints it (the wheel's text).
NO_C_COMPILER = ("RuntimeError: Failed to find C compiler. Please specify via CC environment variable or set "
                 "triton.knobs.build.impl.")
#: The C file Triton compiles first (backends/nvidia/driver.c, written as cuda_utils.c into a temporary dir) and
#: the line/column of its `#include <Python.h>`.
DRIVER_C = "cuda_utils.c"


def _which(name: str) -> str | None:
    """`shutil.which` inside the container's root (env.ct_root(): "/" in a real container, a directory in tests), so
    the machine the stand-in runs on never lends the container its own compiler."""
    root = env.ct_root()
    if root == Path("/"):
        return shutil.which(name)
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d and os.access(root / d.lstrip("/") / name, os.X_OK):
            return str(Path(d) / name)
    return None


def c_compiler() -> str | None:
    """Triton's choice: $CC (taken as given), else gcc, else clang (None: it raises NO_C_COMPILER)."""
    return os.environ.get("CC") or _which("gcc") or _which("clang")


def python_include() -> Path:
    """The include dir Triton passes to the compiler (sysconfig's `include` of the running interpreter)."""
    scheme = sysconfig.get_default_scheme()
    return Path(sysconfig.get_paths(scheme="posix_prefix" if scheme == "posix_local" else scheme)["include"])


def missing_line(tmpdir: str) -> str | None:
    """The real failure line of the first kernel launch, or None when the toolchain is there."""
    if c_compiler() is None:
        return NO_C_COMPILER
    if not env.in_path(str(python_include() / "Python.h")).is_file():
        return f"{tmpdir}/{DRIVER_C}:7:10: fatal error: Python.h: No such file or directory\ncompilation terminated."
    return None
