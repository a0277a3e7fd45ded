"""The stand-in's /start_profile: sglang 0.5.12.post1's request body, traces per rank in the real format, shaped by
the container's kernel_shape fault, read back by the tool's own reader."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from orchestrator.profile.breakdown import breakdown
from orchestrator.profile.trace import read_trace
from orchestrator.profile.verdict import judge

from .conftest import Server
from .standins import CtRoot, make_ct_root, with_userspace


@pytest.fixture
def ct(tmp_path: Path) -> CtRoot:
    return with_userspace(make_ct_root(tmp_path / "ct"))


def _load(srv: Server, stop: threading.Event) -> None:
    while not stop.is_set():
        requests.post(srv.url + "/generate", json={"text": "hello", "sampling_params": {
            "max_new_tokens": 64, "ignore_eos": True}}, timeout=30)


def test_start_profile_writes_one_trace_per_rank_shaped_by_the_fault(ct: CtRoot, tmp_path: Path,
                                                                     start_server: Callable[..., Server]) -> None:
    ct.set_state(kernel_shape="collective")
    srv = start_server(ct, "--tp", "4", start_s=0.2)
    assert srv.wait_status(200)[-1] == 200
    out = tmp_path / "prof"
    # a wrong type is FastAPI's 422, before anything starts
    bad = requests.post(srv.url + "/start_profile", json={"num_steps": "five"}, timeout=5)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "num_steps"]
    stop = threading.Event()
    clients = [threading.Thread(target=_load, args=(srv, stop)) for _ in range(4)]
    for c in clients:
        c.start()
    try:
        r = requests.post(srv.url + "/start_profile", json={
            "output_dir": str(out), "num_steps": 5, "activities": ["CPU", "GPU"], "profile_by_stage": True,
            "profile_prefix": "deploy"}, timeout=5)
        assert (r.status_code, r.text) == (200, "Start profiling.\n")
        # a second start while one runs fails as the scheduler's "already in progress" does
        assert requests.post(srv.url + "/start_profile", json={}, timeout=5).status_code == 500
        deadline = time.time() + 20
        while len(list(out.glob("*.trace.json.gz"))) < 4 and time.time() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        for c in clients:
            c.join()
    files = sorted(out.glob("*.trace.json.gz"))
    assert [f.name.split("-TP-")[1] for f in files] == [f"{r}-DECODE.trace.json.gz" for r in range(4)]
    assert all(f.name.startswith("deploy-") for f in files)
    traces = [read_trace(f) for f in files]
    assert [t.rank for t in traces] == [0, 1, 2, 3] and {len(t.decode_steps()) for t in traces} == {5}
    assert judge(breakdown(traces)).code == "collective-bound"
    assert "Profiling starts. Traces will be saved to: " + str(out) in srv.output()
