"""The toolchain a real sglang's first start compiles with (issue 48 item 2): the fact's program run here (this
machine's python3, with and without a CUDA_HOME), its JSON read back, and the finding naming what is missing."""

from __future__ import annotations

import json
import subprocess
import sys

from orchestrator.verdicts.toolchain import TOOLCHAIN_PROGRAM, Toolchain, parse_toolchain, toolchain_finding

NONE = Toolchain(None, None, None, "/usr/include/python3.11", None, None)


def test_the_program_reports_the_lookups_as_triton_and_flashinfer_make_them(tmp_path) -> None:
    cuda = tmp_path / "cu13"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_text("#!/bin/sh\n")
    out = subprocess.run([sys.executable, "-c", TOOLCHAIN_PROGRAM, str(cuda)], capture_output=True, text=True,
                         check=True, env={"PATH": "/nonexistent"})
    tool = parse_toolchain(out.stdout)
    assert tool is not None and tool.nvcc == str(cuda / "bin" / "nvcc") and tool.cuda_home == str(cuda)
    assert tool.cc is None and tool.cxx is None  # nothing on PATH, no CC
    assert tool.include == json.loads(out.stdout)["include"]
    gone = parse_toolchain(subprocess.run([sys.executable, "-c", TOOLCHAIN_PROGRAM, str(tmp_path / "none")],
                                          capture_output=True, text=True, check=True).stdout)
    assert gone is not None and gone.nvcc is None
    assert f"nvcc (CUDA_HOME {tmp_path / 'none'}: flashinfer's JIT)" in gone.missing()


def test_a_stock_container_is_warned_with_each_missing_piece_and_the_fix() -> None:
    found = toolchain_finding(NONE, 120)
    assert found is not None and found.status == "warn" and found.check == "ct-toolchain"
    assert found.observed.startswith("CT 120 lacks what a real sglang compiles with at its first start: a C compiler")
    assert "the Python headers (/usr/include/python3.11/Python.h" in found.observed
    assert "nvcc (CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda" in found.observed
    assert "apt-get install gcc g++ python3-dev" in found.fix and "CUDA_HOME" in found.fix
    full = Toolchain("/usr/bin/gcc", "/usr/bin/c++", "/usr/include/python3.11/Python.h", "/usr/include/python3.11",
                     "/usr/local/cuda/bin/nvcc", None)
    ok = toolchain_finding(full, 120)
    assert ok is not None and ok.status == "ok" and toolchain_finding(None, 120) is None
    assert parse_toolchain("not json") is None


def test_a_stacks_own_nvcc_is_found_where_flashinfer_never_looks_and_counts_for_the_server_of_that_stack(
        tmp_path) -> None:
    """sglang 0.5.23 pulls nvidia-cuda-nvcc into site-packages/nvidia/cu13/bin: the fact looks in the stacks' venvs
    (argv[2:], globs) and keys what each carries by its venv. The server's unit sets CUDA_HOME to its stack's
    (render/service.py), so nvcc is missing only where the server's stack carries none and nothing else gives one;
    a profile's own CUDA_HOME wins and is judged instead."""
    venv = tmp_path / "stacks" / "abc"
    nvcc = venv / "lib" / "python3.11" / "site-packages" / "nvidia" / "cu13" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    (tmp_path / "stacks" / "abc.json").write_text("{}\n")  # a record beside its venv matches the glob too
    out = subprocess.run([sys.executable, "-c", TOOLCHAIN_PROGRAM, "", str(tmp_path / "ml-env"),
                          str(tmp_path / "stacks") + "/*"], capture_output=True, text=True, check=True,
                         env={"PATH": "/nonexistent"})
    tool = parse_toolchain(out.stdout)
    home = str(nvcc.parent.parent)
    assert tool is not None and tool.stack_homes == {str(venv): home}
    assert tool.home_of(str(venv) + "/") == home and tool.home_of(str(tmp_path / "ml-env")) is None
    lacking = Toolchain("/usr/bin/gcc", "/usr/bin/c++", "/usr/include/python3.11/Python.h",
                        "/usr/include/python3.11", None, None, tool.stack_homes)
    found = toolchain_finding(lacking, 120, tool.home_of(str(venv)))
    assert found is not None and found.status == "ok", found
    assert f"{home}/bin/nvcc, the stack's own: the unit sets CUDA_HOME to it" in found.observed
    other = toolchain_finding(lacking, 120, tool.home_of(str(tmp_path / "ml-env")))  # the server runs another stack
    assert other is not None and other.status == "warn" and "nvcc (CUDA_HOME, CUDA_PATH, PATH" in other.observed
    assert "deploy sets the unit's CUDA_HOME to it" in other.fix
    own = Toolchain("/usr/bin/gcc", "/usr/bin/c++", "/usr/include/python3.11/Python.h", "/usr/include/python3.11",
                    None, "/opt/cuda-13.0", tool.stack_homes)
    assert own.missing(home) == ["nvcc (CUDA_HOME /opt/cuda-13.0: flashinfer's JIT)"]  # the profile's wins
    bare = parse_toolchain(subprocess.run([sys.executable, "-c", TOOLCHAIN_PROGRAM, "", str(tmp_path / "ml-env")],
                                          capture_output=True, text=True, check=True).stdout)
    assert bare is not None and bare.stack_homes == {}


def test_each_missing_piece_has_its_own_fix() -> None:
    lacks = NONE.lacks()
    assert [lack.what.split(" (")[0] for lack in lacks] == ["a C compiler", "a C++ compiler", "the Python headers",
                                                            "nvcc"]
    assert [lack.fix.split("`")[1] for lack in lacks[:3]] == ["apt-get install gcc", "apt-get install g++",
                                                              "apt-get install python3-dev"]
    assert "nvidia-cuda-nvcc" in lacks[3].fix and "/usr/local/cuda" in lacks[3].fix
    assert lacks[0].describe().startswith("a C compiler (CC, gcc or clang: Triton's first kernel launch): `apt-get")
