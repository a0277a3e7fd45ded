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


def test_a_cut_download_leaves_small_files_only_and_the_record_is_written_once_complete(tmp_path: Path) -> None:
    """The `hub_cut_after_bytes` fault (read from the host's faults) against the real `hf download`, and deploy's
    check of the hub's file list (orchestrator/probes/weights_probe.py) on what it leaves, then on a full download."""
    from orchestrator.parsers.weights import RECORD_PATH
    from orchestrator.steps.software import weights_probe_source

    host_dir = tmp_path / "host"
    host_dir.mkdir()
    (host_dir / "host.json").write_text(json.dumps({"faults": {"hub_cut_after_bytes": 600_000}}))
    hub = start_hub(host_dir, loopback(), 0, shard_bytes=1 << 20)
    dest = tmp_path / "GLM-5-NVFP4"
    env = hf_env(hub, tmp_path / "hf-home")

    def probe(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sglang_venv().bin("python"), "-c", weights_probe_source(), *args], env=env,
                              capture_output=True, text=True, timeout=120)

    try:
        commit = probe("resolve", REPO_ID, "main").stdout.strip()
        assert commit == hub.state.commit(REPO_ID)
        cut = download(hub, dest)
        assert cut.returncode != 0 and "Trying to resume download..." in cut.stderr
        files = hub.state.repos[REPO_ID]
        left = sorted(p.name for p in dest.iterdir() if p.is_file())
        # the small files came and stay; every shard was cut and its partial file deleted
        assert (dest / "config.json").is_file() and not [n for n in left if n.endswith(".safetensors")]
        assert not list(dest.rglob("*.incomplete"))
        short = probe("record", REPO_ID, commit, str(dest), RECORD_PATH)
        assert short.returncode == 1 and not (dest / RECORD_PATH).exists()
        assert sorted(line.split("\t")[1] for line in short.stdout.splitlines()) == sorted(
            p for p, f in files.items() if f.lfs)
        # the link is back: the next download finishes what is missing, and the record lists every file and size
        (host_dir / "host.json").write_text(json.dumps({"faults": {"hub_cut_after_bytes": None}}))
        again = subprocess.run([sglang_venv().bin("hf"), "download", REPO_ID, "--revision", commit, "--local-dir",
                                str(dest)], env=env, capture_output=True, text=True, timeout=180)
        assert again.returncode == 0, again.stderr
        done = probe("record", REPO_ID, commit, str(dest), RECORD_PATH)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = (dest / RECORD_PATH).read_text().splitlines()
        assert lines[0] == f"{REPO_ID}\t{commit}"
        assert sorted(lines[1:]) == sorted(f"{len(f.data)}\t{p}" for p, f in files.items())
        assert_complete(hub, dest)
    finally:
        hub.stop()
