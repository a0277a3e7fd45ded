"""`deploy watch` (fleet/watch.py): the decision per host is pure; a cycle against the real tiny HTTP router and
workers of test_router_safety cordons a host with a fatal GPU fault, keeps it out while it is faulty, returns only
a host it cordoned itself once clean and serving, never drains the last serving worker, and posts each action to
the notify: webhook."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import CheckFailed
from orchestrator.fleet.watch import Reading, Watch, WatchState, decide
from orchestrator.hardware.catalog import Action
from orchestrator.hardware.state import GpuHealth, HardwareFault, HardwareState
from orchestrator.inventory.models import HealthPolicy, NotifySpec
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
    assert decide(clean, listed=False, cordoned=True, failed=True) == "verify"  # its remedy failed: verify first
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


XID13 = HardwareFault("xid", Action.restart_unit, "Xid 13 ROBUST_CHANNEL_GR_EXCEPTION", "NVRM: Xid 13", "NVIDIA",
                      code=13)
REMAP_FAILED = HardwareFault("remap-failed", Action.isolate_gpu, "a row remapping failed", "Remapping Failure", "NVML")


def cursor_hw(*faults: HardwareFault, cursor: str = "s=b1;i=4") -> HardwareState:
    return HardwareState(gpus=hw(*faults).gpus, cursor=cursor)


class Remedies:
    """The remedy runner the CLI gives the watch (playbooks remedy-*), as a record of what was asked: a remedy
    that works clears the host's reading, one that fails raises as a failed playbook does."""

    def __init__(self, readings: dict[str, Reading], fail: str | None = None) -> None:
        self.readings, self.fail, self.asked = readings, fail, []  # type: list[tuple[str, str, str | None]]

    def __call__(self, host: str, kind: str, cursor: str | None) -> str:
        self.asked.append((host, kind, cursor))
        if self.fail:
            raise CheckFailed(self.fail, fix="`pct start 101` on the node", host=host)
        self.readings[host] = Reading(host, hw(), True)
        return "health: healthy after 3.0 s; smoke: ok"


@dataclass
class Setup:
    """One watch over gpu-1 (the faulty host) and gpu-2 (clean), both listed by the fake router unless told."""

    router: Any
    a: Any
    watch: Watch
    readings: dict[str, Reading]
    remedies: Remedies
    said: list[str] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)


def _setup(pool, tmp_path: Path, monkeypatch, fault: HardwareFault, health: HealthPolicy,  # noqa: F811
           fail: str | None = None, listed: bool = True) -> Setup:
    router, (a, b, _c) = pool
    a.key = b.key = None
    if listed:
        _listed(router, a, b)
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path / "state"))
    readings = {"gpu-1": Reading("gpu-1", cursor_hw(fault), True), "gpu-2": Reading("gpu-2", hw(), True)}
    remedies = Remedies(readings, fail)
    inv = _fleet_inventory(router, a, b).model_copy(update={"health": health})
    said: list[str] = []
    events: list[tuple[str, str, str]] = []
    watch = Watch(inv, ["gpu-1", "gpu-2"], lambda h: readings[h], said.append, WatchState("g", tmp_path),
                  drain_timeout_s=2.0, remedy=remedies, record=lambda *e: events.append(e))
    return Setup(router, a, watch, readings, remedies, said, events)


def test_a_restart_class_xid_is_drained_restarted_and_returned_in_one_cycle(pool, tmp_path, monkeypatch) -> None:  # noqa: F811
    t = _setup(pool, tmp_path, monkeypatch, XID13, HealthPolicy())
    assert t.watch.cycle() == {"gpu-1": "return", "gpu-2": "none"}
    assert t.remedies.asked == [("gpu-1", "restart", "s=b1;i=4")]  # the cursor of the reading it answers
    assert t.a.url in t.router.workers and t.watch.state.load() == {}
    assert [e[1] for e in t.events] == ["cordoned", "remedy", "remedied", "returned"], t.events
    assert any(s.startswith("gpu-1: remedied (restart) in ") for s in t.said), t.said


def test_a_reboot_fault_stays_out_when_the_policy_does_not_allow_it(pool, tmp_path, monkeypatch) -> None:  # noqa: F811
    t = _setup(pool, tmp_path, monkeypatch, LOST, HealthPolicy())
    assert t.watch.cycle()["gpu-1"] == "cordon" and t.watch.cycle()["gpu-1"] == "hold"
    assert t.remedies.asked == [] and t.a.url not in t.router.workers
    assert any("a reboot is not automatic (health.reboot: false)" in s for s in t.said), t.said


def test_an_allowed_reboot_runs_once_and_returns_the_host(pool, tmp_path, monkeypatch) -> None:  # noqa: F811
    t = _setup(pool, tmp_path, monkeypatch, LOST, HealthPolicy(reboot=True))
    assert t.watch.cycle()["gpu-1"] == "return"
    assert t.remedies.asked == [("gpu-1", "reboot", "s=b1;i=4")] and t.a.url in t.router.workers


def test_no_reboot_while_another_host_is_out(pool, tmp_path, monkeypatch) -> None:  # noqa: F811
    t = _setup(pool, tmp_path, monkeypatch, LOST, HealthPolicy(reboot=True), listed=False)
    t.watch.state.save({"gpu-1": {"since": "earlier", "why": "lost", "url": t.a.url}})  # cordoned; gpu-2 out too
    assert t.watch.cycle()["gpu-1"] == "hold" and t.remedies.asked == []
    assert any("the reboot waits: gpu-2 is out of the router too" in s for s in t.said), t.said


def test_a_failed_remedy_leaves_the_host_out_and_is_not_retried(pool, tmp_path, monkeypatch) -> None:  # noqa: F811
    t = _setup(pool, tmp_path, monkeypatch, LOST, HealthPolicy(reboot=True),
               fail="after the reboot CT 101 is stopped, not running")
    assert t.watch.cycle()["gpu-1"] == "hold" and t.watch.cycle()["gpu-1"] == "hold"
    assert len(t.remedies.asked) == 1 and t.a.url not in t.router.workers
    line = next(s for s in t.said if "remedy FAILED" in s)
    assert line == ("gpu-1: remedy FAILED (reboot): after the reboot CT 101 is stopped, not running; the host stays "
                    "out of the router: `pct start 101` on the node; the watch returns it once its sensors read "
                    "clean and it serves")
    assert [e[1] for e in t.events] == ["cordoned", "remedy", "remedy-failed"]
    t.readings["gpu-1"] = Reading("gpu-1", hw(), True)  # the operator fixed it
    assert t.watch.cycle()["gpu-1"] == "return" and t.a.url in t.router.workers


def test_a_host_whose_remedy_failed_is_verified_again_before_it_returns(pool, tmp_path, monkeypatch) -> None:  # noqa: F811
    """A remedy failed on P2P under load (a link below its capability under the copies): idle and out of the router,
    the host reads clean and serves, so it goes back only once the remedy's verification passes."""
    t = _setup(pool, tmp_path, monkeypatch, LOST, HealthPolicy(reboot=True),
               fail="P2P under load failed: PCIe links under load FAIL: GPU 5 (slot 00000000:85:00.0)")
    checks: list[str] = []
    verdict = ["P2P under load failed: PCIe links under load FAIL: GPU 5 (slot 00000000:85:00.0)"]

    def verify(host: str) -> str:
        checks.append(host)
        if verdict:
            raise CheckFailed(verdict[0], fix="reboot the node to retrain the link", host=host)
        return "p2p_bandwidth: PCIe links under load: 8 of 8 GPU(s) at their capability"

    t.watch.verify = verify
    assert t.watch.cycle()["gpu-1"] == "hold"  # the reboot ran, its verification failed
    t.readings["gpu-1"] = Reading("gpu-1", hw(), True)  # idle and out of the router, the link is not judged
    assert t.watch.cycle()["gpu-1"] == "hold" and checks == ["gpu-1"] and t.a.url not in t.router.workers
    assert any("reads clean and serves, but the verification its failed reboot remedy needs fails: P2P under load "
               "failed" in s for s in t.said), t.said
    verdict.clear()  # the operator reseated the riser
    assert t.watch.cycle()["gpu-1"] == "return" and t.a.url in t.router.workers and len(t.remedies.asked) == 1
    assert [e[1] for e in t.events] == ["cordoned", "remedy", "remedy-failed", "verified", "returned"], t.events


def test_a_failed_remap_keeps_the_host_out_even_where_reboots_are_allowed(pool, tmp_path, monkeypatch) -> None:  # noqa: F811
    t = _setup(pool, tmp_path, monkeypatch, REMAP_FAILED, HealthPolicy(reboot=True))
    assert t.watch.cycle()["gpu-1"] == "cordon" and t.watch.cycle()["gpu-1"] == "hold"
    assert t.remedies.asked == [] and t.a.url not in t.router.workers
    assert any("GPU 2 (00000000:75:00.0) cannot be repaired in place (isolate_gpu)" in s for s in t.said), t.said
