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


def test_the_bench_probe_brings_back_every_rank_s_trimmed_trace(ct: CtRoot, tmp_path: Path,
                                                                  start_server: Callable[..., Server]) -> None:
    """orchestrator/profile/probe.py as `bench --profile` runs it beside bench_serving, against the stand-in, and
    what it prints read by capture.read_outcome; the API key reaches the server from the environment only."""
    import subprocess
    import sys

    from orchestrator.profile import capture

    ct.set_state(kernel_shape="slow_rank", slow_rank=1)
    srv = start_server(ct, "--tp", "2", "--api-key", "sk-probe-secret", start_s=0.2)
    assert srv.wait_status(200)[-1] == 200
    out, done = tmp_path / "prof", tmp_path / "done"
    argv = ["python3", "-c", "SRC", srv.url, str(out), "3", "0.2", "r-1", "2", "30", str(done), "5"]
    command = capture.probe_command("python3", srv.url, str(out), 3, "r-1", 2, str(done), 30)
    parsed = __import__("shlex").split(command)
    assert parsed[:2] == argv[:2] and parsed[3:] == [srv.url, str(out), "3", f"{capture.DELAY_S:g}", "r-1", "2",
                                                       "30", str(done), f"{capture.GRACE_S:g}"]
    assert "sk-probe-secret" not in command
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            requests.post(srv.url + "/generate", headers={"Authorization": "Bearer sk-probe-secret"}, json={
                "text": "hello", "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}}, timeout=30)

    clients = [threading.Thread(target=load) for _ in range(3)]
    for c in clients:
        c.start()
    try:
        proc = subprocess.run([sys.executable, "-c", parsed[2], *argv[3:]], capture_output=True, text=True,
                              timeout=60, env={"SGLANG_API_KEY": "sk-probe-secret", "PATH": "/usr/bin:/bin"})
    finally:
        stop.set()
        for c in clients:
            c.join()
    assert proc.returncode == 0, proc.stderr
    outcome = capture.read_outcome(proc.stdout, [])
    assert outcome.problem == "" and outcome.verdict is not None and outcome.breakdown is not None
    assert (outcome.verdict.code, outcome.verdict.slow_rank) == ("rank-imbalanced", 1)
    assert [r.steps for r in outcome.breakdown.ranks] == [3, 3]
    assert not list(out.glob("*.trace.json.gz"))  # the raw files are removed once read
    d = outcome.diagnosis()
    assert d.code == "profile-rank-imbalanced" and d.figures["slow_rank"] == 1


def test_the_probe_reports_a_server_that_refuses(ct: CtRoot, tmp_path: Path,
                                                 start_server: Callable[..., Server]) -> None:
    import subprocess
    import sys

    from orchestrator.profile import capture
    from orchestrator.resources import module_source

    srv = start_server(ct, "--tp", "2", "--api-key", "sk-probe-secret", start_s=0.2)
    assert srv.wait_status(200)[-1] == 200
    proc = subprocess.run([sys.executable, "-c", module_source("orchestrator.profile.probe"), srv.url,
                           str(tmp_path / "p"), "3", "0", "r-2", "2", "5", str(tmp_path / "d"), "1"],
                          capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    outcome = capture.read_outcome(proc.stdout, [])
    assert outcome.verdict is None and "POST /start_profile failed: HTTP Error 401" in outcome.problem
    assert outcome.diagnosis().code == "profile-failed"
