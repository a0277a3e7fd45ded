"""A real server's timing in what the tool renders and probes: /health may block up to sglang's
SGLANG_HEALTH_CHECK_TIMEOUT under a long prefill, and a stopping server drains its requests first."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from orchestrator.facts import CT, health_code_command
from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.render.service import render_unit
from orchestrator.watchdog.render import watchdog_config, watchdog_files
from tests.unit.render.test_templates import profile


def test_a_health_probe_waits_past_sglangs_own_health_timeout() -> None:
    assert profile().health_probe_timeout_s == 25  # 20 s of SGLANG_HEALTH_CHECK_TIMEOUT, and 5 to answer
    assert profile(env={"SGLANG_HEALTH_CHECK_TIMEOUT": "60"}).health_probe_timeout_s == 65
    assert profile(health_timeout_s=9, env={"SGLANG_HEALTH_CHECK_TIMEOUT": "60"}).health_probe_timeout_s == 9
    assert profile(env={"SGLANG_HEALTH_CHECK_TIMEOUT": "soon"}).health_probe_timeout_s == 25
    with pytest.raises(ValidationError):
        profile(health_timeout_s=0)


def test_every_health_probe_uses_that_timeout_not_5_s() -> None:
    p = profile(env={"SGLANG_HEALTH_CHECK_TIMEOUT": "40"})
    assert health_code_command(p) == "curl -s -o /dev/null -m 45 -w '%{http_code}' http://127.0.0.1:8000/health"
    assert CT.health.command(None, p) == health_code_command(p)  # type: ignore[arg-type]


def test_the_unit_stop_timeout_and_the_watchdog_follow_the_profile() -> None:
    flags = canonicalize({"tp": 8, "trust-remote-code": True}, FlagSchema.load("0.5.12.post1"))
    assert "TimeoutStopSec=120\n" in render_unit(profile(), flags).content
    assert "TimeoutStopSec=600\n" in render_unit(profile(stop_timeout_s=600), flags).content
    p = profile(env={"SGLANG_HEALTH_CHECK_TIMEOUT": "40"})
    assert watchdog_config(p)["health_timeout_s"] == 45.0
    files = {f.name: f for f in watchdog_files(p)}
    assert json.loads(files["config.json"].content)["health_timeout_s"] == 45.0
    # one check may take /health's 45 s, the tiny generation's and /metrics' 10 s each, and a margin
    assert "TimeoutStartSec=95\n" in files["sglang-watchdog.service"].content
