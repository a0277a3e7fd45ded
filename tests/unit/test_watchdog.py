"""The watchdog's decision (pure: samples in, action out), its state file as `status` reads it, its files."""

from __future__ import annotations

import json

from orchestrator.inventory.models import ServerProfile, WatchdogSettings
from orchestrator.parsers.watchdog import parse_installed, parse_watchdog_state
from orchestrator.probes.watchdog_probe import Config, Memory, Sample, decide, metric_sum
from orchestrator.render.watchdog import watchdog_config, watchdog_files

CFG = Config(stall_s=30, restart_budget=3, budget_window_s=3600)


def run(samples: list[Sample], mem: Memory | None = None, cfg: Config = CFG) -> tuple[list[str], Memory]:
    """Feed samples in order, as the timer would; the actions taken and the last memory."""
    mem = mem or Memory()
    actions = []
    for s in samples:
        d = decide(s, mem, cfg)
        actions.append(d.action)
        mem = d.memory
    return actions, mem


def serving(t: float, progress: float) -> Sample:
    return Sample(t, "active", True, True, "ok", progress, 0)


def stuck(t: float, progress: float = 500.0, in_flight: int = 4) -> Sample:
    return Sample(t, "active", True, True, "timeout", progress, in_flight)


def test_a_serving_server_is_left_alone() -> None:
    actions, mem = run([serving(t, 100 + t) for t in range(0, 600, 10)])
    assert set(actions) == {"none"} and mem.state == "ok" and mem.restarts == ()


def test_a_stall_is_restarted_once_it_lasted_stall_s() -> None:
    samples = [serving(0, 100), serving(10, 500)] + [stuck(t) for t in (20, 30, 40, 50)]
    actions, mem = run(samples)
    # last progress at t=10: 20, 30 are suspect, 40 is 30 s without progress
    assert actions == ["none", "none", "none", "none", "restart", "none"]
    assert mem.restarts == (40,) and mem.actions[0].action == "restart"
    assert "timed out" in mem.actions[0].reason and "4 request(s) in flight" in mem.actions[0].reason


def test_a_long_prefill_that_advances_the_counters_is_never_restarted() -> None:
    """The tiny generation waits behind a prefill for 5 minutes, but the prefill counter moves every check."""
    samples = [Sample(t, "active", True, True, "timeout", 1000.0 + 37 * t, 2) for t in range(0, 300, 10)]
    actions, mem = run(samples)
    assert set(actions) == {"none"} and mem.state == "ok" and "counters advance" in mem.reason


def test_health_failing_during_a_prefill_with_moving_counters_is_not_a_stall() -> None:
    samples = [Sample(t, "active", True, False, "skipped", 1000.0 + 37 * t, 1) for t in range(0, 300, 10)]
    assert set(run(samples)[0]) == {"none"}


def test_health_failing_with_frozen_counters_while_the_port_answers_is_a_stall() -> None:
    samples = [serving(0, 100)] + [Sample(t, "active", True, False, "skipped", 100.0, 3) for t in range(10, 60, 10)]
    actions, _ = run(samples)
    assert actions.count("restart") == 1


def test_without_counters_a_failing_health_is_not_acted_on() -> None:
    samples = [serving(0, 100)] + [Sample(t, "active", True, False, "skipped", None, None) for t in range(10, 300, 10)]
    actions, mem = run(samples)
    assert set(actions) == {"none"} and "enable-metrics" in mem.reason


def test_a_starting_server_restarts_the_clock() -> None:
    """Loading (port closed) takes minutes; the first timed-out probe after it must not count that time."""
    samples = [Sample(t, "active", False, False, "skipped") for t in range(0, 600, 10)] + [stuck(600), stuck(610)]
    actions, mem = run(samples)
    assert set(actions) == {"none"} and mem.state == "suspect"


def test_a_warm_up_longer_than_stall_s_is_waiting_never_a_stall() -> None:
    """sglang opens its port, then answers /health 503 until warm-up ends, with counters that do not move."""
    samples = [Sample(t, "active", True, False, "skipped", 0.0, 0, "inv-a") for t in range(0, 300, 10)]
    actions, mem = run(samples)
    assert set(actions) == {"none"} and mem.state == "waiting" and "since it started" in mem.reason


def test_a_new_start_of_the_unit_voids_what_the_last_one_left() -> None:
    """Progress last seen at t=0 under one start must not make the next start's first slow probe a long stall."""
    first = Sample(0, "active", True, True, "ok", 100.0, 0, "inv-a")
    later = [Sample(t, "active", True, True, "timeout", 100.0, 1, "inv-b") for t in (200, 210)]
    actions, mem = run([first, *later])
    assert set(actions) == {"none"} and mem.state == "suspect" and mem.invocation == "inv-b"


def test_a_dead_unit_is_systemds_business() -> None:
    samples = [Sample(t, "failed", False, False, "skipped") for t in range(0, 300, 10)]
    actions, mem = run(samples)
    assert set(actions) == {"none"} and mem.state == "waiting" and "failed" in mem.reason


def test_budget_exhausted_gives_up_once_and_stays_exhausted() -> None:
    mem = Memory()
    t = 0.0
    actions: list[str] = []
    for _ in range(3):  # each round: serve, then stall for 40 s
        got, mem = run([serving(t, t)] + [stuck(t + dt, progress=t) for dt in (10, 20, 30, 40)], mem)
        actions += got
        t += 100
    # the fourth stall lasts ten minutes: one give-up, said once, then quiet
    got, mem = run([serving(t, t)] + [stuck(t + dt, progress=t) for dt in range(10, 600, 10)], mem)
    actions += got
    assert actions.count("restart") == 3 and actions.count("give-up") == 1
    assert mem.state == "exhausted" and "budget" in mem.reason
    assert [a.action for a in mem.actions] == ["restart", "restart", "restart", "gave-up"]
    # an hour after the first restart the budget has room again
    later, mem = run([stuck(3700 + dt, progress=400) for dt in (0, 10, 20, 30, 40)], mem)
    assert later.count("restart") == 1 and mem.restarts == (230, 3730)  # the older ones left the window


def test_budget_zero_never_restarts() -> None:
    actions, mem = run([serving(0, 1)] + [stuck(t, 1) for t in range(10, 100, 10)],
                       cfg=Config(stall_s=30, restart_budget=0))
    assert "restart" not in actions and mem.state == "exhausted"


def test_state_file_round_trip_as_status_reads_it() -> None:
    samples = [serving(0, 1)] + [stuck(t, 1) for t in range(10, 40, 10)]
    _, mem = run(samples)
    wd = parse_watchdog_state(mem.to_json())
    assert wd.state == "restarted" and wd.restarts_in_window == 1 and wd.budget == 3
    assert wd.to_dict()["actions"][0]["action"] == "restart" and wd.to_dict()["last_check"].endswith("Z")
    assert Memory.from_dict(json.loads(mem.to_json())) == mem
    assert parse_watchdog_state(None).state == "absent"
    assert parse_watchdog_state("garbage").state == "unreadable"


def test_progress_counters_read_as_real_sglang_names_them() -> None:
    text = ('# TYPE sglang:realtime_tokens_total counter\n'
            'sglang:realtime_tokens_total{mode="prefill_compute",model_name="glm-5"} 100.0\n'
            'sglang:realtime_tokens_total{mode="decode",model_name="glm-5"} 20.0\n'
            'sglang:generation_tokens_total{model_name="glm-5"} 7.0\n'
            'sglang:num_running_reqs{model_name="glm-5"} 3.0\nsglang:num_queue_reqs{model_name="glm-5"} 1.0\n'
            'sglang:gen_throughput{model_name="glm-5"} 55.0\n')
    assert metric_sum(text, ("sglang:realtime_tokens_total", "sglang:generation_tokens_total")) == 127.0
    assert metric_sum(text, ("sglang:num_running_reqs", "sglang:num_queue_reqs")) == 4.0
    assert metric_sum("", ("sglang:num_running_reqs",)) is None


def test_rendered_files_and_the_installed_fact() -> None:
    profile = ServerProfile.model_validate({"model_path": "/models/GLM-5-NVFP4", "served_model_name": "glm-5",
                                            "sglang_version": "0.5.12.post1"})
    files = {f.name: f for f in watchdog_files(profile)}
    assert "ExecStart=/root/ml-env/bin/python /var/lib/deploy/watchdog/watchdog.py" in \
        files["sglang-watchdog.service"].content
    assert "OnUnitActiveSec=10" in files["sglang-watchdog.timer"].content
    cfg = watchdog_config(profile)
    assert cfg["restart_budget"] == 3 and cfg["base"] == "http://127.0.0.1:8000" and "key" not in json.dumps(cfg)
    assert Config(**cfg).stall_s == 30.0  # the program reads exactly what is rendered
    assert files["config.json"].mode == 0o600 and files["watchdog.py"].mode == 0o600
    lines = "".join(f"{f.remote_path} {f.mode:o} {f.sha256}\n" for f in files.values()) + "timer active enabled\n"
    installed = parse_installed(lines)
    assert all(installed.matches(f.remote_path, f.mode, f.sha256) for f in files.values())
    assert installed.timer_active == "active"
    assert WatchdogSettings().restart_budget == 3 and WatchdogSettings().budget_window_s == 3600
