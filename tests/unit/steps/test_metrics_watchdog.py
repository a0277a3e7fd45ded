"""The metrics' watchdog reading comes from the `watchdog_state` fact's one parser (issue 34): the state file is
followed by the check's systemd Result in that fact, which a second parser of the raw text read as "unreadable"."""

from __future__ import annotations

import json

from orchestrator.engine.metrics import observe
from orchestrator.watchdog.parse import RESULT_MARK

STATE = {"state": "healthy", "reason": "", "last_check": 1764583810.0, "restarts": [1764583000.0], "budget": 3,
         "window_s": 3600, "actions": [{"at": 1764583000.0, "action": "restart", "reason": "health 000"}]}


def test_the_metrics_read_the_watchdogs_state_file_behind_its_result_line(make_run) -> None:
    run = make_run({}, {"watchdog_state": f"{json.dumps(STATE)}\n\n{RESULT_MARK}\nsuccess\n",
                        "current_release": ""})
    obs = observe(run.ctx, "up", now=1764583900.0)
    assert obs.watchdog is not None
    assert (obs.watchdog.state, obs.watchdog.restarts_in_window, obs.watchdog.budget) == ("healthy", 1, 3)
    assert obs.restart_times == (1764583000.0,)


def test_no_watchdog_reading_while_the_container_is_not_running(make_run) -> None:
    assert observe(make_run({}, None).ctx, "up", now=1.0).watchdog is None
