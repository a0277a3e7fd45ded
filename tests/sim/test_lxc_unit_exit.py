"""The rendered unit under a real systemd 252 (a real container of the lxc runtime) with a server that ends the way
real sglang 0.5.12.post1 ends: it drains on SIGTERM, then SIGKILLs its own process tree, itself included (rc -9 on
an H100, tests/fixtures/sglang/real-h100/cold.shutdown.json), and its crash path kills itself the same way.

A clean stop must leave the unit inactive (not failed); the same SIGKILL without a stop (a crash) must still restart
it; sglang's Prometheus multiprocess directory lives in the unit's RuntimeDirectory, gone after the stop."""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator

import pytest

from orchestrator.flags import FlagSchema, canonicalize
from orchestrator.inventory.models import ServerProfile
from orchestrator.render import render_unit
from orchestrator.render.service import ENV_PATH, RESTART_SEC, UNIT_PATH
from tests.sim.conftest import Ssh
from tests.sim.lxc_support import create_and_start, lxc_host

# 600 s: the first module on a fresh machine also builds the template (debootstrap, ~3 min on 2 busy cores)
pytestmark = pytest.mark.timeout(600)

VMID = 121
VENV = "/opt/selfkill"
#: Stands in for the venv's python: sglang's ending. On SIGTERM (KillMode=mixed: the main process only) it "drains"
#: and SIGKILLs itself, as tokenizer_manager.sigterm_watchdog's kill_process_tree(os.getpid()) does; with
#: /run/crash-once it SIGKILLs itself unasked, as its crash path does (print_exception_wrapper, the SIGQUIT handler).
SERVER = """#!/bin/sh
echo "$PROMETHEUS_MULTIPROC_DIR" > /run/selfkill.prom
mktemp -d "$PROMETHEUS_MULTIPROC_DIR/tmpXXXXXX" > /run/selfkill.promdir
echo start >> /run/selfkill.starts
if [ -f /run/crash-once ]; then rm -f /run/crash-once; sleep 0.5; kill -9 $$; fi
trap 'sleep 0.2; kill -9 $$' TERM
while :; do sleep 0.1; done
"""
SHOW = "systemctl show -p ActiveState -p SubState -p Result -p ExecMainCode -p ExecMainStatus -p NRestarts sglang"


def ct(ssh: Ssh, command: str, stdin: str | None = None, timeout: float = 60) -> str:
    res = ssh.run(f"pct exec {VMID} -- sh -c {shlex.quote(command)}", stdin=stdin, timeout=timeout)
    assert res.rc == 0, (command, res.out, res.err)
    return str(res.out)


def state(ssh: Ssh) -> dict[str, str]:
    return dict(line.split("=", 1) for line in ct(ssh, SHOW).splitlines() if "=" in line)


def wait_for(ssh: Ssh, want: dict[str, str], timeout_s: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        got = state(ssh)
        if all(got.get(k) == v for k, v in want.items()) or time.monotonic() > deadline:
            return got
        time.sleep(0.3)


@pytest.fixture(scope="module")
def ssh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ssh]:
    with lxc_host(tmp_path_factory, "lxc-unit-exit") as (_root, _info, ssh):
        create_and_start(ssh, VMID)
        prof = ServerProfile.model_validate({"model_path": "/models/m", "served_model_name": "m",
                                             "sglang_version": "0.5.12.post1", "venv": VENV, "flags": {"tp": 1}})
        unit = render_unit(prof, canonicalize(prof.flags, FlagSchema.load("0.5.12.post1"))).content
        ct(ssh, f"mkdir -p {VENV}/bin /etc/sglang && cat > {VENV}/bin/python && chmod 755 {VENV}/bin/python && "
                f": > {ENV_PATH}", stdin=SERVER)
        ct(ssh, f"cat > {UNIT_PATH} && systemctl daemon-reload", stdin=unit)
        yield ssh


def test_a_clean_stop_ending_in_sglangs_own_sigkill_leaves_the_unit_inactive(ssh: Ssh) -> None:
    ct(ssh, "rm -f /run/selfkill.* && systemctl reset-failed sglang 2>/dev/null; systemctl start sglang")
    running = wait_for(ssh, {"ActiveState": "active"}, 10)
    assert running["ActiveState"] == "active", running
    ct(ssh, "while [ ! -f /run/selfkill.starts ]; do sleep 0.1; done; systemctl stop sglang")
    stopped = state(ssh)
    journal = ct(ssh, "journalctl -u sglang -q --no-pager -n 20 -o cat")
    print(f"after a stop: {stopped}\n{journal}")
    # Without SuccessExitStatus (the unit before): failed, Result=signal, ExecMainCode=2 ExecMainStatus=9 and
    # "Main process exited, code=killed, status=9/KILL" / "Failed with result 'signal'" (seen on this systemd 252).
    # With it, systemd takes the SIGKILL as a clean exit: no failure line, and it records no exit status.
    assert stopped["ActiveState"] == "inactive" and stopped["SubState"] == "dead", stopped
    assert stopped["Result"] == "success", stopped
    assert "Deactivated successfully." in journal and "Failed with result" not in journal, journal


def test_sglangs_prometheus_directory_goes_with_the_unit(ssh: Ssh) -> None:
    ct(ssh, "rm -f /run/selfkill.* && systemctl reset-failed sglang 2>/dev/null; systemctl start sglang; "
            "while [ ! -f /run/selfkill.starts ]; do sleep 0.1; done")
    prom = ct(ssh, "cat /run/selfkill.prom; cat /run/selfkill.promdir").split()
    assert prom[0] == "/run/sglang" and prom[1].startswith("/run/sglang/tmp"), prom
    ct(ssh, "systemctl stop sglang")
    # the directory the server made (and its SIGKILL never removed) went with the unit's RuntimeDirectory
    assert ct(ssh, "test -e /run/sglang && echo left || echo gone").strip() == "gone"


def test_the_same_sigkill_without_a_stop_is_a_crash_and_restarts(ssh: Ssh) -> None:
    ct(ssh, "rm -f /run/selfkill.* && touch /run/crash-once && systemctl reset-failed sglang 2>/dev/null; "
            "systemctl start sglang")
    got = wait_for(ssh, {"ActiveState": "active", "NRestarts": "1"}, RESTART_SEC + 15)
    print(f"after a crash: {got}; starts: {ct(ssh, 'cat /run/selfkill.starts').split()}")
    assert got["NRestarts"] == "1" and got["ActiveState"] == "active", got
    assert ct(ssh, "cat /run/selfkill.starts").split() == ["start", "start"]
    journal = ct(ssh, "journalctl -u sglang -q --no-pager -n 30 -o cat")
    assert "Scheduled restart job, restart counter is at 1." in journal, journal
    ct(ssh, "systemctl stop sglang")
