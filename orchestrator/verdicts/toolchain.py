"""The toolchain a real sglang's first start compiles with, in the container: read by one fact, judged here.

Triton builds a C module that includes `Python.h` at its first kernel launch (CC, else gcc, else clang; triton 3.6.0
runtime/build.py), and flashinfer JIT-builds its SM120 MoE and FP4 modules with nvcc (found at CUDA_HOME, CUDA_PATH,
`which nvcc`, else /usr/local/cuda; flashinfer 0.6.11.post1 jit/cpp_ext.py) and c++. A stock container has none of
them; without them the server dies at its first start (the no-c-compiler, no-python-headers and no-nvcc fatal
verdicts). `doctor` shows what is missing before a start, and `plan`/`up` record it in sglang_install's details.

Pure: the fact's JSON line in, a typed value and a finding out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from orchestrator.verdicts.host import Finding

#: Run with the container's python3, argv[1] the profile's CUDA_HOME ("" without), argv[2:] the venvs (globs) of
#: the stacks: what Triton and flashinfer look for, the way they look for it, and the nvcc a stack carries where
#: none of flashinfer's lookups finds it (sglang 0.5.23's nvidia-cuda-nvcc: site-packages/nvidia/cu13/bin).
TOOLCHAIN_PROGRAM = """\
import glob, json, os, shutil, sys, sysconfig
scheme = sysconfig.get_default_scheme() if hasattr(sysconfig, "get_default_scheme") else "posix_prefix"
scheme = "posix_prefix" if scheme == "posix_local" else scheme
include = sysconfig.get_paths(scheme=scheme)["include"]
cuda = (sys.argv[1] if len(sys.argv) > 1 else "") or os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
nvcc = os.path.join(cuda, "bin", "nvcc") if cuda else (shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
print(json.dumps({"cc": os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang"),
                  "cxx": shutil.which("c++") or shutil.which("g++") or shutil.which("clang++"),
                  "python_h": os.path.join(include, "Python.h") if os.path.exists(os.path.join(include, "Python.h"))
                  else None, "include": include, "nvcc": nvcc if os.path.exists(nvcc) else None,
                  "cuda_home": cuda or None, "stack_cuda_home": next((os.path.dirname(os.path.dirname(n))
                  for d in sys.argv[2:] for n in sorted(glob.glob(d + "/lib/python3*/site-packages/nvidia/cu*/bin/"
                  "nvcc"))), None)}))
"""


@dataclass(frozen=True)
class Toolchain:
    cc: str | None
    cxx: str | None
    python_h: str | None
    include: str
    nvcc: str | None
    cuda_home: str | None
    stack_cuda_home: str | None = None  # a stack's own CUDA (its nvidia-cuda-nvcc), which flashinfer never finds

    def missing(self) -> list[str]:
        out = []
        if self.cc is None:
            out.append("a C compiler (CC, gcc or clang: Triton's first kernel launch)")
        if self.cxx is None:
            out.append("a C++ compiler (c++: flashinfer's JIT)")
        if self.python_h is None:
            out.append(f"the Python headers ({self.include}/Python.h: Triton's module includes it)")
        if self.nvcc is None:
            where = f"CUDA_HOME {self.cuda_home}" if self.cuda_home else "CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda"
            carried = (f"; the stack carries one: set CUDA_HOME={self.stack_cuda_home} in the profile's env:"
                       if self.stack_cuda_home else "")
            out.append(f"nvcc ({where}: flashinfer's JIT{carried})")
        return out


def parse_toolchain(text: str) -> Toolchain | None:
    try:
        data = json.loads(text.strip().splitlines()[-1]) if text.strip() else None
    except (ValueError, IndexError):
        return None
    if not isinstance(data, dict):
        return None

    def opt(key: str) -> str | None:
        return str(data[key]) if data.get(key) else None

    return Toolchain(opt("cc"), opt("cxx"), opt("python_h"), str(data.get("include") or "?"), opt("nvcc"),
                     opt("cuda_home"), opt("stack_cuda_home"))


TOOLCHAIN_FIX = ("in the container: `apt-get install gcc g++ python3-dev`; for nvcc set CUDA_HOME in the profile's "
                 "env: to a toolkit of the stack's CUDA (sglang 0.5.23: the stack's own site-packages/nvidia/cu13) or "
                 "install that CUDA toolkit at /usr/local/cuda (docs/troubleshooting.md"
                 "#the-server-cannot-compile-at-its-first-start)")


def toolchain_finding(tool: Toolchain | None, vmid: int) -> Finding | None:
    """A warning naming what the container lacks (None: not read, the container is not running)."""
    if tool is None:
        return None
    missing = tool.missing()
    if not missing:
        return Finding("ct-toolchain", "ok", f"CT {vmid} has a C and C++ compiler, the Python headers and nvcc "
                                             f"({tool.nvcc})")
    return Finding("ct-toolchain", "warn", f"CT {vmid} lacks what a real sglang compiles with at its first start: "
                   + "; ".join(missing), TOOLCHAIN_FIX)
