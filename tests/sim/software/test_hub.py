"""The model hub stand-in, driven by the real `hf download` (huggingface_hub 1.x from the sim host's index, with the
real `hf_xet` it installs): the Xet path for LFS files by default, the plain HTTP path with HF_HUB_DISABLE_XET=1
(what a client without hf_xet takes)."""

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


#: The client without Xet: huggingface_hub's plain HTTP download of `/resolve` bodies (resumed with Range).
PLAIN = {"HF_HUB_DISABLE_XET": "1"}
#: hf_xet's retry pause starts at 3 s and doubles over 5 attempts: shorter here, the same attempts.
QUICK_XET_RETRIES = {"HF_XET_CLIENT_RETRY_BASE_DELAY": "100ms", "HF_XET_CLIENT_RETRY_MAX_DURATION": "2s"}


def hf_env(hub: Hub, home: Path, **extra: str) -> dict[str, str]:
    return clean_env(HF_ENDPOINT=hub.url, HF_HOME=str(home), **extra)


def download(hub: Hub, dest: Path, repo: str = REPO_ID, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sglang_venv().bin("hf"), "download", repo, "--local-dir", str(dest)],
                          env=hf_env(hub, dest.parent / "hf-home", **extra), capture_output=True, text=True,
                          timeout=180)


def xet_requests(hub: Hub, since: int = 0) -> dict[str, list[tuple[str, str, str]]]:
    """What the client asked since request `since`, by kind: token, reconstruction, xorb, plain LFS body."""
    shards = {p for p, f in hub.state.repos[REPO_ID].items() if f.lfs}
    out: dict[str, list[tuple[str, str, str]]] = {"token": [], "reconstruction": [], "xorb": [], "plain": []}
    for r in hub.state.requests[since:]:
        method, path, _ = r
        if "/xet-read-token/" in path:
            out["token"].append(r)
        elif "/reconstructions/" in path:
            out["reconstruction"].append(r)
        elif path.startswith("/xet/xorbs/"):
            out["xorb"].append(r)
        elif method == "GET" and "/resolve/" in path and path.rsplit("/", 1)[1] in shards:
            out["plain"].append(r)
    return out


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
    # Without Xet (PLAIN): the client writes in 10 MB pieces (DOWNLOAD_CHUNK_SIZE): cut each 12 MiB shard after
    # 11 MiB, so one piece is on disk and the retry must ask for the rest from byte 10 MB.
    hub = start_hub(tmp_path / "host", loopback(), 0, shard_bytes=12 << 20)
    hub.state.drop_after_bytes = 11 << 20
    try:
        dest = tmp_path / "GLM-5-NVFP4"
        res = download(hub, dest, **PLAIN)
        assert res.returncode == 0, res.stderr
        assert res.stderr.count("Trying to resume download...") == 4
        assert_complete(hub, dest)
        resumed = sorted(r[2] for r in hub.state.requests if r[0] == "GET" and r[2])
        assert resumed == ["bytes=10485760-"] * 4, hub.state.requests
        assert len(hub.state.dropped) == 4
    finally:
        hub.stop()


def test_hf_download_takes_the_xet_path_the_real_hub_offers(hub: Hub, tmp_path: Path) -> None:
    """Issue 36 item 9: `/resolve` of an LFS file names its Xet hash and token route; hf_xet gets a token from the
    token endpoint, asks the CAS for the reconstruction (v2 first) and fetches the xorb bytes by range. The plain
    body of `/resolve` is never asked for; a second download fetches nothing."""
    dest = tmp_path / "GLM-5-NVFP4"
    res = download(hub, dest)
    assert res.returncode == 0, res.stderr
    assert_complete(hub, dest)
    seen = xet_requests(hub)
    commit = hub.state.commit(REPO_ID)
    assert seen["plain"] == [] and seen["token"], hub.state.requests
    assert {r[1] for r in seen["token"]} == {f"/api/models/{REPO_ID}/xet-read-token/{commit}"}
    shards = [f for f in hub.state.repos[REPO_ID].values() if f.lfs]
    assert {r[1] for r in seen["reconstruction"]} == {f"/xet/cas/v2/reconstructions/{f.xet_hash}" for f in shards}
    assert {r[1] for r in seen["xorb"]} == {f"/xet/xorbs/{f.xorb.hash}" for f in shards}
    assert all(r[2].startswith("bytes=") for r in seen["xorb"])  # by range, as from a presigned URL
    before = len(hub.state.requests)
    again = download(hub, dest)
    assert again.returncode == 0 and xet_requests(hub, before)["xorb"] == []


def test_the_cas_wants_a_live_token_and_a_short_lived_one_is_fetched_again(tmp_path: Path) -> None:
    """The CAS answers 401 without the token endpoint's access token or with an expired one; with tokens that live
    60 s (huggingface_hub fetches one anew when 60 s or fewer are left) each file's download asks for its own."""
    import requests

    hub = start_hub(tmp_path / "host", loopback(), 0, shard_bytes=1 << 20)
    try:
        f = next(f for f in hub.state.repos[REPO_ID].values() if f.lfs)
        cas = f"{hub.url}/xet/cas/v2/reconstructions/{f.xet_hash}"
        assert requests.get(cas, timeout=10).status_code == 401
        token = requests.get(f"{hub.url}/api/models/{REPO_ID}/xet-read-token/main", timeout=10)
        assert token.status_code == 200 and token.headers["X-Xet-Cas-Url"] == f"{hub.url}/xet/cas"
        bearer = {"Authorization": f"Bearer {token.headers['X-Xet-Access-Token']}"}
        doc = requests.get(cas, headers=bearer, timeout=10).json()
        assert doc["terms"][0]["unpacked_length"] == len(f.data) and f.xorb.hash in doc["xorbs"]
        from simulator.software.hub import GATED_REPO_ID

        gated = requests.get(f"{hub.url}/api/models/{GATED_REPO_ID}/xet-read-token/main", timeout=10)
        assert gated.status_code == 401 and gated.headers["X-Error-Code"] == "GatedRepo"  # gated like the files
        hub.state.xet_tokens = dict.fromkeys(hub.state.xet_tokens, 0.0)  # every token issued so far expired
        assert requests.get(cas, headers=bearer, timeout=10).status_code == 401
        hub.state.xet_token_ttl_s = 60.0
        res = download(hub, tmp_path / "GLM-5-NVFP4")
        assert res.returncode == 0, res.stderr
        assert len(xet_requests(hub)["token"]) >= 4  # one per shard at least: none outlived the client's margin
    finally:
        hub.stop()


def test_a_dropped_xorb_transfer_is_fetched_again_by_hf_xet(tmp_path: Path) -> None:
    """`drop_after_bytes` cuts the first fetch of each xorb: hf_xet retries that range and the download completes
    in one `hf download` (the real client's retry, not the plain path's Range resume)."""
    hub = start_hub(tmp_path / "host", loopback(), 0, shard_bytes=1 << 20)
    hub.state.drop_after_bytes = 300_000
    try:
        dest = tmp_path / "GLM-5-NVFP4"
        res = download(hub, dest, **QUICK_XET_RETRIES)
        assert res.returncode == 0, res.stderr
        assert_complete(hub, dest)
        seen = xet_requests(hub)
        assert seen["plain"] == [] and len(hub.state.dropped) == 4
        assert len(seen["xorb"]) >= 8  # each xorb: the cut fetch and the one that completed
    finally:
        hub.stop()


def test_a_link_cut_during_a_xet_download_fails_it_and_the_next_download_finishes(tmp_path: Path) -> None:
    """`hub_cut_after_bytes` on the Xet path: hf_xet gives up after its retries, `hf download` fails and names the
    Xet transfer (what deploy's error reads), no partial shard is left; once the link is back it completes."""
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    (host_dir / "host.json").write_text(json.dumps({"faults": {"hub_cut_after_bytes": 600_000}}))
    hub = start_hub(host_dir, loopback(), 0, shard_bytes=1 << 20)
    try:
        dest = tmp_path / "GLM-5-NVFP4"
        cut = download(hub, dest, **QUICK_XET_RETRIES)
        assert cut.returncode != 0, cut.stderr
        from orchestrator.parsers.weights import parse_download_output

        assert parse_download_output(cut.stdout + cut.stderr).xet_error, cut.stderr[-3000:]
        assert (dest / "config.json").is_file() and not list(dest.glob("*.safetensors"))
        assert not list(dest.rglob("*.incomplete"))
        assert xet_requests(hub)["plain"] == []
        (host_dir / "host.json").write_text(json.dumps({"faults": {"hub_cut_after_bytes": None}}))
        again = download(hub, dest, **QUICK_XET_RETRIES)
        assert again.returncode == 0, again.stderr
        assert_complete(hub, dest)
    finally:
        hub.stop()


def test_unknown_repo_fails_clearly(hub: Hub, tmp_path: Path) -> None:
    res = download(hub, tmp_path / "x", repo="zai-org/NoSuchModel")
    assert res.returncode != 0
    assert "Repository Not Found" in res.stderr or "not found" in res.stderr.lower(), res.stderr


def test_a_cut_download_leaves_small_files_only_and_the_record_is_written_once_complete(tmp_path: Path) -> None:
    """The `hub_cut_after_bytes` fault (read from the host's faults) against the real `hf download` without Xet,
    and deploy's check of the hub's file list (orchestrator/probes/weights_probe.py) on what it leaves, then on a
    full download."""
    from orchestrator.parsers.weights import RECORD_PATH
    from orchestrator.steps.software import weights_probe_source

    host_dir = tmp_path / "host"
    host_dir.mkdir()
    (host_dir / "host.json").write_text(json.dumps({"faults": {"hub_cut_after_bytes": 600_000}}))
    hub = start_hub(host_dir, loopback(), 0, shard_bytes=1 << 20)
    dest = tmp_path / "GLM-5-NVFP4"
    env = hf_env(hub, tmp_path / "hf-home", **PLAIN)

    def probe(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sglang_venv().bin("python"), "-c", weights_probe_source(), *args], env=env,
                              capture_output=True, text=True, timeout=120)

    try:
        commit = probe("resolve", REPO_ID, "main").stdout.strip()
        assert commit == hub.state.commit(REPO_ID)
        cut = download(hub, dest, **PLAIN)
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


def test_a_gated_repo_answers_as_the_real_hub_and_the_probe_names_each_answer(hub: Hub, tmp_path: Path) -> None:
    """Issue 36 item 5: 401 GatedRepo without a token, 403 GatedRepo with a token of an account without access,
    401 "Invalid credentials" for no token at all; a granted token downloads. Driven by the real huggingface_hub,
    through HF_TOKEN_PATH (the 0600 file deploy writes), the probe's `hub-refused` line names each answer."""
    from orchestrator.steps.software import weights_probe_source
    from simulator.software.hub import GATED_REPO_ID, grant_token

    token_path = tmp_path / "hf-token"
    env = {**hf_env(hub, tmp_path / "hf-home"), "HF_TOKEN_PATH": str(token_path)}

    def resolve(token: str | None) -> subprocess.CompletedProcess[str]:
        token_path.unlink(missing_ok=True)
        if token is not None:
            token_path.write_text(token + "\n")
        return subprocess.run([sglang_venv().bin("python"), "-c", weights_probe_source(), "resolve", GATED_REPO_ID,
                               "main"], env=env, capture_output=True, text=True, timeout=120)

    def refusal(res: subprocess.CompletedProcess[str]) -> list[str]:
        assert res.returncode == 3, res.stdout + res.stderr
        return next(line.split("\t")[1:3] for line in res.stderr.splitlines() if line.startswith("hub-refused\t"))

    assert refusal(resolve(None)) == ["GatedRepo", "401"]
    assert refusal(resolve("hf_" + "n" * 34)) == ["GatedRepo", "403"]
    assert refusal(resolve("not-a-token")) == ["-", "401"]
    assert "Invalid credentials in Authorization header" in resolve("not-a-token").stderr
    granted = "hf_" + "g" * 34
    grant_token(hub.host_dir, granted)
    assert (hub.host_dir / "hub-tokens").stat().st_mode & 0o777 == 0o600
    ok = resolve(granted)
    assert ok.returncode == 0 and ok.stdout.strip() == hub.state.commit(GATED_REPO_ID), ok.stderr
    assert "hub-client\t1." in ok.stderr  # the huggingface_hub the stand-in's range brought (1.x here)
    dest = tmp_path / "gated"
    res = subprocess.run([sglang_venv().bin("hf"), "download", GATED_REPO_ID, "--local-dir", str(dest)], env=env,
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    assert (dest / "config.json").is_file() and len(list(dest.glob("*.safetensors"))) == 4
