"""`deploy bench --profile N` end to end: the stand-in's /start_profile during the bench on every rank, the traces
brought back, the breakdown and the verdict in the output, --json and the ledger; the shape set through the real
`deploy sim fault`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import SHARED, DeployEnv

EXPECTED = {"collective": "collective-bound", "slow_rank": "rank-imbalanced"}


@pytest.mark.xdist_group(SHARED)
def test_bench_profile_gives_each_shape_its_verdict(converged_shared: DeployEnv, tmp_path: Path) -> None:
    env = converged_shared
    root = str(env.root)
    try:
        for shape, verdict in EXPECTED.items():
            fault = env.run("sim", "fault", env.host, "--ct", "120", f"kernel_shape={shape}", "slow_rank=3",
                            "--root", root)
            assert fault.rc == 0, fault.text
            res = env.run("--json", "bench", "host", env.host, "--profile", "4")
            assert res.rc == 0, res.text
            (run,) = res.json["runs"]
            prof = run["profile"]
            assert prof["problem"] is None, prof
            ranks = prof["breakdown"]["ranks"]
            assert [r["rank"] for r in ranks] == list(range(8))  # tensor-parallel-size 8: one trace per rank
            assert all(r["steps"] == 4 and abs(r["coverage"] - 1) < 0.05 for r in ranks)
            assert prof["verdict"]["code"] == verdict
            # the verdict is one more diagnosis line of the run: the ledger keeps it
            codes = {d["code"] for d in run["diagnosis"]}
            assert f"profile-{verdict}" in codes
            # the power reading is evidence beside the verdict: its MoE lever is named as not the first one
            moe_lever_denied = any("the MoE lever is not the first one" in e for e in prof["verdict"]["evidence"])
            assert moe_lever_denied == ("kernels-not-saturating" in codes)
            hist = env.run("--json", "history", "--bench", "host", env.host, "--limit", "1")
            assert hist.rc == 0, hist.text
            (stored,) = hist.json["runs"]
            assert stored["id"] == run["run_id"]
            assert f"profile-{verdict}" in {d["code"] for d in stored["diagnosis"]}
        assert prof["verdict"]["slow_rank"] == 3
        text = env.run("bench", "host", env.host, "--profile", "2")
        assert text.rc == 0, text.text
        assert "decode step time by kernel class, per rank" in text.stdout
        assert "verdict: rank-imbalanced: rank 3 works" in text.stdout
    finally:
        env.run("sim", "fault", env.host, "--ct", "120", "kernel_shape=none", "slow_rank=none", "--root", root)

