"""GPU copy probe: parser and verdict on the real H200 capture; the script itself (for real only with a GPU)."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.p2p.bandwidth import (
    P2PProbeParseError,
    P2PProbeResult,
    expected_gbps,
    p2p_bandwidth_verdict,
    parse_p2p_probe,
    probe_argv,
    probe_script_source,
)
from orchestrator.resources import module_path
from tests.shared import H200_NVLINK

FIX = H200_NVLINK
PROBE = module_path("orchestrator.p2p.probe")


def capture() -> str:
    return (FIX / "p2p-torch-copy.json").read_text()


def test_parse_real_capture_with_trailing_noise() -> None:
    text = capture()
    assert not text.rstrip().endswith("}")  # the capture has a stray stderr line after the JSON
    r = parse_p2p_probe(text)
    assert r.n == 2
    assert [(p.src, p.dst, p.can_access_peer, p.gbps) for p in r.pairs] == [(0, 1, True, 378.5),
                                                                            (1, 0, True, 378.0)]


def test_verdict_on_real_capture_nvlink_ok() -> None:
    r = parse_p2p_probe(capture())
    v = p2p_bandwidth_verdict(r, {(0, 1): "NV18"})
    assert v.ok
    assert [p.status for p in v.pairs] == ["ok", "ok"]
    assert v.pairs[0].expected_gbps == 360.0 and v.pairs[1].link == "NV18"  # reverse pair looked up
    assert v.summary == "all 2 GPU pairs copy peer-to-peer at 378.0-378.5 GB/s"


def test_verdict_flags_slow_and_no_peer_pairs() -> None:
    doc = {"n": 3, "pairs": [
        {"src": 0, "dst": 1, "can_access_peer": True, "GBps": 52.0},   # Gen5 x16 PIX: fine
        {"src": 0, "dst": 2, "can_access_peer": True, "GBps": 18.0},   # Gen5 SYS: 36 % -> slow
        {"src": 1, "dst": 2, "can_access_peer": False, "GBps": 45.0},  # through the host, whatever the speed
        {"src": 2, "dst": 1, "can_access_peer": True, "GBps": 30.0},   # no topo entry at all
    ]}
    r = P2PProbeResult.model_validate(doc)
    v = p2p_bandwidth_verdict(r, {(0, 1): "PIX", (0, 2): "SYS", (1, 2): "X?"}, pcie_gen=5, pcie_width=16)
    assert [p.status for p in v.pairs] == ["ok", "slow", "no-peer", "unchecked"]
    assert not v.ok
    assert "GPU0->GPU2: 18.0 GB/s is 36 % of the ~50 GB/s expected over SYS" in v.pairs[1].message
    assert v.summary.startswith("2 of 4 GPU pairs fail: 1 without peer access, 1 below 50 %")


def test_expectations() -> None:
    assert expected_gbps("NV18") == 360.0
    assert expected_gbps("PIX", pcie_gen=5) == 50.0
    assert expected_gbps("NODE", pcie_gen=4) == 25.0
    assert expected_gbps("PXB", pcie_gen=5, pcie_width=8) == 25.0
    assert expected_gbps("PHB") == 25.0  # unknown generation: the lower (Gen4) bar
    assert expected_gbps("X") is None and expected_gbps(None) is None


def test_no_json_is_an_error() -> None:
    with pytest.raises(P2PProbeParseError):
        parse_p2p_probe("Traceback (most recent call last):\n  ...\nRuntimeError: CUDA error\n")


def test_script_is_standalone() -> None:
    tree = ast.parse(probe_script_source())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "argparse", "json", "sys", "torch"}
    assert probe_argv("/root/ml-env/bin/python3", "/tmp/p2p_probe.py", size_mib=64) == [
        "/root/ml-env/bin/python3", "/tmp/p2p_probe.py", "--size-mib", "64", "--iters", "20"]


def test_script_without_torch_says_so() -> None:
    # -S: no site-packages, so torch is not importable even where it is installed (the probe needs only stdlib)
    proc = subprocess.run([sys.executable, "-S", str(PROBE)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 3
    assert "torch is not importable" in proc.stderr and proc.stdout == ""


def _cuda_gpus() -> int:
    if importlib.util.find_spec("torch") is None:
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.gpu
def test_probe_runs_for_real() -> None:
    n = _cuda_gpus()  # the gpu marker skips this test where there is none (tests/skip_policy.py)
    assert n > 0
    proc = subprocess.run([sys.executable, str(PROBE), "--size-mib", "64", "--iters", "5"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["n"] == n and doc["size_mib"] == 64 and len(doc["device_names"]) == n
    r = parse_p2p_probe(proc.stdout)
    assert len(r.pairs) == n * (n - 1)
    assert all(p.gbps > 0 for p in r.pairs)


def test_probe_output_from_a_real_run() -> None:
    """Output of p2p_probe_script.py itself on 2x H200 (torch 2.11): parses and passes over NV18."""
    text = (Path(__file__).resolve().parents[1] / "data" / "p2p-probe-h200x2.json").read_text()
    r = parse_p2p_probe(text)
    assert r.torch_version == "2.11.0+cu130" and r.device_names == ("NVIDIA H200", "NVIDIA H200")
    assert r.size_mib == 256 and r.iters == 20
    v = p2p_bandwidth_verdict(r, {(0, 1): "NV18"})
    assert v.ok and [p.gbps for p in v.pairs] == [387.6, 386.2]
