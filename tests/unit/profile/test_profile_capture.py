"""`bench --profile`'s shell around bench_serving (capture.with_profile), run by a real bash, and the probe's
document read back (capture.read_outcome)."""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
from pathlib import Path

from orchestrator.profile.capture import read_outcome, with_profile

DECODE = (Path(__file__).resolve().parents[2] / "fixtures" / "profile"
          / "bystage-1796659222.7204502-TP-0-DECODE.trace.gpu.json.gz")


def test_the_bench_s_exit_status_is_kept_and_the_probe_is_waited_for(tmp_path: Path) -> None:
    out, done = tmp_path / "probe.json", tmp_path / "done"
    probe = f"sh -c 'while [ ! -e {done} ]; do sleep 0.05; done; echo probed'"
    script = with_profile("echo benching; exit_code=3; (exit $exit_code)", probe, str(out), str(done))
    res = subprocess.run(["bash", "-c", f"set -u\n{script}"], capture_output=True, text=True, timeout=20)
    assert res.returncode == 3 and res.stdout == "benching\n"
    assert out.read_text() == "probed\n"  # it saw the bench end (the done file), and bash waited for it


def test_read_outcome_of_the_real_trace_and_of_nothing() -> None:
    doc = {"ok": True, "message": "", "files": [
        {"name": DECODE.name, "gz_b64": base64.b64encode(DECODE.read_bytes()).decode()}]}
    outcome = read_outcome("noise before\n" + json.dumps(doc) + "\n", [])
    assert outcome.verdict is not None and outcome.verdict.code == "host-bound" and outcome.problem == ""
    d = outcome.diagnosis()
    assert d.code == "profile-host-bound" and d.figures["idle_share"] == 0.9624 and d.figures["ranks"] == 1
    assert read_outcome("", []).problem == "the profiler probe printed nothing readable"
    empty = {"ok": False, "message": "0 of 8 ranks' traces came back", "files": []}
    assert read_outcome(json.dumps(empty), []).problem == "0 of 8 ranks' traces came back"
    broken = {"ok": True, "files": [{"name": "x.json.gz", "gz_b64": base64.b64encode(gzip.compress(b"{")).decode()}]}
    assert read_outcome(json.dumps(broken), []).problem.startswith("the traces could not be read: x.json.gz is not")
