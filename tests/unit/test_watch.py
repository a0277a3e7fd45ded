"""`deploy watch` (fleet/watch.py): the decision per host is pure; a cycle against the real tiny HTTP router and
workers of test_router_safety cordons a host with a fatal GPU fault, keeps it out while it is faulty, returns only
a host it cordoned itself once clean and serving, never drains the last serving worker, and posts each action to
the notify: webhook."""

from __future__ import annotations

from pathlib import Path

from orchestrator.fleet.watch import Reading, Watch, WatchState, decide
from orchestrator.hardware.catalog import Action
from orchestrator.hardware.state import GpuHealth, HardwareFault, HardwareState
from orchestrator.inventory.models import NotifySpec
from tests.unit.monitoring.test_notify import Receiver
from tests.unit.test_router_safety import _fleet_inventory, _listed, pool  # noqa: F401 - pool is a fixture

LOST = HardwareFault("lost", Action.reboot_host, "GPU has fallen off the bus", "nvidia-smi: GPU is lost", "NVML")
SLOW = HardwareFault("slowdown", Action.none, "clocks held down by HW Slowdown", "Clocks Event Reasons", "smi")


def hw(*faults: HardwareFault) -> HardwareState:
    return HardwareState(gpus=(GpuHealth("00000000:75:00.0", 2, tuple(faults)), GpuHealth("00000000:06:00.0", 0, ())))


def test_decisions() -> None:
    fatal, clean, warn = Reading("a", hw(LOST), True), Reading("a", hw(), True), Reading("a", hw(SLOW), True)
    assert decide(fatal, listed=True, cordoned=False) == "cordon"
    assert decide(fatal, listed=False, cordoned=True) == "hold"
    assert decide(clean, listed=False, cordoned=True) == "return"
    assert decide(warn, listed=True, cordoned=False) == "none"  # a slowdown is said by doctor, not cordoned
    assert decide(clean, listed=False, cordoned=False) == "none"  # out for another reason: not the watch's to return
    assert decide(Reading("a", hw(), False), listed=False, cordoned=True) == "hold"  # clean but not serving yet
    assert decide(Reading("a", None, False, "ssh failed"), listed=False, cordoned=True) == "hold"


def test_a_cycle_cordons_holds_and_returns(pool, tmp_path: Path) -> None:  # noqa: F811 - the fixture's value
    router, (a, b, _c) = pool
    a.key = b.key = None
    _listed(router, a, b)
    receiver = Receiver([200])
    inv = _fleet_inventory(router, a, b).model_copy(
        update={"notify": NotifySpec.model_validate({"webhook": {"url": receiver.url, "format": "json"}})})
    readings = {"gpu-1": Reading("gpu-1", hw(LOST), True), "gpu-2": Reading("gpu-2", hw(), True)}
    said: list[str] = []
    state = WatchState("g", tmp_path)
    watch = Watch(inv, ["gpu-1", "gpu-2"], lambda h: readings[h], said.append, state, drain_timeout_s=2.0)
    try:
        assert watch.cycle() == {"gpu-1": "cordon", "gpu-2": "none"}
        assert a.url not in router.workers and b.url in router.workers
        assert "gpu-1" in state.load() and oct(state.path.stat().st_mode & 0o777) == "0o600"
        assert watch.cycle()["gpu-1"] == "hold" and a.url not in router.workers
        readings["gpu-1"] = Reading("gpu-1", hw(), True)  # remedied
        assert watch.cycle()["gpu-1"] == "return" and a.url in router.workers and state.load() == {}
        kinds = [(e["alert"], e["resolved"]) for body in receiver.bodies for e in body["events"]]
        assert kinds == [("DeployGpuFault", False), ("DeployGpuFault", True)]
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
    assert any("gpu-1: cordoned (GPU 2 (00000000:75:00.0): lost (reboot_host))" in s for s in said), said


def test_the_last_serving_worker_is_not_cordoned(pool, tmp_path: Path) -> None:  # noqa: F811
    router, (a, b, _c) = pool
    a.key = b.key = None
    _listed(router, a, b)
    b.health = 503  # the other worker does not serve
    said: list[str] = []
    watch = Watch(_fleet_inventory(router, a, b), ["gpu-1"], lambda h: Reading(h, hw(LOST), True), said.append,
                  WatchState("g", tmp_path), drain_timeout_s=1.0)
    assert watch.cycle() == {"gpu-1": "cordon"}
    assert a.url in router.workers and WatchState("g", tmp_path).load() == {}
    assert any("gpu-1: NOT cordoned:" in s for s in said), said
