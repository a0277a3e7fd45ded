"""The stand-in wheels: valid files pip accepts, one flag schema each, their version in their metadata and code."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from simulator.software.wheels import SGLANG_VERSIONS, build_standin_wheels, sglang_spec

from .standins import clean_env


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    return {p.name: p for p in build_standin_wheels(out)}


def _metadata(whl: Path) -> str:
    with zipfile.ZipFile(whl) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return zf.read(name).decode()


def test_record_lists_every_file_with_its_hash(wheels: dict[str, Path]) -> None:
    assert sorted(wheels) == [  # the real names and versions the releases pin (issue 48 item 5)
        "flashinfer_cubin-0.6.11.post1-py3-none-any.whl",
        "flashinfer_python-0.6.11.post1-py3-none-any.whl", "flashinfer_python-0.7.2-py3-none-any.whl",
        "kernels-0.14.1-py3-none-any.whl",
        "sglang-0.5.12.post1-py3-none-any.whl", "sglang-0.5.23-py3-none-any.whl",
        "sglang_kernel-0.4.10-py3-none-any.whl", "sglang_kernel-0.4.2.post2-py3-none-any.whl",
        "torch-2.11.0-py3-none-any.whl", "torch-2.14.1-py3-none-any.whl"]
    for whl in wheels.values():
        with zipfile.ZipFile(whl) as zf:
            names = zf.namelist()
            record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
            rows = [line.split(",") for line in zf.read(record_name).decode().splitlines()]
            assert sorted(r[0] for r in rows) == sorted(names)
            for path, digest, size in rows:
                if path == record_name:
                    assert digest == size == ""
                    continue
                data = zf.read(path)
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                assert digest == f"sha256={want}" and int(size) == len(data), path


def test_each_sglang_wheel_carries_its_own_schema_and_metadata(wheels: dict[str, Path]) -> None:
    for version in SGLANG_VERSIONS:
        whl = wheels[f"sglang-{version}-py3-none-any.whl"]
        with zipfile.ZipFile(whl) as zf:
            names = zf.namelist()
        schemas = [n for n in names if n.startswith("sglang/_sim/schemas/")]
        assert schemas == [f"sglang/_sim/schemas/sglang-{version}.json"]
        assert "sglang/_sim/ctside.py" in names
        meta = _metadata(whl)
        assert f"\nVersion: {version}\n" in meta
        for req in ("aiohttp", "pyyaml"):
            assert f"Requires-Dist: {req}\n" in meta
        # the huggingface_hub range the real release's transformers pin implies (issue 36 item 7), not any hub
        hub = {"0.5.12.post1": "huggingface_hub>=1.5.0,<2.0", "0.5.23": "huggingface_hub>=1.31.0,<3.0"}[version]
        assert [line for line in meta.splitlines() if "huggingface" in line] == [f"Requires-Dist: {hub}"]
        assert "Provides-Extra: tracing\n" in meta and "Provides-Extra: srt\n" not in meta  # the real extras
        # torch and the kernel libraries pinned exactly, as the real release pins them
        pins = {"0.5.12.post1": ("flashinfer_python==0.6.11.post1", "flashinfer_cubin==0.6.11.post1",
                                 "sglang-kernel==0.4.2.post2", "torch==2.11.0"),
                "0.5.23": ("flashinfer_python[cu13]==0.7.2", "sglang-kernel==0.4.10", "torch==2.14.1")}[version]
        for pin in pins:
            assert f"Requires-Dist: {pin}\n" in meta, pin
        with zipfile.ZipFile(whl) as zf:
            ep = zf.read(f"sglang-{version}.dist-info/entry_points.txt").decode()
        assert "sglang = sglang.cli:main" in ep


def test_builds_are_byte_identical(wheels: dict[str, Path], tmp_path: Path) -> None:
    again = {p.name: p for p in build_standin_wheels(tmp_path)}
    assert {n: p.read_bytes() for n, p in again.items()} == {n: p.read_bytes() for n, p in wheels.items()}


def test_kernel_libraries_carry_their_version_in_code(wheels: dict[str, Path]) -> None:
    for name, package in (("flashinfer_python-0.7.2", "flashinfer"), ("sglang_kernel-0.4.10", "sgl_kernel"),
                          ("flashinfer_cubin-0.6.11.post1", "flashinfer_cubin")):
        with zipfile.ZipFile(wheels[f"{name}-py3-none-any.whl"]) as zf:
            init = zf.read(f"{package}/__init__.py").decode()
            assert f"__version__ = '{name.split('-')[1]}'" in init
            assert not any(n.endswith("_sim_regression.py") for n in zf.namelist())  # a good build


def test_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError, match=r"no flag schema for sglang 0\.4\.0"):
        sglang_spec("0.4.0")


@pytest.mark.parametrize("version", SGLANG_VERSIONS)
def test_installed_wheel_reports_the_version_of_its_metadata(wheels: dict[str, Path], tmp_path: Path,
                                                             version: str) -> None:
    target = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                          "--target", str(target), str(wheels[f"sglang-{version}-py3-none-any.whl"])],
                         env=clean_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    code = ("import sglang, sglang.version; from sglang._sim import env, flags; "
            "print(sglang.__version__, sglang.version.__version__, env.SCHEMAS.is_relative_to(env.WHEEL_SCHEMAS), "
            "any('--cuda-graph-max-bs-decode' in a['option_strings'] for a in flags.load_schema(sglang.__version__)))")
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(PYTHONPATH=str(target)), cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [version, version, "True", str(version == "0.5.23")]


def test_installed_wheel_imports_cheaply(wheels: dict[str, Path], tmp_path: Path) -> None:
    """The version is a constant in the wheel, so `import sglang` (every server, bench and flag probe) reads no
    metadata; yaml waits for a --config file and nothing imports aiohttp (the wheel still depends on it)."""
    target = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                          "--target", str(target), str(wheels["sglang-0.5.23-py3-none-any.whl"])],
                         env=clean_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (target / "sglang" / "_sim" / "wheel_version.py").read_text().endswith("VERSION = '0.5.23'\n")
    heavy = ("importlib.metadata", "email", "yaml", "aiohttp")
    code = ("import sys, sglang, sglang.srt.server_args, sglang._sim.server, sglang._sim.bench; "
            f"print(sglang.__version__, [m for m in {heavy!r} if m in sys.modules])")
    # -S: no site hooks of the test venv's own packages; the wheel's tree comes first on PYTHONPATH
    out = subprocess.run([sys.executable, "-S", "-c", code], env=clean_env(PYTHONPATH=str(target)), cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(maxsplit=1) == ["0.5.23", "[]\n"]
