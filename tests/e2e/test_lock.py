"""The host lock belongs to the run, not to one SSH channel (issue 13, section 1).

Drills against the simulated host with the real CLI: an SSH drop during a roll whose rollback then races a
second run; a SIGKILLed run whose lease its own machine takes over at once (another machine waits for it to
expire); reads that never take the lock.
"""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

from tests.e2e.conftest import DeployEnv, wait_lease_expired
from tests.e2e.test_roll import RELEASES, UNIT, ct_out, current, health

LEASE = "/var/lib/deploy/deploy.lease"


class Lines:
    """A running `deploy` whose output is read line by line while it runs."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._q.put(line)
        self._q.put(None)

    def wait_for(self, pattern: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._q.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no line matching {pattern!r}; output so far:\n{self.text}")

    def finish(self, timeout: float) -> int:
        rc = self.proc.wait(timeout=timeout)
        while True:
            try:
                line = self._q.get(timeout=5)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
        return rc

    @property
    def text(self) -> str:
        return "".join(self.lines)


def lease(env: DeployEnv) -> dict[str, str]:
    out = env.ssh(f"cat {LEASE} 2>/dev/null || true").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def assert_one_consistent_release(env: DeployEnv, release: str, flag: str) -> None:
    """`current`, the installed unit, the running server's argv and /health all agree on one release."""
    assert current(env) == release
    assert ct_out(env, f"cmp -s {RELEASES}/{release}/sglang.service {UNIT} && echo same") == "same"
    cmdline = ct_out(env, "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang)/cmdline")
    assert flag in cmdline, cmdline
    assert ct_out(env, "systemctl is-active sglang") == "active"
    assert health(env) == "200"


def test_ssh_drop_during_rollback_never_lets_a_second_run_in(converged: DeployEnv) -> None:
    env = converged
    base = current(env)
    # Every start takes 15 s, so A's health wait and its rollback's are long; the 5th SSH command of A (a health
    # probe of the candidate) dies with its connection, which fails the step and starts the rollback.
    env.ct_faults(slow_start_s=15)
    env.faults(ssh_drop_after=4)
    a = Lines(env.popen("roll", "host", env.host, "--set", "num-continuous-decode-steps=4", "--skip-bench"))
    try:
        rolling = a.wait_for(r"rolling back to", timeout=150)
        assert base in rolling and "dropped" in rolling, rolling
        holder = lease(env)  # checked below, after B: B's fate is the point of the drill
        b = env.run("--json", "roll", "host", env.host, "--set", "max-running-requests=1024", "--skip-bench",
                    timeout=240)
        rc = a.finish(timeout=240)
    finally:
        if a.proc.poll() is None:
            a.proc.kill()
    # B was refused while A rolled back, and was told who holds the lock.
    assert b.rc == 3, f"B was not refused while A rolled back:\n{b.text}\nA:\n{a.text}"
    assert holder.get("run") and f"pid {a.proc.pid} " in holder.get("holder", ""), holder
    assert b.json["error"] == "lock-held" and b.json["step"] == "lock", b.json
    assert f"run {holder['run']}" in b.json["what"] and f"pid {a.proc.pid} " in b.json["what"], b.json["what"]
    assert re.search(r"expires in \d+ s", b.json["what"]), b.json["what"]
    # A kept its lock through the reconnect and finished the rollback, or stopped saying it lost the lock.
    assert rc == 3, a.text
    if "lost the host lock" not in a.text:
        claim = re.search(r"rolled back to (\S+) \(healthy again after \d+ s; current release read back: (\S+), "
                          r"/health 200\)", a.text)
        assert claim, a.text
        assert claim.group(1) == claim.group(2) == base
        assert "still holds the lock" in a.text, a.text  # it said it re-proved the lock after reconnecting
    # The host ends with exactly one consistent current release: A's rollback target, B never installed.
    assert_one_consistent_release(env, base, "--num-continuous-decode-steps 8")
    assert "--max-running-requests 1024" not in ct_out(env, f"cat {UNIT}")
    releases = ct_out(env, f"ls -1 {RELEASES}").split()
    assert len(releases) == 2  # the base and A's rolled-back candidate, nothing of B
    assert lease(env) == {}  # A released its lock when it ended


def test_a_killed_run_is_taken_over_at_once_by_its_own_machine_while_another_is_refused(
        converged: DeployEnv, tmp_path: Path) -> None:
    env = converged
    ttl = 15  # short for the test, yet long enough that the other machine's runs start before it runs out
    env.ct_faults(slow_start_s=30, match="--num-continuous-decode-steps 4")
    proc = env.popen("roll", "host", env.host, "--set", "num-continuous-decode-steps=4", "--skip-bench",
                     lock_ttl_s=ttl)
    a = Lines(proc)
    try:
        a.wait_for(r"^\s+changed\s+install_release", timeout=120)
        held = lease(env)
        assert held.get("ttl") == str(ttl) and f"pid {proc.pid} " in held["holder"], held
    finally:
        proc.kill()
        proc.wait(timeout=30)
    # Another machine (its own local state) cannot prove that run dead: it is refused, told whose lock it is and
    # when it expires.
    other = replace(env, env={**env.env, "DEPLOY_STATE_DIR": str(tmp_path / "other-machine")})
    refused = other.run("--json", "up", "host", env.host, "--skip-bench")
    assert refused.rc == 3, refused.text
    assert f"run {held['run']}" in refused.json["what"] and "expires in" in refused.json["what"]
    # The machine that started it knows its process is gone: the next run takes the lease over at once, says so,
    # and restores the candidate the killed roll left.
    took = env.run("up", "host", env.host, "--skip-bench", timeout=300)
    assert took.rc == 0, took.text
    assert re.search(rf"took over the lock of run {re.escape(held['run'])} \(.*\(its process on this machine is "
                     r"gone; the lease had not expired yet\)", took.text), took.text
    assert lease(env) == {}


def test_run_that_lost_its_lock_stops_and_claims_nothing(converged: DeployEnv) -> None:
    """A run frozen past its lease (a suspended laptop) finds another run took the lock, and stops."""
    env = converged
    base = current(env)
    ttl = 6
    env.ct_faults(slow_start_s=40, match="--num-continuous-decode-steps 4")
    a = Lines(env.popen("roll", "host", env.host, "--set", "num-continuous-decode-steps=4", "--skip-bench",
                        lock_ttl_s=ttl))
    try:
        a.wait_for(r"^\s+changed\s+install_release", timeout=120)
        a_run = lease(env)["run"]
        a.proc.send_signal(signal.SIGSTOP)  # A and its keep-alive freeze; its lease runs out
        wait_lease_expired(env, timeout_s=ttl + 30)
        b = env.run("up", "host", env.host, "--skip-bench", timeout=300)
        assert b.rc == 0, b.text
        assert f"took over the lock of run {a_run}" in b.text, b.text
        a.proc.send_signal(signal.SIGCONT)
        rc = a.finish(timeout=120)
    finally:
        if a.proc.poll() is None:
            a.proc.send_signal(signal.SIGCONT)
            a.proc.kill()
    assert rc == 3, a.text
    assert "this run lost the host lock" in a.text and "stopped before changing anything more" in a.text, a.text
    assert "NOT rolled back" in a.text and not re.search(r"— rolled back to|healthy again", a.text), a.text
    # B restored the previous release (A's candidate was an interrupted roll's); A did not touch the host after.
    assert_one_consistent_release(env, base, "--num-continuous-decode-steps 8")
    assert lease(env) == {}


def test_terminated_run_frees_its_lock_on_the_way_out(converged: DeployEnv) -> None:
    """SIGTERM (kill, timeout, systemd) and SIGHUP (closed terminal) unwind the run, which releases its lock."""
    env = converged
    env.ct_faults(slow_start_s=30, match="--num-continuous-decode-steps 4")
    a = Lines(env.popen("roll", "host", env.host, "--set", "num-continuous-decode-steps=4", "--skip-bench"))
    try:
        a.wait_for(r"^\s+changed\s+install_release", timeout=120)
        assert lease(env).get("run")
        a.proc.send_signal(signal.SIGTERM)
        rc = a.finish(timeout=120)  # the unwinding joins the keep-alive thread, which may sit in a command
    finally:
        if a.proc.poll() is None:
            a.proc.kill()
    assert rc == 128 + signal.SIGTERM, a.text
    assert "rolled back" not in a.text, a.text
    assert lease(env) == {}
    nxt = env.run("--json", "up", "host", env.host, "--skip-bench")  # at once: no lease left to wait for
    assert nxt.rc == 0, nxt.text
    assert not any("took over" in str(s.get("details", {}).get("lock", {})) for s in nxt.json["steps"])
