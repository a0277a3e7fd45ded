"""A tune of a router worker takes it out of the router for its restarts (fleet/rotation.py), against the real
tiny HTTP router and workers of test_router_safety: removed before the block, added back after it only when the host
runs a release that may serve, and never the last serving worker."""

from __future__ import annotations

import pytest

from orchestrator.errors import CheckFailed
from orchestrator.fleet.rotation import out_of_rotation, routes_to
from tests.unit.test_router_answers import _inventory
from tests.unit.test_router_safety import _fleet_inventory, _listed, pool  # noqa: F401 - pool is a fixture


def _keyless(pool):  # noqa: F811 - the fixture's value
    router, (a, b, _c) = pool
    a.key = b.key = None
    _listed(router, a, b)
    return router, a, b


def test_a_tuned_worker_is_out_of_the_router_during_the_tune_and_back_after(pool) -> None:  # noqa: F811
    router, a, b = _keyless(pool)
    said: list[str] = []
    inv = _fleet_inventory(router, a, b)
    with out_of_rotation(inv, "gpu-1", say=said.append, drain_timeout_s=2.0, back_ok=lambda: False):
        assert a.url not in router.workers and b.url in router.workers  # the restarts meet no client
    assert a.url in router.workers, said
    assert any("out of the router" in s for s in said) and any("back in the router" in s for s in said)


def test_an_interrupted_tune_comes_back_only_when_its_restore_was_read_back(pool) -> None:  # noqa: F811
    router, a, b = _keyless(pool)
    inv = _fleet_inventory(router, a, b)
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt), out_of_rotation(inv, "gpu-1", say=said.append, drain_timeout_s=2.0,
                                                           back_ok=lambda: False):
        raise KeyboardInterrupt
    assert a.url not in router.workers  # a trial release is not put in front of clients
    assert any("deploy router add gpu-1" in s for s in said)
    _listed(router, a)  # the operator put it back
    with pytest.raises(KeyboardInterrupt), out_of_rotation(inv, "gpu-2", say=said.append, drain_timeout_s=2.0,
                                                           back_ok=lambda: True):
        raise KeyboardInterrupt
    assert b.url in router.workers  # restored and read back: it serves again


def test_the_last_serving_worker_is_not_drained_for_a_tune_and_nothing_runs(pool) -> None:  # noqa: F811
    router, a, b = _keyless(pool)
    b.health = 503  # the other worker does not serve by its own /health
    ran = []
    with pytest.raises(CheckFailed, match="not removed"), \
            out_of_rotation(_fleet_inventory(router, a, b), "gpu-1", say=lambda _s: None, drain_timeout_s=1.0,
                            back_ok=lambda: True):
        ran.append(True)
    assert not ran and a.url in router.workers


def test_a_host_without_a_router_is_tuned_as_before() -> None:
    inv = _inventory(None)
    assert not routes_to(inv, "gpu-1")
    with out_of_rotation(inv, "gpu-1", say=lambda _s: None, drain_timeout_s=1.0, back_ok=lambda: False):
        pass


def test_an_up_plan_restarts_the_server_only_through_its_restarting_steps() -> None:
    """`up host` of a worker is drained only when its plan would change a step that restarts the server."""
    from orchestrator.commands.up import UpResult
    from orchestrator.fleet.rotation import restarting_changes
    from orchestrator.runlog import StepRecord
    from orchestrator.runner import RunReport

    def plan(*steps: tuple[str, str]) -> UpResult:
        return UpResult(RunReport(host="gpu-1", playbook="up", dry_run=True,
                                  steps=[StepRecord(name, status) for name, status in steps]))  # type: ignore[arg-type]

    assert restarting_changes(plan(("connect", "ok"), ("server_unit", "ok"), ("watchdog", "would-change"),
                                   ("model_weights", "would-change"))) == []
    assert restarting_changes(plan(("container", "would-change"), ("sglang_install", "ok"),
                                   ("server_unit", "would-change"))) == ["container", "server_unit"]
    assert restarting_changes(plan(("sglang_install", "would-change"))) == ["sglang_install"]
