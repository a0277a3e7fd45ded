"""`pct reboot` (POST …/status/reboot): a shutdown, then a start, like pve-container."""

from __future__ import annotations

from typing import Any


def test_pct_reboot_restarts_a_running_container_and_refuses_a_stopped_one(ssh: Any, make_ct: Any,
                                                                          sim: Any) -> None:
    assert make_ct(120).rc == 0
    assert ssh.run("pct start 120").rc == 0
    # a process of the container's own, found by its command line
    assert ssh.run("pct exec 120 -- sh -c 'nohup sleep 3017.5 >/dev/null 2>&1 &'").rc == 0
    assert ssh.run("pct exec 120 -- pgrep -f 'sleep 3017.5'").out.split()
    res = ssh.run("pct reboot 120")
    assert res.rc == 0, res.err
    assert ssh.run("pct status 120").out == "status: running\n"
    assert ssh.run("pct exec 120 -- pgrep -f 'sleep 3017.5'").out.split() == []  # the old processes are gone
    assert ssh.run("pct stop 120").rc == 0
    res = ssh.run("pct reboot 120")
    assert res.rc != 0 and "CT 120 not running" in res.err
