"""`deploy up` on a real LXC container that starts bare, as PVE's debian-12-standard does (issue 12).

The simulated host's container runtime is `lxc`: the container is created from the stock Debian 12 template, boots
real systemd, and has no NVIDIA userspace, venv, sglang or weights. The tool installs all of it (real apt, the
host's `.run` stand-in, real `python3 -m venv` and pip from the host's package index, real `hf download` from the
host's model hub stand-in). The tests of this module share one host and run in order: the first converges it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import DeployEnv, bare_lxc_env

INSTALL_STEPS = ("ct_packages", "driver_userspace", "sglang_install", "model_weights", "server_unit")


@pytest.fixture(scope="module")
def bare_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeployEnv]:
    with bare_lxc_env(tmp_path_factory, "lxc-e2e") as env:
        yield env


def _steps(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in report["steps"]}


@pytest.mark.timeout(1800)
def test_up_from_a_bare_container_installs_everything_then_converges(bare_env: DeployEnv) -> None:
    assert bare_env.ct("true").rc != 0, "the container must not exist before the first up"
    res = bare_env.run("--json", "up", "host", bare_env.host, timeout=1500)
    assert res.rc == 0, res.text[-3000:]
    steps = _steps(res.json)
    assert steps["container"]["status"] == "changed" and "create CT 120" in steps["container"]["summary"]
    for name in INSTALL_STEPS:
        assert steps[name]["status"] == "changed", (name, steps[name])
    assert "python3-venv" in steps["ct_packages"]["summary"]
    for name in ("health", "smoke", "throughput"):
        assert steps[name]["status"] == "ok", (name, steps[name])
    # What was installed is real: dpkg knows the packages, pip knows sglang, the unit is enabled for boot.
    for pkg in ("python3-venv", "patch"):  # patch: GNU patch for stack patches, not in a stock template
        assert bare_env.ct(f"dpkg-query -W -f '${{Status}}' {pkg}").stdout.startswith("install ok installed"), pkg
    show = bare_env.ct("/root/ml-env/bin/pip show sglang")
    assert show.rc == 0 and "Version: 0.5.12.post1" in show.stdout, show.text
    assert bare_env.ct("systemctl is-enabled sglang").stdout.strip() == "enabled"
    assert bare_env.ct("test -f /models/GLM-5-NVFP4/config.json").rc == 0

    again = bare_env.run("--json", "up", "host", bare_env.host, "--skip-bench", timeout=600)
    assert again.rc == 0, again.text[-3000:]
    assert again.json["summary"] == "no changes", [(s["name"], s["status"]) for s in again.json["steps"]
                                                   if s["status"] == "changed"]


def _wait_status_healthy(env: DeployEnv, timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        res = env.run("status", "host", env.host, timeout=120)
        last = res.text
        if res.rc == 0 and "/health 200" in res.stdout:
            return res.stdout
        time.sleep(2)
    raise AssertionError(f"not healthy within {timeout_s} s after the reboot:\n{last[-2000:]}")


@pytest.mark.timeout(600)
def test_pct_reboot_brings_sglang_back_by_itself(bare_env: DeployEnv) -> None:
    before = bare_env.ct("systemctl show -p ExecMainPID --value sglang").stdout.strip()
    res = bare_env.ssh("pct reboot 120", timeout=180)
    assert res.rc == 0, res.text
    out = _wait_status_healthy(bare_env)
    assert "sglang active" in out
    after = bare_env.ct("systemctl show -p ExecMainPID --value sglang").stdout.strip()
    assert after and after != before, "the server must be a new process started by the container's systemd"


@pytest.mark.timeout(900)
def test_health_wait_ignores_fatal_lines_of_an_earlier_start(bare_env: DeployEnv, tmp_path: Path) -> None:
    line = "RuntimeError: simulated NaN from an earlier start"
    bare_env.ct_faults(log_line=line)
    assert bare_env.ct("systemctl restart sglang").rc == 0  # the server reads its faults at start
    deadline = time.monotonic() + 120
    while line not in bare_env.ct("journalctl -u sglang --no-pager").stdout:  # it strikes at the first decode
        assert time.monotonic() < deadline, "the fatal line never reached the journal"
        bare_env.ct("curl -s -m 5 127.0.0.1:8000/health || true")
        time.sleep(1)
    bare_env.ct_faults(log_line=None)
    bare_env.ct("systemctl stop sglang")
    res = bare_env.run("--json", "up", "host", bare_env.host, "--skip-bench", timeout=600)
    assert res.rc == 0, res.text[-3000:]
    steps = _steps(res.json)
    assert steps["health"]["status"] == "ok", steps["health"]
    assert line not in res.stdout, "the health wait read the journal of an earlier start"
