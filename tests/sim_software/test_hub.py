"""The model hub stand-in, driven by the real `hf download` (huggingface_hub 1.x from the sim host's index)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulator.software.hub import MODEL_CONFIG, REPO_ID, Hub, start_hub

from .standins import clean_env, loopback, sglang_venv


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    h = start_hub(tmp_path / "host", loopback(), 0, shard_bytes=1 << 20)
    yield h
    h.stop()


def hf_env(hub: Hub, home: Path) -> dict[str, str]:
    return clean_env(HF_ENDPOINT=hub.url, HF_HOME=str(home))


def download(hub: Hub, dest: Path, repo: str = REPO_ID) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sglang_venv().bin("hf"), "download", repo, "--local-dir", str(dest)],
                          env=hf_env(hub, dest.parent / "hf-home"), capture_output=True, text=True, timeout=180)


def assert_complete(hub: Hub, dest: Path) -> None:
    for path, f in hub.state.repos[REPO_ID].items():
        assert hashlib.sha256((dest / path).read_bytes()).hexdigest() == f.sha256, path


def test_hf_download_completes_with_progress(hub: Hub, tmp_path: Path) -> None:
    dest = tmp_path / "GLM-5-NVFP4"
    res = download(hub, dest)
    assert res.returncode == 0, res.stderr
    assert "Fetching 10 files" in res.stderr and "100%" in res.stderr
    assert_complete(hub, dest)
    assert json.loads((dest / "config.json").read_text()) == MODEL_CONFIG
    seen = len(hub.state.requests)
    again = download(hub, dest)
    assert again.returncode == 0
    assert not [r for r in hub.state.requests[seen:] if r[0] == "GET" and "/resolve/" in r[1]]  # nothing refetched


def test_dropped_transfer_resumes_with_a_range_request(tmp_path: Path) -> None:
    # The client writes in 10 MB pieces (DOWNLOAD_CHUNK_SIZE): cut each 12 MiB shard after 11 MiB, so one piece is
    # on disk and the retry must ask for the rest from byte 10 MB.
    hub = start_hub(tmp_path / "host", loopback(), 0, shard_bytes=12 << 20)
    hub.state.drop_after_bytes = 11 << 20
    try:
        dest = tmp_path / "GLM-5-NVFP4"
        res = download(hub, dest)
        assert res.returncode == 0, res.stderr
        assert res.stderr.count("Trying to resume download...") == 4
        assert_complete(hub, dest)
        resumed = sorted(r[2] for r in hub.state.requests if r[0] == "GET" and r[2])
        assert resumed == ["bytes=10485760-"] * 4, hub.state.requests
        assert len(hub.state.dropped) == 4
    finally:
        hub.stop()


def test_unknown_repo_fails_clearly(hub: Hub, tmp_path: Path) -> None:
    res = download(hub, tmp_path / "x", repo="zai-org/NoSuchModel")
    assert res.returncode != 0
    assert "Repository Not Found" in res.stderr or "not found" in res.stderr.lower(), res.stderr
