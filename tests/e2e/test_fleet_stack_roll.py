"""`roll group G --profile P` with a stack change (issue 35, fleets): P's stack is built on every host first, in
parallel and while they serve (`--stage-only` stops there, reporting per host); the canary and waves that follow
restart onto it with no pip run."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import DeployEnv
from tests.e2e.fleet_harness import FleetHarness, fleet_root
from tests.e2e.test_stack_roll import NEXT, add_next_profile
from tests.e2e.test_stacks import OLD_VENV, server_python
from tests.sim_hosts import OFFSET_FLEET

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetHarness]:
    if os.geteuid() != 0:
        pytest.skip("the simulator needs root")
    with fleet_root(tmp_path_factory, "deploy-sim-fleetstack", OFFSET_FLEET, 2) as base:
        up = base.env.run("up", "group", "prod", "--skip-bench", "--skip-weights", timeout=1200)
        assert up.rc == 0, up.text
        yield base


def test_stage_only_builds_the_stack_on_every_host_while_they_serve_then_the_roll_restarts_onto_it(
        fleet: FleetHarness) -> None:
    """Before: `roll group --profile` rolled flags only and `--stage-only` did not exist."""
    env = fleet.env
    add_next_profile(env)
    before = fleet.releases()
    staged = env.run("--json", "roll", "group", "prod", "--profile", NEXT, "--stage-only", timeout=1200)
    assert staged.rc == 0, staged.text[-3000:]
    rows = {r["host"]: r for r in staged.json["staged"]}
    assert sorted(rows) == sorted(fleet.names), staged.json
    assert all(r["ok"] and r["summary"].startswith("built stack ") for r in rows.values()), rows
    # each host's index is another URL in the simulator, so another sha (docs/stacks.md: the index is identity)
    shas = {name: r["summary"].split()[2] for name, r in rows.items()}
    # nothing restarted: the same releases, each server on its old venv, still serving
    assert fleet.releases() == before
    for name in fleet.names:
        host = fleet.host_env(name)
        assert server_python(host) == f"{OLD_VENV}/bin/python"
        assert host.ct(f"test -x /opt/deploy/stacks/{shas[name]}/bin/python").rc == 0
    text = env.run("roll", "group", "prod", "--profile", NEXT, "--stage-only", timeout=1200)
    assert text.rc == 0 and "--stage-only: nothing restarted" in text.text, text.text[-3000:]
    assert all(f"stack {sha} (sglang 0.5.23) in " in text.text for sha in shas.values()), text.text  # no pip run
    print(staged.text, text.text, sep="\n")

    rolled = env.run("roll", "group", "prod", "--profile", NEXT, "--skip-bench", timeout=1200)
    assert rolled.rc == 0, rolled.text[-3000:]
    assert "stack staged on every host; rolling canary first" in rolled.text
    for name in fleet.names:
        assert server_python(fleet.host_env(name)) == f"/opt/deploy/stacks/{shas[name]}/bin/python"
    assert fleet.releases() != before
    print(rolled.text)


def freeze(host: DeployEnv) -> list[str]:
    venv = json.loads(host.ct("cat /var/lib/deploy/current/meta.json").stdout)["stack"]["venv"]
    return host.ct(f"{venv}/bin/python -m pip freeze --all --disable-pip-version-check").stdout.split()


def test_a_build_published_between_the_hosts_changes_nothing_under_a_lock(fleet: FleetHarness) -> None:
    """Before: the simulated index never moved (`deploy sim index publish` did not exist)."""
    env = fleet.env
    a, b = fleet.names
    assert env.run("lock", "glm5-nvfp4", "--host", a).rc == 0
    first = env.run("up", "host", a, "--skip-bench", timeout=900)
    assert first.rc == 0, first.text[-3000:]
    pub = env.run("--json", "sim", "index", "publish", "torch", "2.11.0+rebuild1", "--root", str(fleet.root))
    assert pub.rc == 0 and pub.json["published"] == "torch-2.11.0+rebuild1-py3-none-any.whl", pub.text
    page = fleet.host_env(b).ct("curl -s http://$(ip -4 route show default | awk '{print $3}'):3141/simple/torch/")
    second = env.run("up", "host", b, "--skip-bench", timeout=900)
    assert second.rc == 0, second.text[-3000:]
    frozen = {name: freeze(fleet.host_env(name)) for name in fleet.names}
    assert frozen[a] == frozen[b] and "torch==2.11.0" in frozen[a], (frozen, page.stdout)
    drift = env.run("--json", "status", "group", "prod").json
    assert [h["report"]["stack_drift"] for h in drift["hosts"]] == [[], []], drift
