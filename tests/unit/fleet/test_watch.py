"""`deploy watch` (fleet/watch.py): the decision per host is pure; a cycle against the handler router and workers of
test_router_safety (passed as its HTTP transport, no socket) cordons a host with a fatal GPU fault, keeps it out
while it is faulty, returns only a host it cordoned itself once clean and serving, never drains the last serving
worker, and posts each action to the notify: webhook."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import CheckFailed
from orchestrator.fleet.watch import Reading, Watch, WatchState, decide
from orchestrator.hardware.catalog import Action
from orchestrator.hardware.state import GpuHealth, HardwareFault, HardwareState
from orchestrator.inventory.models import HealthPolicy, NotifySpec
from tests.unit.fleet.test_router_safety import _fleet_inventory, _listed, pool  # noqa: F401 - pool is a fixture
from tests.unit.monitoring.test_notify import Receiver

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
    receiver = Receiver([200], router.net)
    inv = _fleet_inventory(router, a, b).model_copy(
        update={"notify": NotifySpec.model_validate({"webhook": {"url": receiver.url, "format": "json"}})})
    readings = {"gpu-1": Reading("gpu-1", hw(LOST), True), "gpu-2": Reading("gpu-2", hw(), True)}
    said: list[str] = []
    state = WatchState("g", tmp_path)
    watch = Watch(inv, ["gpu-1", "gpu-2"], lambda h: readings[h], said.append, state, drain_timeout_s=2.0,
                  http=router.http)
    assert watch.cycle() == {"gpu-1": "cordon", "gpu-2": "none"}
    assert a.url not in router.workers and b.url in router.workers
    assert "gpu-1" in state.load() and oct(state.path.stat().st_mode & 0o777) == "0o600"
    assert watch.cycle()["gpu-1"] == "hold" and a.url not in router.workers
    readings["gpu-1"] = Reading("gpu-1", hw(), True)  # remedied
    assert watch.cycle()["gpu-1"] == "return" and a.url in router.workers and state.load() == {}
    kinds = [(e["alert"], e["resolved"]) for body in receiver.bodies for e in body["events"]]
    assert kinds == [("DeployGpuFault", False), ("DeployGpuFault", True)]
    assert any("gpu-1: cordoned (GPU 2 (00000000:75:00.0): lost (reboot_host))" in s for s in said), said


def test_the_last_serving_worker_is_not_cordoned(pool, tmp_path: Path) -> None:  # noqa: F811
    router, (a, b, _c) = pool
    a.key = b.key = None
    _listed(router, a, b)
    b.health = 503  # the other worker does not serve
    said: list[str] = []
    watch = Watch(_fleet_inventory(router, a, b), ["gpu-1"], lambda h: Reading(h, hw(LOST), True), said.append,
                  WatchState("g", tmp_path), drain_timeout_s=1.0, http=router.http)
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
                  drain_timeout_s=2.0, remedy=remedies, record=lambda *e: events.append(e), http=router.http)
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


# ------------------------------------------------------------------------------------------------ issue 50 item 1
def _again(t: Setup, tmp_path: Path) -> Watch:
    """A new watch process over the same state file and hosts (the one before it was killed)."""
    old = t.watch
    return Watch(old.inventory, old.hosts, old.read, t.said.append, WatchState("g", tmp_path),
                 drain_timeout_s=2.0, remedy=t.remedies, record=old.record, http=old.http)


def test_a_watch_killed_mid_cordon_leaves_the_host_to_its_next_cycle(pool, tmp_path, monkeypatch) -> None:  # noqa: F811
    """Ctrl-C after the router removed the host, before the drain's wait ended: the cordon was recorded before the
    drain, so the next watch owns the host: it remedies it and puts it back (before: nothing recorded, the host out
    of the router for good while every later cycle said nothing)."""
    t = _setup(pool, tmp_path, monkeypatch, XID13, HealthPolicy())

    def killed(self, url, began):  # the drain's wait for the removed worker's requests, interrupted
        raise KeyboardInterrupt

    monkeypatch.setattr("orchestrator.router.drain.Drainer._router_drain", killed)
    with pytest.raises(KeyboardInterrupt):
        t.watch.cycle()
    assert t.a.url not in t.router.workers and t.remedies.asked == []
    assert t.watch.state.load()["gpu-1"]["phase"] == "cordoning"
    monkeypatch.undo()
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path / "state"))
    assert _again(t, tmp_path).cycle()["gpu-1"] == "return"
    assert t.remedies.asked == [("gpu-1", "restart", "s=b1;i=4")] and t.a.url in t.router.workers
    assert t.watch.state.load() == {}


def test_a_watch_killed_mid_remedy_runs_the_remedy_again_next_cycle(pool, tmp_path, monkeypatch) -> None:  # noqa: F811
    """Killed while the remedy ran (recorded before it ran, as unfinished): the next cycle runs it again, and a host
    that reads clean after an interrupted remedy is verified before it goes back."""
    t = _setup(pool, tmp_path, monkeypatch, XID13, HealthPolicy())
    real = t.remedies.__call__

    def killed(host: str, kind: str, cursor: str | None) -> str:
        t.remedies.asked.append((host, kind, cursor))
        raise KeyboardInterrupt

    t.watch.remedy = killed
    with pytest.raises(KeyboardInterrupt):
        t.watch.cycle()
    entry = t.watch.state.load()["gpu-1"]
    assert entry["remedy"] == "restart" and entry.get("remedying") and t.a.url not in t.router.workers
    assert _again(t, tmp_path).cycle()["gpu-1"] == "return"
    assert t.remedies.asked == [("gpu-1", "restart", "s=b1;i=4")] * 2 and t.a.url in t.router.workers
    assert real is not None
    # The same kill, but the remedy had worked: the host reads clean and serves; it is verified, then returned.
    t.readings["gpu-1"] = Reading("gpu-1", cursor_hw(XID13), True)
    t.watch = _again(t, tmp_path)
    t.watch.remedy = killed
    with pytest.raises(KeyboardInterrupt):
        t.watch.cycle()
    t.readings["gpu-1"] = Reading("gpu-1", hw(), True)
    checked: list[str] = []
    nxt = _again(t, tmp_path)
    nxt.verify = lambda host: checked.append(host) or "smoke: ok"
    assert nxt.cycle()["gpu-1"] == "return" and checked == ["gpu-1"] and t.a.url in t.router.workers


def test_a_faulty_host_listed_then_missing_is_the_watchs_own(pool, tmp_path, monkeypatch) -> None:  # noqa: F811
    """A watch of the earlier code (or one killed between the router's removal and its record) left no entry: the
    router listed the host at the last cycle, and it is out now with an open fault, so this watch owns it."""
    t = _setup(pool, tmp_path, monkeypatch, LOST, HealthPolicy())
    t.readings["gpu-1"] = Reading("gpu-1", hw(), True)
    assert t.watch.cycle()["gpu-1"] == "none"  # listed and clean: recorded as listed
    del t.router.workers[t.a.url]  # out of the router, by a drain whose record was lost
    t.readings["gpu-1"] = Reading("gpu-1", cursor_hw(XID13), True)
    assert t.watch.cycle()["gpu-1"] == "return" and t.a.url in t.router.workers
    assert any("gpu-1: out of the router since the last cycle with an open fault" in s for s in t.said), t.said


def test_a_non_object_entry_in_the_state_file_is_a_clear_error(tmp_path: Path) -> None:
    from orchestrator.errors import ConfigError

    state = WatchState("g", tmp_path)
    tmp_path.mkdir(exist_ok=True)
    state.path.write_text('{"gpu-1": ["cordoned"]}')
    state.path.chmod(0o600)
    with pytest.raises(ConfigError, match=r"the entry for gpu-1 is a JSON list, not an object") as err:
        state.load()
    assert "rm " in (err.value.fix or "")


def test_status_reports_a_host_cordoned_by_a_watch_that_stopped(tmp_path: Path, monkeypatch) -> None:
    from orchestrator.fleet.watch import orphaned

    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path))
    state = WatchState("g")
    state.save({"gpu-1": {"since": "2026-12-07T10:00:00+0000", "why": "GPU 2: xid 79", "url": "http://x"}},
               {"gpu-2"}, 30.0)
    import time as _t

    assert orphaned("g") == []  # its last cycle just ended: a timer's watch between runs
    later = _t.time() + 600
    found = orphaned("g", now=later)
    assert [o.host for o in found] == ["gpu-1"]
    assert "cordoned by a deploy watch of group g that is not running" in found[0].text("g")
    state.save(state.load(), {"gpu-2"}, 30.0, loop=True)  # a looping watch whose live mark is free: it is gone
    assert [o.host for o in orphaned("g")] == ["gpu-1"]
    live = state.hold_live()  # a running watch owns it
    try:
        assert orphaned("g", now=later) == []
        from orchestrator.errors import LockHeld

        with pytest.raises(LockHeld, match="another deploy watch of this group runs"):
            WatchState("g").hold_live()
    finally:
        import os as _os

        _os.close(live)


class Hanging:
    """A receiver that accepts the connection and never answers."""

    def __init__(self) -> None:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def close(self) -> None:
        self.sock.close()


def test_a_hanging_webhook_does_not_hold_up_the_watch(pool, tmp_path, monkeypatch) -> None:  # noqa: F811
    """retries 10 x timeout 60 s to a receiver that never answers (~1,700 s a post before): the cycle cordons,
    remedies and returns within seconds; the posts go on off its thread, each bounded."""
    import time as _t

    from orchestrator.monitoring.notify import Notifier

    hang = Hanging()
    t = _setup(pool, tmp_path, monkeypatch, XID13, HealthPolicy())
    t.watch.inventory = t.watch.inventory.model_copy(update={"notify": NotifySpec.model_validate(
        {"webhook": {"url": hang.url, "retries": 10, "timeout_s": 60}})})
    t.watch.notifier = notifier = Notifier(t.said.append)
    try:
        began = _t.monotonic()
        assert t.watch.cycle()["gpu-1"] == "return"
        took = _t.monotonic() - began
        closing = _t.monotonic()
        notifier.close(wait_s=1.0)
        assert _t.monotonic() - closing < 3.0
    finally:
        hang.close()
    assert took < 15.0, took  # the drain (2 s bound) and the fake remedy; no post waited on
    assert any("notify: stopped waiting for the receiver after 1 s" in s for s in t.said), t.said


def test_a_post_fits_its_time_budget(monkeypatch) -> None:
    import time as _t

    from orchestrator.monitoring.notify import post

    hang = Hanging()
    said: list[str] = []
    try:
        began = _t.monotonic()
        assert not post(hang.url, {"events": [1]}, retries=10, timeout_s=60, say=said.append, backoff_s=0.1,
                        budget_s=2.0)
        took = _t.monotonic() - began
    finally:
        hang.close()
    assert took < 4.0, took
    assert said and "did not take 1 event(s)" in said[0], said


def test_a_webhook_port_out_of_range_is_refused_at_load_and_never_raises(tmp_path: Path) -> None:
    """Port 99999 crashed every watch cycle (`receiver()`: ValueError: Port out of range); the inventory now
    refuses it, and a URL read from a secret file at post time is said, not raised."""
    from pydantic import ValidationError

    from orchestrator.monitoring.events import Event
    from orchestrator.monitoring.notify import deliver, receiver

    with pytest.raises(ValidationError, match="Port out of range"):
        NotifySpec.model_validate({"webhook": {"url": "http://127.0.0.1:99999/hook"}})
    secret = tmp_path / "hook"
    secret.write_text("http://127.0.0.1:99999/hook\n")
    secret.chmod(0o600)
    spec = NotifySpec.model_validate({"webhook": {"url": {"file": str(secret)}}})
    said: list[str] = []
    event = Event("gpu_fault", "gpu-1", None, 0.0, summary="s", description="d", diagnose="x", severity="critical")
    assert deliver(spec, [event], said.append) is False
    assert "Port out of range" in said[0], said
    assert receiver("http://127.0.0.1:99999/hook") == "http://127.0.0.1"
