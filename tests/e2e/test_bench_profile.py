"""`deploy bench --profile N` end to end: the stand-in's /start_profile during the bench on every rank, the traces
brought back, the breakdown and the verdict in the output, --json and the ledger; the shape set through the real
`deploy sim fault`."""

from __future__ import annotations

import re
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



@pytest.mark.xdist_group(SHARED)
def test_after_a_roll_the_next_profiled_bench_says_whether_the_predicted_share_moved(
        converged_shared: DeployEnv) -> None:
    """Collective-bound on the first release; a roll to the lever's flag; on the new release the stand-in runs the
    MoE shape (the simulator does not model the flag's effect: the shape is set by `sim fault`, as a host whose
    all-reduce got cheaper would look), and the bench says the collective share moved. Rolled back, the MoE shape
    kept: the MoE share that verdict named did not move, in --json."""
    env = converged_shared
    root = str(env.root)
    rolled = False
    try:
        assert env.run("sim", "fault", env.host, "--ct", "120", "kernel_shape=collective", "--root", root).rc == 0
        first = env.run("--json", "bench", "host", env.host, "--profile", "4")
        assert first.rc == 0, first.text
        (run0,) = first.json["runs"]
        assert run0["profile"]["verdict"]["code"] == "collective-bound" and run0["profile"]["since"] is None
        roll = env.run("roll", "host", env.host, "--set", "disable-custom-all-reduce=true", "--skip-bench",
                       timeout=600)
        rolled = roll.rc == 0
        assert rolled, roll.text
        assert env.run("sim", "fault", env.host, "--ct", "120", "kernel_shape=moe", "--root", root).rc == 0
        text = env.run("bench", "host", env.host, "--profile", "4")
        assert text.rc == 0, text.text
        assert re.search(r"since the roll: collective share \d+ % → \d+ %: the predicted lever moved it \(run "
                         + run0["run_id"] + r" on release \S+ said collective-bound; now release \S+\)",
                         text.stdout), text.stdout
        back = env.run("rollback", "host", env.host, timeout=600)
        rolled = back.rc != 0
        assert not rolled, back.text
        again = env.run("--json", "bench", "host", env.host, "--profile", "4")
        assert again.rc == 0, again.text
        (run2,) = again.json["runs"]
        since = run2["profile"]["since"]
        assert since is not None, run2["profile"]
        assert since["predicted_by"] == "moe-bound" and since["share"] == "moe" and since["moved"] is False
        assert since["after"] == run2["profile"]["verdict"]["shares"]["moe"]
        assert since["release"] == again.json["release"] == first.json["release"] != since["since_release"]
        assert "the predicted lever did not move it" in since["message"]
    finally:
        env.run("sim", "fault", env.host, "--ct", "120", "kernel_shape=none", "--root", root)
        if rolled:
            env.run("rollback", "host", env.host, timeout=600)
