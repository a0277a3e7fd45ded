"""The real stacks' wheelhouse (simulator/software/realhouse.py) and the host index's /real/simple beside the
stand-in index: what a fill resolves, what it downloads again after a cut, and what the container's pip is served.
The fill itself downloads GBs; tests/perf/real_stack_roll.py runs it. Here the report and the files are small."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from simulator.software import realhouse
from simulator.software.index import REAL_PREFIX, IndexHTTPServer

#: A pip 25 `--report` item as pip writes it for a wheel from an index (format 1).
ITEM = {"metadata": {"name": "torch", "version": "2.11.0"},
        "download_info": {"url": "https://files.example/packages/torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                          "archive_info": {"hash": "sha256=" + "a" * 64, "hashes": {"sha256": "a" * 64}}}}
#: pip 23.0's report has `hash` only; a file:// link from this machine's own find-links.
OLD = {"metadata": {"name": "build", "version": "1.6.1"},
       "download_info": {"url": "file:///opt/pypi/files/build-1.6.1-py3-none-any.whl",
                         "archive_info": {"hash": "sha256=" + "b" * 64}}}


@contextmanager
def serving(wheelhouse: Path, published: Path | None, real: Path | None) -> Iterator[IndexHTTPServer]:
    """A host index on a free loopback port for the block, shut down after it."""
    server = IndexHTTPServer(("127.0.0.1", 0), wheelhouse, published, real)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_report_gives_each_file_with_its_hash() -> None:
    files = realhouse.parse_report({"version": "1", "install": [ITEM, OLD]})
    assert [(p.name, p.version, p.filename, p.sha256[:1]) for p in files] == [
        ("build", "1.6.1", "build-1.6.1-py3-none-any.whl", "b"),
        ("torch", "2.11.0", "torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl", "a")]
    assert files[1].line == f"torch==2.11.0 --hash=sha256:{'a' * 64}"


def test_a_cut_download_fetches_only_what_is_missing_or_wrong(tmp_path: Path) -> None:
    whole, partial = b"whole wheel", b"whole wh"
    files = [realhouse.Pinned(n, "1", f"{n}-1-py3-none-any.whl", hashlib.sha256(whole).hexdigest(), "")
             for n in ("a", "b", "c")]
    (tmp_path / files[0].filename).write_bytes(whole)
    (tmp_path / files[1].filename).write_bytes(partial)  # what a cut left (never, by the rename; still checked)
    assert [p.name for p in realhouse.missing(files, tmp_path)] == ["b", "c"]


def test_big_distributions_download_alone() -> None:
    names = ["torch", "nvidia-cublas", "aiohttp", "flashinfer-python", *(f"small{i}" for i in range(25))]
    out = realhouse.batches([realhouse.Pinned(n, "1", f"{n}.whl", "", "") for n in names])
    assert [[p.name for p in b] for b in out[:3]] == [["torch"], ["nvidia-cublas"], ["flashinfer-python"]]
    assert [len(b) for b in out[3:]] == [realhouse.BATCH, 26 - realhouse.BATCH]


def test_the_host_index_serves_the_real_wheels_apart_from_the_standins(tmp_path: Path) -> None:
    standin, real = tmp_path / "standin", tmp_path / "real"
    standin.mkdir()
    real.mkdir()
    (standin / "sglang-0.5.12.post1-py3-none-any.whl").write_bytes(b"stand-in")
    body = b"real" * 100_000
    (real / "sglang-0.5.12.post1-cp311-cp311-manylinux_2_34_x86_64.whl").write_bytes(body)
    with serving(standin, None, real) as server:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        plain = requests.get(f"{base}/simple/sglang/", timeout=10).text
        assert "py3-none-any" in plain and "cp311" not in plain
        page = requests.get(f"{base}{REAL_PREFIX}/simple/SGLang", timeout=10)  # the 301 keeps the prefix
        links = re.findall(r'href="([^"]+)"', page.text)
        assert len(links) == 1 and links[0].startswith(f"{REAL_PREFIX}/files/sglang-0.5.12.post1-cp311")
        got = requests.get(base + links[0].split("#")[0], timeout=10)
        assert got.content == body and links[0].endswith(hashlib.sha256(body).hexdigest())
        assert "immutable" in got.headers["Cache-Control"]  # pip caches it, as from a public registry
        assert f'href="{REAL_PREFIX}/simple/sglang/"' in requests.get(f"{base}{REAL_PREFIX}/simple/", timeout=10).text


def test_without_a_real_wheelhouse_the_real_index_is_empty(tmp_path: Path) -> None:
    with serving(tmp_path, None, None) as server:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert requests.get(f"{base}{REAL_PREFIX}/simple/torch/", timeout=10).status_code == 404


def test_a_warm_fill_reads_its_closure_and_resolves_nothing(tmp_path: Path) -> None:
    pinned = realhouse.Pinned("a", "1", "a-1-py3-none-any.whl", "c" * 64, "https://files.example/a-1-py3-none-any.whl")
    want = {"release": "0.5.12.post1", "python": "3.11", "constraints": ["kernels<0.15"]}
    path = tmp_path / "closure.json"
    path.write_text(json.dumps({**want, "files": [dataclasses.asdict(pinned)]}))
    assert realhouse.read_manifest(path, want) == [pinned]
    assert realhouse.read_manifest(path, {**want, "constraints": []}) is None  # other constraints: resolve again
    assert realhouse.read_manifest(tmp_path / "none.json", want) is None


#: pip's refusal of `sglang==0.5.23` for Python 3.13 with `--only-binary=:all:` (this machine, 2026-12-07): outlines
#: 0.1.11 pins outlines_core==0.1.26, of which the index has no cp313 wheel.
NO_CP313 = ("ERROR: Could not find a version that satisfies the requirement outlines_core==0.1.26 (from outlines) "
            "(from versions: 0.1.17, 0.2.9, 0.2.10, 0.2.11, 0.2.13, 0.2.14)\n"
            "ERROR: No matching distribution found for outlines_core==0.1.26\n")


def test_a_pin_without_a_wheel_for_the_python_is_named_and_its_archive_downloads_alone() -> None:
    assert realhouse.no_match(NO_CP313) == "No matching distribution found for outlines_core==0.1.26"
    sdist = realhouse.Pinned("outlines_core", "0.1.26", "outlines_core-0.1.26.tar.gz", "d" * 64, "")
    small = [realhouse.Pinned(f"s{i}", "1", f"s{i}-1-py3-none-any.whl", "", "") for i in range(3)]
    assert realhouse.is_source(sdist) and not realhouse.is_source(small[0])
    assert realhouse.batches([*small, sdist]) == [[sdist], small]


def test_a_source_archives_build_requirements_are_read_from_its_pyproject(tmp_path: Path) -> None:
    sdist = tmp_path / "outlines_core-0.1.26.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        for name, text in (("outlines_core-0.1.26/pyproject.toml",  # outlines_core 0.1.26's own build-system table
                            '[build-system]\nrequires = ["setuptools>=45", "setuptools_scm[toml]>=6.2", '
                            '"setuptools-rust"]\nbuild-backend = "setuptools.build_meta"\n'),
                           ("outlines_core-0.1.26/benchmarks/pyproject.toml", "[build-system]\nrequires = []\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert realhouse.build_requires(sdist) == ["setuptools>=45", "setuptools_scm[toml]>=6.2", "setuptools-rust"]


def test_the_real_index_serves_a_source_archive_beside_the_wheels(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    body = b"sdist" * 1000
    (real / "outlines_core-0.1.26.tar.gz").write_bytes(body)
    with serving(tmp_path, None, real) as server:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        page = requests.get(f"{base}{REAL_PREFIX}/simple/outlines-core/", timeout=10)
        links = re.findall(r'href="([^"]+)"', page.text)
        assert links == [f"{REAL_PREFIX}/files/outlines_core-0.1.26.tar.gz#sha256={hashlib.sha256(body).hexdigest()}"]
        assert requests.get(base + links[0].split("#")[0], timeout=10).content == body


def test_a_warm_fill_downloads_no_build_requirements_it_kept(tmp_path: Path) -> None:
    sdist = tmp_path / "outlines_core-0.1.26.tar.gz"
    sdist.write_bytes(b"")  # never opened: the record answers
    (tmp_path / "setuptools-84.2.1-py3-none-any.whl").write_bytes(b"w")
    (tmp_path / "outlines_core-0.1.26.tar.gz.build-requires").write_text("setuptools-84.2.1-py3-none-any.whl\n")
    assert realhouse.build_requirements_into("3.13", sdist, tmp_path) == ["setuptools-84.2.1-py3-none-any.whl"]
    (tmp_path / "setuptools-84.2.1-py3-none-any.whl").unlink()  # one gone: downloaded again (here: no pyproject)
    with pytest.raises(tarfile.ReadError):
        realhouse.build_requirements_into("3.13", sdist, tmp_path)


def _wheel(path: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal valid wheel (METADATA, WHEEL, RECORD, one module)."""
    import zipfile

    dist = f"{name}-{version}"
    wheel = path / f"{dist}-py3-none-any.whl"
    meta = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                    *(f"Requires-Dist: {r}\n" for r in requires)])
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{name}/__init__.py", "")
        zf.writestr(f"{dist}.dist-info/METADATA", meta)
        zf.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                               "Tag: py3-none-any\n")
        zf.writestr(f"{dist}.dist-info/RECORD", "")
    return wheel


def test_the_real_index_serves_core_metadata_that_pip_resolves_from(tmp_path: Path) -> None:
    """A public registry serves each wheel's METADATA beside it (PEP 658/714), and pip's resolver reads it before
    any wheel. The container's own pip (Debian 12's python3-venv, 23.0.1) does here. It still downloads every wheel
    afterwards for `install --dry-run --report` (so did pip 23.2.1 and 25.1.1, tried by hand): the ~4 GB that
    `deploy lock` fetches on a real stack are pip's own doing, not a missing metadata file of this index."""
    import subprocess

    from tests.sim.software.standins import CT_PYTHON, clean_env

    real = tmp_path / "real"
    real.mkdir()
    _wheel(real, "alpha", "1.0", ("beta>=2",))
    beta = _wheel(real, "beta", "2.0")
    with serving(tmp_path, None, real) as server:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        page = requests.get(f"{base}{REAL_PREFIX}/simple/beta/", timeout=10).text
        meta = requests.get(f"{base}{REAL_PREFIX}/files/{beta.name}.metadata", timeout=10)
        digest = hashlib.sha256(meta.content).hexdigest()
        assert meta.content.startswith(b"Metadata-Version: 2.1\nName: beta\n")
        assert f'data-dist-info-metadata="sha256={digest}"' in page and f'data-core-metadata="sha256={digest}"' in page
        assert requests.get(f"{base}/files/{beta.name}.metadata", timeout=10).status_code == 404  # stand-ins: none
        venv = tmp_path / "venv"
        subprocess.run([CT_PYTHON, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
        server.requests.clear()
        res = subprocess.run([str(venv / "bin" / "pip"), "install", "--dry-run", "--quiet", "--report", "-",
                              "--no-cache-dir", "--index-url", f"{base}{REAL_PREFIX}/simple", "alpha"],
                             env=clean_env(), capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        resolved = sorted(i["metadata"]["name"] for i in json.loads(res.stdout)["install"])
        assert resolved == ["alpha", "beta"]
        fetched = [r for r in server.requests if "/files/" in r]
        metadata = [f"GET {REAL_PREFIX}/files/alpha-1.0-py3-none-any.whl.metadata",
                    f"GET {REAL_PREFIX}/files/{beta.name}.metadata"]
        assert fetched[:2] == metadata, server.requests  # the resolution ran on the metadata files
        assert set(fetched[2:]) == {f"GET {REAL_PREFIX}/files/alpha-1.0-py3-none-any.whl",
                                    f"GET {REAL_PREFIX}/files/{beta.name}"}, server.requests
