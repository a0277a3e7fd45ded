"""The detached per-unit supervisor: runs ExecStart, journals its output, applies Restart= and the start limit.

Started by `systemctl start` with setsid and no inherited fds, so the SSH channel that ran systemctl closes
at once while the service keeps running. Stop = SIGTERM to this process: it SIGTERMs the service's process
group and SIGKILLs it after TimeoutStopSec, like systemd's default KillMode=control-group.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from .state import CtUnits, journal_append, systemd_log
from .unit import Unit, ct_path, expand_command, read_env_file

START_LIMIT_BURST = 5
START_LIMIT_INTERVAL_S = 10.0
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASS_THROUGH_PREFIXES = ("DEPLOY_SIM_", "SGLANG_SIM_")  # simulator plumbing, not part of a real unit's env


def service_env(unit: Unit, units: CtUnits) -> dict[str, str]:
    env = {"PATH": BASE_PATH, "LANG": "C.UTF-8", "HOME": "/root", "USER": "root", "LOGNAME": "root",
           "SHELL": "/bin/sh", "INVOCATION_ID": uuid.uuid4().hex}
    env.update({k: v for k, v in os.environ.items() if k.startswith(PASS_THROUGH_PREFIXES)})
    if os.environ.get("LD_LIBRARY_PATH"):  # part 1's python launcher needs it for an aliased shared libpython
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    for spec in unit.environment_files:
        optional = spec.startswith("-")
        path = ct_path(units.fs, spec.lstrip("-"))
        try:
            env.update(read_env_file(path))
        except OSError:
            if not optional:
                raise
    env.update(unit.environment)
    return env


class Supervisor:
    def __init__(self, units: CtUnits, unit: Unit) -> None:
        self.units, self.unit, self.name = units, unit, unit.name
        self.stopping = False
        self.child: subprocess.Popen[bytes] | None = None

    def on_term(self, signum: int, frame: object) -> None:
        self.stopping = True
        child = self.child
        if child is not None and child.poll() is None:
            try:
                os.killpg(child.pid, signal.SIGTERM)
            except ProcessLookupError:
                return
            timer = threading.Timer(self.unit.timeout_stop_sec, self._kill, args=(child,))
            timer.daemon = True
            timer.start()

    def _kill(self, child: subprocess.Popen[bytes]) -> None:
        if child.poll() is None:
            systemd_log(self.units, self.name, f"{self.name}: State 'stop-sigterm' timed out. Killing.")
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def spawn(self) -> int | None:
        """Start ExecStart; returns an exit status when it could not even be executed."""
        try:
            env = service_env(self.unit, self.units)
        except OSError as exc:
            systemd_log(self.units, self.name, f"{self.name}: Failed to load environment files: {exc.strerror}")
            return 1
        argv = expand_command(self.unit.exec_start, env)
        cwd = self.unit.working_directory or "/"
        try:
            self.child = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            what = "change directory" if exc.filename == cwd else "locate executable"
            systemd_log(self.units, self.name, f"{self.name}: Failed to {what} {exc.filename}: {exc.strerror}")
            return 203 if what != "change directory" else 200
        return None

    def pump(self) -> int:
        child = self.child
        assert child is not None and child.stdout is not None
        ident = Path(self.unit_argv0()).name or "sh"
        journal = self.units.journal(self.name)
        for raw in iter(child.stdout.readline, b""):
            journal_append(journal, ident, child.pid, [raw.decode(errors="replace")])
        return child.wait()

    def unit_argv0(self) -> str:
        argv = expand_command(self.unit.exec_start, self.unit.environment)
        return argv[0] if argv else ""

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        starts: collections.deque[float] = collections.deque()
        restarts = int(self.units.read_state(self.name).get("NRestarts", 0))
        desc = self.unit.description or self.name
        while not self.stopping:
            now = time.time()
            starts.append(now)
            while starts and now - starts[0] > START_LIMIT_INTERVAL_S:
                starts.popleft()
            if len(starts) > START_LIMIT_BURST:
                systemd_log(self.units, self.name, f"{self.name}: Start request repeated too quickly.")
                systemd_log(self.units, self.name, f"{self.name}: Failed with result 'start-limit-hit'.")
                systemd_log(self.units, self.name, f"Failed to start {self.name} - {desc}.")
                self.units.write_state(self.name, ActiveState="failed", SubState="failed", MainPID=0,
                                       Result="start-limit-hit", SupervisorPID=0)
                return
            status = self.spawn()
            if status is None:
                assert self.child is not None
                self.units.write_state(self.name, ActiveState="active", SubState="running", MainPID=self.child.pid,
                                       ActiveEnterTimestamp=time.time(), Result="success", SupervisorPID=os.getpid(),
                                       NRestarts=restarts)
                systemd_log(self.units, self.name, f"Started {self.name} - {desc}.")
                status = self.pump()
            if self.stopping:
                break
            code = (f"code=killed, status={-status}/{signal.Signals(-status).name.removeprefix('SIG')}" if status < 0
                    else f"code=exited, status={status}/{'SUCCESS' if status == 0 else 'FAILURE'}")
            systemd_log(self.units, self.name, f"{self.name}: Main process exited, {code}")
            failed = status != 0
            if failed:
                systemd_log(self.units, self.name, f"{self.name}: Failed with result 'exit-code'.")
            restart = self.unit.restart == "always" or (self.unit.restart in ("on-failure", "on-abnormal") and failed)
            if not restart:
                self.units.write_state(self.name, ActiveState="failed" if failed else "inactive",
                                       SubState="failed" if failed else "dead", MainPID=0, ExecMainStatus=status,
                                       Result="exit-code" if failed else "success", SupervisorPID=0)
                return
            self.units.write_state(self.name, ActiveState="activating", SubState="auto-restart", MainPID=0,
                                   ExecMainStatus=status, Result="exit-code" if failed else "success")
            deadline = time.time() + self.unit.restart_sec
            while time.time() < deadline and not self.stopping:
                time.sleep(min(0.05, max(deadline - time.time(), 0)))
            if self.stopping:
                break
            restarts += 1
            self.units.write_state(self.name, NRestarts=restarts)
            systemd_log(self.units, self.name, f"{self.name}: Scheduled restart job, restart counter is at {restarts}.")
        status = self.child.returncode if self.child is not None else 0
        systemd_log(self.units, self.name, f"{self.name}: Deactivated successfully.")
        systemd_log(self.units, self.name, f"Stopped {self.name} - {desc}.")
        self.units.write_state(self.name, ActiveState="inactive", SubState="dead", MainPID=0,
                               ExecMainStatus=status or 0, Result="success", SupervisorPID=0)


def main() -> None:
    """Entry point: `supervisor <ct_dir> <unit> <loaded.json>` (the unit as systemctl had it loaded)."""
    ct_dir, loaded = Path(sys.argv[1]), Path(sys.argv[3])
    unit = Unit.from_dict(json.loads(loaded.read_text())["unit"])
    Supervisor(CtUnits(ct_dir), unit).run()


if __name__ == "__main__":
    main()
