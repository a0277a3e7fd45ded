"""`deploy sim index publish`: a newer build of a stand-in package, served at once by every host's index of a root
(issue 35: an index that moves while hosts run)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from simulator.software.index import publish, published, start_index


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read()


def test_a_published_build_is_served_by_every_host_index_of_the_root(tmp_path: Path) -> None:
    a = start_index(tmp_path / "hosts" / "sim-a", "127.0.0.1", 0)
    b = start_index(tmp_path / "hosts" / "sim-b", "127.0.0.1", 0)
    try:
        before = get(f"{a.url}/torch/")[1].decode()
        assert "torch-2.14.1-py3-none-any.whl" in before and "+rebuild1" not in before
        wheel = publish(tmp_path, "torch", "2.14.1+rebuild1")  # a local build: satisfies 0.5.23's torch==2.14.1
        assert wheel.name == "torch-2.14.1+rebuild1-py3-none-any.whl"
        for idx in (a, b):
            page = get(f"{idx.url}/torch/")[1].decode()
            assert "torch-2.14.1-py3-none-any.whl" in page and f"{wheel.name}#sha256=" in page
            base = idx.url.removesuffix("/simple")
            status, body = get(f"{base}/files/{wheel.name}")
            assert status == 200 and body == wheel.read_bytes()
        assert [(f, r) for f, _, r in published(tmp_path)] == [(wheel.name, None)]
        with pytest.raises(ValueError, match="no stand-in package 'flashinfer'"):
            publish(tmp_path, "flashinfer", "0.6.9")
        # a kernel library's local build: served beside the wheelhouse's builds of it
        fi = publish(tmp_path, "flashinfer-python", "0.7.2+cu130", "slow")
        page = get(f"{a.url}/flashinfer-python/")[1].decode()
        assert "flashinfer_python-0.7.2-py3-none-any.whl" in page and f"{fi.name}#sha256=" in page
        assert [r for _, _, r in published(tmp_path)] == ["slow", None]
    finally:
        a.stop()
        b.stop()
