"""A tune of a router worker takes it out of the router for its restarts (fleet/rotation.py), against the handler router
and workers of test_router_safety (passed as the HTTP transport, no socket): removed before the block, added back
after it only when the host runs a release that may serve, and never the last serving worker."""

from __future__ import annotations

import pytest

from orchestrator.commands.rotation import out_of_rotation, routes_to
from orchestrator.errors import CheckFailed
from tests.unit.fleet.test_router_answers import _inventory
from tests.unit.fleet.test_router_safety import _fleet_inventory, _listed, pool  # noqa: F401 - pool is a fixture


def _keyless(pool):  # noqa: F811 - the fixture's value
    router, (a, b, _c) = pool
    a.key = b.key = None
    _listed(router, a, b)
    return router, a, b


def test_a_tuned_worker_is_out_of_the_router_during_the_tune_and_back_after(pool) -> None:  # noqa: F811
    router, a, b = _keyless(pool)
    said: list[str] = []
    inv = _fleet_inventory(router, a, b)
    with out_of_rotation(inv, "gpu-1", say=said.append, drain_timeout_s=2.0, back_ok=lambda: False,
                         http=router.http):
        assert a.url not in router.workers and b.url in router.workers  # the restarts meet no client
    assert a.url in router.workers, said
    assert any("out of the router" in s for s in said) and any("back in the router" in s for s in said)


def test_an_interrupted_tune_comes_back_only_when_its_restore_was_read_back(pool) -> None:  # noqa: F811
    router, a, b = _keyless(pool)
    inv = _fleet_inventory(router, a, b)
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt), out_of_rotation(inv, "gpu-1", say=said.append, drain_timeout_s=2.0,
                                                           back_ok=lambda: False, http=router.http):
        raise KeyboardInterrupt
    assert a.url not in router.workers  # a trial release is not put in front of clients
    assert any("deploy router add gpu-1" in s for s in said)
    _listed(router, a)  # the operator put it back
    with pytest.raises(KeyboardInterrupt), out_of_rotation(inv, "gpu-2", say=said.append, drain_timeout_s=2.0,
                                                           back_ok=lambda: True, http=router.http):
        raise KeyboardInterrupt
    assert b.url in router.workers  # restored and read back: it serves again


def test_the_last_serving_worker_is_not_drained_for_a_tune_and_nothing_runs(pool) -> None:  # noqa: F811
    router, a, b = _keyless(pool)
    b.health = 503  # the other worker does not serve by its own /health
    ran = []
    with pytest.raises(CheckFailed, match="not removed"), \
            out_of_rotation(_fleet_inventory(router, a, b), "gpu-1", say=lambda _s: None, drain_timeout_s=1.0,
                            back_ok=lambda: True, http=router.http):
        ran.append(True)
    assert not ran and a.url in router.workers


def test_a_host_without_a_router_is_tuned_as_before() -> None:
    inv = _inventory(None)
    assert not routes_to(inv, "gpu-1")
    with out_of_rotation(inv, "gpu-1", say=lambda _s: None, drain_timeout_s=1.0, back_ok=lambda: False):
        pass


def test_an_up_plan_restarts_the_server_only_through_its_restarting_steps() -> None:
    """`up host` of a worker is drained only when its plan would change a step that restarts the server."""
    from orchestrator.commands.rotation import restarting_changes
    from orchestrator.commands.up import UpResult
    from orchestrator.engine.runner import RunReport
    from orchestrator.runlog import StepRecord

    def plan(*steps: tuple[str, str]) -> UpResult:
        return UpResult(RunReport(host="gpu-1", playbook="up", dry_run=True,
                                  steps=[StepRecord(name, status) for name, status in steps]))  # type: ignore[arg-type]

    assert restarting_changes(plan(("connect", "ok"), ("server_unit", "ok"), ("watchdog", "would-change"),
                                   ("model_weights", "would-change"))) == []
    assert restarting_changes(plan(("container", "would-change"), ("sglang_install", "ok"),
                                   ("server_unit", "would-change"))) == ["container", "server_unit"]
    assert restarting_changes(plan(("sglang_install", "would-change"))) == ["sglang_install"]


def test_a_lazy_drain_happens_at_the_first_restarting_step_and_an_interrupt_before_it_leaves_the_host_in(
        pool) -> None:  # noqa: F811
    """Issue 50, 6: `up host` / `roll host --profile` of a worker build the new stack beside the running server;
    the host is drained only as the first step that restarts it begins, so a Ctrl-C during the build leaves it in
    the router (before, it was drained first and left out, "it does not run a release that passed its checks")."""
    from orchestrator.commands.rotation import drain_before, drain_points

    assert drain_points(["sglang_install", "server_unit"]) == {"server_unit"}
    assert drain_points(["sglang_install"]) == {"server_unit"}  # a new stack: its restart is server_unit's
    assert drain_points(["container", "server_unit"]) == {"container", "server_unit"}
    router, a, b = _keyless(pool)
    inv = _fleet_inventory(router, a, b)
    said: list[str] = []
    seen: list[str] = []
    with pytest.raises(KeyboardInterrupt), out_of_rotation(inv, "gpu-1", say=said.append, drain_timeout_s=2.0,
                                                           back_ok=lambda: False, lazy=True,
                                                           http=router.http) as rotation:
        hook = drain_before(rotation, drain_points(["sglang_install", "server_unit"]),
                            lambda name, _r: seen.append(name))
        for step in ("connect", "container", "sglang_install"):
            hook(step, None)
        assert a.url in router.workers  # still serving while the stack builds
        raise KeyboardInterrupt
    assert a.url in router.workers and seen == ["connect", "container", "sglang_install"]
    assert not any("out of the router" in s for s in said), said
    with out_of_rotation(inv, "gpu-1", say=said.append, drain_timeout_s=2.0, back_ok=lambda: False,
                         lazy=True, http=router.http) as rotation:
        hook = drain_before(rotation, frozenset({"server_unit"}), None)
        hook("sglang_install", None)
        assert a.url in router.workers
        hook("server_unit", None)
        assert a.url not in router.workers  # out as the restart begins
        hook("server_unit", None)  # once only
    assert a.url in router.workers and any("back in the router" in s for s in said), said
