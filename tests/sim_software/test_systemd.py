"""systemctl/journalctl stand-ins: detached start, unit file semantics, restart policy and start limit."""

from __future__ import annotations

import time
from collections.abc import Callable

import requests

from .conftest import SimHost, free_port


def write_unit(h: SimHost, name: str, body: str) -> None:
    path = h.ct / "fs/etc/systemd/system" / f"{name}.service"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)


def wait_for(fn: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if fn():
            return True
        time.sleep(0.05)
    return False


def test_sglang_unit_from_container_venv(host: SimHost) -> None:
    host.pass_devices()
    port = free_port()
    venv_python = host.ct / "fs/root/ml-env/bin/python"
    model = host.ct / "fs/models/GLM-5-NVFP4"
    (host.ct / "fs/etc/sglang").mkdir(parents=True, exist_ok=True)
    (host.ct / "fs/etc/sglang/sglang.env").write_text("SGLANG_SIM_START_S=0.3\n# comment\nNCCL_P2P_LEVEL=SYS\n")
    write_unit(host, "sglang", f"""[Unit]
Description=SGLang server (glm-5)
After=network-online.target

[Service]
Type=simple
EnvironmentFile=-/etc/sglang/sglang.env
Environment="HF_HUB_OFFLINE=1"
ExecStart={venv_python} -m sglang.launch_server \\
    --model-path {model} --served-model-name glm-5 \\
    --host 127.0.0.1 --port {port} --tp-size 8 \\
    --max-running-requests 2048 --num-continuous-decode-steps 8
Restart=on-failure
RestartSec=5
LimitMEMLOCK=infinity

[Install]
WantedBy=multi-user.target
""")
    t0 = time.time()
    assert host.run("systemctl", "enable", "--now", "sglang").returncode == 0
    assert time.time() - t0 < 3.0
    try:
        assert host.run("systemctl", "is-active", "sglang").stdout == "active\n"
        assert host.run("systemctl", "is-enabled", "sglang").stdout == "enabled\n"
        show = host.run("systemctl", "show", "-p", "MainPID,ActiveState,SubState,NRestarts", "sglang").stdout
        assert "ActiveState=active\nSubState=running\nNRestarts=0\n" in show
        assert wait_for(lambda: "ready to roll" in host.run("journalctl", "-u", "sglang", "-o", "cat").stdout)
        assert requests.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        log = host.run("journalctl", "-u", "sglang", "-n", "3", "--no-pager").stdout.splitlines()
        assert len(log) == 3 and "]: " in log[0]
        status = host.run("systemctl", "status", "sglang")
        assert status.returncode == 0 and "Active: active (running)" in status.stdout
    finally:
        host.run("systemctl", "stop", "sglang")
    assert host.run("systemctl", "is-active", "sglang").returncode == 3
    assert "Stopped sglang.service" in host.run("journalctl", "-u", "sglang", "-o", "cat").stdout


def test_restart_policy_and_start_limit(host: SimHost) -> None:
    write_unit(host, "flaky", "[Service]\nExecStart=/bin/sh -c 'echo boom; exit 3'\nRestart=on-failure\n"
                              "RestartSec=100ms\n")
    assert host.run("systemctl", "start", "flaky").returncode == 0
    assert wait_for(lambda: host.run("systemctl", "is-active", "flaky").stdout == "failed\n")
    props = host.run("systemctl", "show", "-p", "NRestarts,ExecMainStatus,Result", "--value", "flaky").stdout
    assert props.split() == ["5", "3", "start-limit-hit"]
    log = host.run("journalctl", "-u", "flaky", "-o", "cat").stdout
    assert "boom" in log and "Start request repeated too quickly." in log


def test_restart_no_and_daemon_reload(host: SimHost) -> None:
    write_unit(host, "once", "[Service]\nExecStart=/bin/sh -c 'exit 0'\n")
    host.run("systemctl", "start", "once")
    assert wait_for(lambda: host.run("systemctl", "is-active", "once").stdout == "inactive\n")
    write_unit(host, "once", "[Service]\nExecStart=/bin/sleep 30\n")
    r = host.run("systemctl", "restart", "once")
    assert "Run 'systemctl daemon-reload'" in r.stderr
    host.run("systemctl", "daemon-reload")
    host.run("systemctl", "restart", "once")
    try:
        assert host.run("systemctl", "is-active", "once").stdout == "active\n"
    finally:
        host.run("systemctl", "stop", "once")
    assert host.run("systemctl", "status", "nope").returncode == 4
