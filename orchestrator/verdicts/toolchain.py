"""The toolchain a real sglang's first start compiles with, in the container: read by one fact, judged here.

Triton builds a C module that includes `Python.h` at its first kernel launch (CC, else gcc, else clang; triton 3.6.0
runtime/build.py), and flashinfer JIT-builds its SM120 MoE and FP4 modules with nvcc and c++. flashinfer finds nvcc
through `get_cuda_path()` (flashinfer/jit/cpp_ext.py:47-64 of both flashinfer_python 0.6.11.post1 and 0.7.2, the
same lines): `CUDA_HOME`, else `CUDA_PATH`, else `which nvcc`, else /usr/local/cuda, and runs `$cuda_home/bin/nvcc`
(line 289 of 0.7.2). sglang 0.5.23 pulls nvidia-cuda-nvcc into `site-packages/nvidia/cu13/bin`, on none of those
paths: so the server's unit sets CUDA_HOME to the CUDA its stack carries (render/service.py), found by this fact or
read after the stack's build, and PATH stays as it is. A stock container has no compiler; without them the server
dies at its first start (the no-c-compiler, no-python-headers and no-nvcc fatal verdicts). `doctor` shows what is
missing before a start, `plan`/`up` in sglang_install's line (each piece with its fix) and its details.

Pure: the fact's JSON line in, a typed value and a finding out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from orchestrator.verdicts.host import Finding

#: Run with the container's python3, argv[1] the profile's CUDA_HOME ("" without), argv[2:] the venvs (globs) of
#: the stacks: what Triton and flashinfer look for, the way they look for it, and the nvcc each venv carries where
#: none of flashinfer's lookups finds it (sglang 0.5.23's nvidia-cuda-nvcc: site-packages/nvidia/cu13/bin), by venv.
TOOLCHAIN_PROGRAM = """\
import glob, json, os, shutil, sys, sysconfig
scheme = sysconfig.get_default_scheme() if hasattr(sysconfig, "get_default_scheme") else "posix_prefix"
scheme = "posix_prefix" if scheme == "posix_local" else scheme
include = sysconfig.get_paths(scheme=scheme)["include"]
cuda = (sys.argv[1] if len(sys.argv) > 1 else "") or os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
nvcc = os.path.join(cuda, "bin", "nvcc") if cuda else (shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
homes = {}
for d in sys.argv[2:]:
    for n in sorted(glob.glob(d + "/lib/python3*/site-packages/nvidia/cu*/bin/nvcc")):
        homes.setdefault(n.rsplit("/lib/python3", 1)[0], os.path.dirname(os.path.dirname(n)))
print(json.dumps({"cc": os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang"),
                  "cxx": shutil.which("c++") or shutil.which("g++") or shutil.which("clang++"),
                  "python_h": os.path.join(include, "Python.h") if os.path.exists(os.path.join(include, "Python.h"))
                  else None, "include": include, "nvcc": nvcc if os.path.exists(nvcc) else None,
                  "cuda_home": cuda or None, "stack_homes": homes}))
"""


@dataclass(frozen=True)
class Lack:
    """One piece the first start compiles with that the container lacks, and what gives it."""

    what: str
    fix: str

    def describe(self) -> str:
        return f"{self.what}: {self.fix}"


#: The fix of each piece (docs/troubleshooting.md#the-server-cannot-compile-at-its-first-start).
CC_FIX = "`apt-get install gcc` in the container (`deploy up`'s ct_packages installs it), or CC in the profile's env:"
CXX_FIX = "`apt-get install g++` in the container (`deploy up`'s ct_packages installs it)"
HEADERS_FIX = "`apt-get install python3-dev` in the container (`deploy up`'s ct_packages installs it)"
NVCC_FIX = ("a stack that carries nvidia-cuda-nvcc (sglang 0.5.23 does: deploy sets the unit's CUDA_HOME to it), or "
            "the CUDA toolkit of the stack's CUDA at /usr/local/cuda, or CUDA_HOME in the profile's env: naming one")


@dataclass(frozen=True)
class Toolchain:
    cc: str | None
    cxx: str | None
    python_h: str | None
    include: str
    nvcc: str | None
    cuda_home: str | None
    #: venv → the CUDA it carries (the directory holding bin/nvcc: its nvidia-cuda-nvcc), which flashinfer never
    #: finds by itself: the server's unit sets CUDA_HOME to its stack's (render/service.py).
    stack_homes: dict[str, str] = field(default_factory=dict)

    def home_of(self, venv: str | None) -> str | None:
        """The CUDA the venv `venv` carries (None: none, or not looked at)."""
        return self.stack_homes.get(venv.rstrip("/")) if venv else None

    def lacks(self, stack_home: str | None = None) -> list[Lack]:
        """What the server's first start would not find. `stack_home`: the CUDA its stack carries, which the unit
        sets as CUDA_HOME unless the profile's env: sets one (then that one is judged, as flashinfer reads it)."""
        out = []
        if self.cc is None:
            out.append(Lack("a C compiler (CC, gcc or clang: Triton's first kernel launch)", CC_FIX))
        if self.cxx is None:
            out.append(Lack("a C++ compiler (c++: flashinfer's JIT)", CXX_FIX))
        if self.python_h is None:
            out.append(Lack(f"the Python headers ({self.include}/Python.h: Triton's module includes it)",
                            HEADERS_FIX))
        if self.nvcc is None and (self.cuda_home or not stack_home):
            where = (f"CUDA_HOME {self.cuda_home}" if self.cuda_home
                     else "CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda, the server's stack")
            out.append(Lack(f"nvcc ({where}: flashinfer's JIT)", NVCC_FIX))
        return out

    def missing(self, stack_home: str | None = None) -> list[str]:
        return [lack.what for lack in self.lacks(stack_home)]


def parse_toolchain(text: str) -> Toolchain | None:
    try:
        data = json.loads(text.strip().splitlines()[-1]) if text.strip() else None
    except (ValueError, IndexError):
        return None
    if not isinstance(data, dict):
        return None

    def opt(key: str) -> str | None:
        return str(data[key]) if data.get(key) else None

    homes = data.get("stack_homes")
    return Toolchain(opt("cc"), opt("cxx"), opt("python_h"), str(data.get("include") or "?"), opt("nvcc"),
                     opt("cuda_home"),
                     {str(k): str(v) for k, v in homes.items() if v} if isinstance(homes, dict) else {})


TOOLCHAIN_FIX = ("in the container: `apt-get install gcc g++ python3-dev`; for nvcc a stack that carries "
                 "nvidia-cuda-nvcc (sglang 0.5.23: deploy sets the unit's CUDA_HOME to it), or CUDA_HOME in the "
                 "profile's env: naming a toolkit of the stack's CUDA, or that CUDA toolkit at /usr/local/cuda "
                 "(docs/troubleshooting.md#the-server-cannot-compile-at-its-first-start)")


def toolchain_finding(tool: Toolchain | None, vmid: int, stack_home: str | None = None) -> Finding | None:
    """A warning naming what the container lacks (None: not read, the container is not running). `stack_home`:
    the CUDA the server's stack carries (its unit sets CUDA_HOME to it)."""
    if tool is None:
        return None
    missing = tool.missing(stack_home)
    if not missing:
        nvcc = (tool.nvcc if tool.cuda_home or not stack_home
                else f"{stack_home}/bin/nvcc, the stack's own: the unit sets CUDA_HOME to it")
        return Finding("ct-toolchain", "ok", f"CT {vmid} has a C and C++ compiler, the Python headers and nvcc "
                                             f"({nvcc})")
    return Finding("ct-toolchain", "warn", f"CT {vmid} lacks what a real sglang compiles with at its first start: "
                   + "; ".join(missing), TOOLCHAIN_FIX)
