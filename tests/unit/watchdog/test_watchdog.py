"""The watchdog's decision (pure: samples in, action out), its state file as `status` reads it, its files."""

from __future__ import annotations

import json

from orchestrator.inventory.models import ServerProfile, WatchdogSettings
from orchestrator.watchdog.parse import RESULT_MARK, parse_installed, parse_watchdog_fact, parse_watchdog_state
from orchestrator.watchdog.probe import (
    Config,
    Memory,
    Sample,
    count_established,
    decide,
    load_memory,
    metric_sum,
    port_of,
)
from orchestrator.watchdog.render import watchdog_config, watchdog_files

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


def busy_blind(t: float, clients: int | None) -> Sample:
    """enable-metrics off (/metrics 404: no counters, no in-flight gauges) and the tiny generation timed out."""
    return Sample(t, "active", True, True, "timeout", None, None, "inv-a", clients)


def test_without_counters_a_timeout_behind_a_long_queue_is_waiting_never_a_stall() -> None:
    """Issue 38 item 4: a healthy server with a long queue and no counters was restarted after stall_s."""
    samples = [serving(0, 1)] + [busy_blind(t, 40) for t in range(10, 600, 10)]
    actions, mem = run(samples)
    assert set(actions) == {"none"} and mem.state == "waiting" and mem.restarts == ()
    assert "40 client connection(s) are open" in mem.reason and "enable-metrics off" in mem.reason
    # Said once when the cause of the waiting changes, not at every check nor for another count of clients.
    loading = Sample(0, "active", True, False, "skipped", None, None, "inv-a", 0)
    first = decide(loading, Memory(), CFG)
    busy = decide(busy_blind(10, 4), first.memory, CFG)
    assert first.say.startswith("waiting: the server has not answered /health") and busy.memory.state == "waiting"
    assert busy.say.startswith("waiting: the tiny generation timed out while 4 client connection(s) are open")
    assert decide(busy_blind(20, 7), busy.memory, CFG).say == ""
    # Connections that cannot be read are no evidence that nothing is queued.
    actions, mem = run([serving(0, 1)] + [busy_blind(t, None) for t in range(10, 300, 10)])
    assert set(actions) == {"none"} and "cannot be read" in mem.reason


def test_without_counters_an_idle_server_that_cannot_answer_one_token_is_a_stall_once_its_clients_left() -> None:
    """The stall clock starts when the last client is gone, not when the first probe timed out behind a queue."""
    samples = [serving(0, 1)] + [busy_blind(t, 3) for t in range(10, 200, 10)] + \
        [busy_blind(t, 0) for t in range(200, 260, 10)]
    actions, mem = run(samples)
    assert actions.index("restart") == 22  # t=220: 30 s after the last check that saw a client (t=190)
    assert mem.restarts[0] == 220 and "with no client connected" in mem.actions[0].reason


def test_counters_frozen_while_clients_are_connected_are_still_a_stall() -> None:
    """With counters the queue is visible: a hung scheduler with clients waiting is restarted as before."""
    samples = [serving(0, 100)] + [Sample(t, "active", True, True, "timeout", 100.0, 8, "", 8) for t in
                                   range(10, 60, 10)]
    assert run(samples)[0].count("restart") == 1


def test_open_clients_are_counted_from_the_tcp_table() -> None:
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    tcp = header + (
        "   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1\n"  # listen
        "   1: 0100007F:1F40 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 2\n"  # client
        "   2: 0100007F:D431 0100007F:1F40 01 00000000:00000000 00:00000000 00000000     0        0 3\n"  # its end
        "   3: 0100007F:1F40 0100007F:D432 06 00000000:00000000 00:00000000 00000000     0        0 4\n")  # closed
    tcp6 = header + ("   0: 00000000000000000000000000000000:1F40 0000000000000000FFFF00000A000002:9C40 01 "
                     "00000000:00000000 00:00000000 00000000     0        0 5\n")  # the router, over IPv6
    assert port_of("http://127.0.0.1:8000") == 8000 and port_of("http://[::1]:30000/") == 30000
    assert count_established([tcp, tcp6], 8000) == 2 and count_established([tcp], 9000) == 0


def test_a_state_file_of_the_wrong_json_type_is_no_state_and_said(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 38 LOW: `[]`, `"x"`, `3` raised AttributeError in every check, so the watchdog never ran again."""
    path = tmp_path / "state.json"
    assert load_memory(str(path)) == (Memory(), "")  # never written: a fresh state, nothing to say
    for text in ("[]", '"x"', "3", "null", '{"progress_at": "soon"}', '{"actions": [1]}', "{oops"):
        path.write_text(text)
        mem, said = load_memory(str(path))
        assert mem == Memory() and "is not the watchdog's state" in said and str(path) in said, text
        decide(serving(0, 1), mem, CFG)  # and the check goes on with it
    path.write_text(Memory(state="ok", progress_at=5.0).to_json())
    assert load_memory(str(path)) == (Memory(state="ok", progress_at=5.0), "")


def test_status_reads_a_failing_watchdog_from_its_last_result() -> None:
    good = Memory(state="ok").to_json()
    assert parse_watchdog_fact(f"{good}\n{RESULT_MARK}\nsuccess\n").failing == ""
    failed = parse_watchdog_fact(f"{good}\n{RESULT_MARK}\nexit-code\n")
    assert failed.last_run == "exit-code" and "Result=exit-code" in failed.failing
    assert failed.to_dict()["failing"] == failed.failing
    stale = parse_watchdog_fact(f"[]\n{RESULT_MARK}\nsuccess\n")
    assert stale.state == "unreadable" and "not the watchdog's JSON" in stale.failing
    never = parse_watchdog_fact(f"\n{RESULT_MARK}\nsuccess\n")
    assert never.state == "absent" and never.failing == "" and never.last_run == ""
    assert parse_watchdog_fact(good).state == "ok"  # the bare state file (an older fact) still reads


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
    assert installed.timer_active == "active" and installed.last_run == ""
    assert parse_installed(lines + "last exit-code\n").last_run == "exit-code"
    assert WatchdogSettings().restart_budget == 3 and WatchdogSettings().budget_window_s == 3600
