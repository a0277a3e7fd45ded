"""What a newcomer reads, end to end at 80 columns with stdout a pipe: no id is cut, the hints name the commands
that work, and `compare` refuses runs of different presets.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tests.e2e.conftest import SHARED, DeployEnv, Result

RUN_ID = r"r-\d{8}-\d{6}-[0-9a-f]{4}"


def at_80(env: DeployEnv, *args: str) -> Result:
    """The CLI with stdout not a terminal (as in a pipe) and an 80-column COLUMNS."""
    narrow = dataclasses.replace(env, env={**env.env, "COLUMNS": "80"})
    res = narrow.run(*args)
    assert res.rc in (0, 1), res.text
    assert not re.search(r"\S…", res.stdout), res.stdout  # a cut word (progress lines end in a lone '…')
    return res


def line_of(text: str, first: str) -> list[str]:
    (line,) = [ln for ln in text.splitlines() if ln.split()[:1] == [first]]
    return line.split()


@pytest.mark.xdist_group(SHARED)
def test_80_columns_keep_ids_whole_and_compare_refuses_other_presets(converged_shared: DeployEnv,
                                                                     tmp_path: Path) -> None:
    env = converged_shared
    release = env.ct("readlink /var/lib/deploy/current").stdout.strip().rsplit("/", 1)[-1]

    bench = at_80(env, "bench", "host", env.host)
    (run_id,) = [w.strip("()") for w in bench.stdout.split() if w.startswith("(r-")]
    (tput,) = [ln for ln in bench.stdout.splitlines() if ln.startswith("Output token throughput (tok/s)")]
    assert float(tput.split()[-1].replace(",", "")) > 0
    # the hint after a bench names the commands that list and compare runs
    assert "`deploy history --bench` lists the runs" in bench.stdout
    assert f"`deploy compare {run_id} OTHER_RUN`" in bench.stdout

    runs = at_80(env, "history", "--bench")
    assert f"bench runs of {env.host} (the hosts of inventory {env.inventory.resolve()})" in runs.stdout
    assert line_of(runs.stdout, run_id)[:5] == [run_id, env.host, "bench", "e2e", release]

    releases = at_80(env, "history", "host", env.host)
    assert line_of(releases.stdout, "*")[:4] == ["*", release, "up", "kept"]

    status = at_80(env, "status", "host", env.host)
    assert release in status.stdout
    assert line_of(status.stdout, "gpu") == ["gpu", "power", "W", "limit", "W", "%", "of", "limit", "util", "%"]
    assert len(line_of(status.stdout, "7")) == 5 and line_of(status.stdout, "7")[2] == "600"

    sweep = at_80(env, "bench", "host", env.host, "--sweep", "max-concurrency=16,64", "--set", "num-prompts=32",
                  "--out", str(tmp_path / "sweep"))
    for value in ("16", "64"):
        cells = line_of(sweep.stdout, value)
        assert len(cells) == 15, cells  # every column of the sweep table, none cut to '1…'
        assert float(cells[1].replace(",", "")) > 0

    # (one converged host for both checks: an `up` is the slow part)
    compare_refuses_runs_of_different_presets(env, run_id)


def compare_refuses_runs_of_different_presets(env: DeployEnv, a: str) -> None:
    b = env.run("--json", "bench", "host", env.host, "--preset", "quick").json["runs"][0]["run_id"]

    refused = env.run("compare", a, b)
    assert refused.rc == 2, refused.text
    assert "different presets" in refused.stderr and "'e2e'" in refused.stderr and "'quick'" in refused.stderr
    assert "--force" in refused.stderr and refused.stdout == ""

    forced = at_80(env, "compare", a, b, "--force")
    assert forced.stdout.startswith("WARNING: NOT THE SAME BENCHMARK")
    js = env.run("--json", "compare", a, b, "--force").json
    assert js["ok"] and js["comparable"] is False and "'e2e'" in js["warning"] and "'quick'" in js["warning"]
