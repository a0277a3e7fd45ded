"""The `watchdog` step of `up`: installs the timer, unit, config and program when they differ; a no-op after."""

from __future__ import annotations

import base64

import pytest

from orchestrator.errors import RemoteError
from orchestrator.watchdog.render import watchdog_files


def installed_lines(run) -> str:
    files = watchdog_files(run.ctx.profile)
    return "".join(f"{f.remote_path} {f.mode:o} {f.sha256}\n" for f in files) + "timer active enabled\n"


def test_a_fresh_container_gets_the_watchdog_in_one_round_trip(make_run) -> None:
    run = make_run({}, {"watchdog": "timer inactive disabled\n"})
    run.node.answer("sglang-watchdog.timer", "active\n")
    record = run.step("watchdog")
    assert record.status == "changed" and "every 10 s" in record.summary
    [script] = run.node.commands()
    assert "systemctl enable --quiet sglang-watchdog.timer" in script
    assert "chmod 0700 /var/lib/deploy/watchdog" in script
    timer = next(f for f in watchdog_files(run.ctx.profile) if f.name == "sglang-watchdog.timer")
    assert base64.b64encode(timer.content.encode()).decode() in script


def test_a_converged_watchdog_is_left_alone(make_run) -> None:
    run = make_run({}, {"watchdog": ""})
    run = make_run({}, {"watchdog": installed_lines(run)})
    record = run.step("watchdog")
    assert record.status == "ok" and record.summary.startswith("watchdog installed and active")
    assert run.node.calls == []


def test_a_timer_that_does_not_start_fails_the_step(make_run) -> None:
    run = make_run({}, {"watchdog": ""})
    run.node.answer("sglang-watchdog.timer", "failed\n", rc=3)
    with pytest.raises(RemoteError) as err:
        run.step("watchdog")
    assert "did not start" in err.value.what and "systemctl status sglang-watchdog.timer" in err.value.fix


def test_a_plan_changes_nothing(make_run) -> None:
    run = make_run({}, {"watchdog": ""}, dry_run=True)
    assert run.step("watchdog").status == "would-change" and run.node.calls == []


def test_up_says_what_a_watchdog_without_token_counters_can_do(make_run) -> None:
    """Issue 38 item 4: without enable-metrics the watchdog restarts only a server with no client connected."""
    run = make_run({}, {"watchdog": ""})
    with_counters = make_run({}, {"watchdog": installed_lines(run)})
    assert with_counters.ctx.profile.flags.get("enable-metrics") is True
    record = with_counters.step("watchdog")
    assert "enable-metrics off" not in record.summary and record.details["token_counters"] is True
    blind = make_run({}, {"watchdog": installed_lines(run)})
    blind.ctx.profile = blind.ctx.profile.model_copy(
        update={"flags": {k: v for k, v in blind.ctx.profile.flags.items() if k != "enable-metrics"}})
    record = blind.step("watchdog")
    assert "enable-metrics off: no token counters, so it restarts only a server that fails with no client " \
           "connected" in record.summary and record.details["token_counters"] is False


def test_up_warns_of_a_watchdog_whose_last_check_failed(make_run) -> None:
    run = make_run({}, {"watchdog": ""})
    failed = make_run({}, {"watchdog": installed_lines(run) + "last exit-code\n"})
    record = failed.step("watchdog")
    assert record.status == "ok" and "but its last check failed (Result=exit-code)" in record.summary
