"""Process helpers for the manager: detached starts, pid files, and killing whole process trees.

Simulated daemons must survive the CLI that started them (`deploy sim up` returns), so they run in their own
session with stdio on log files. Stopping walks /proc instead of using `pkill -f`, so only processes this
simulator started are ever signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path


def start_detached(argv: Sequence[str], log: Path, env: dict[str, str] | None = None,
                   cwd: Path | None = None) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out, open(os.devnull, "rb") as devnull:
        return subprocess.Popen(list(argv), stdin=devnull, stdout=out, stderr=subprocess.STDOUT,
                                env=env, cwd=cwd, start_new_session=True, close_fds=True)


def read_pid(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if alive(pid) else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def descendants(pid: int) -> list[int]:
    """All descendants of pid (children first found breadth-first), from a single /proc scan."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_all(pids: Iterable[int], timeout_s: float = 3.0) -> None:
    """SIGTERM, wait up to timeout_s, then SIGKILL what is left."""
    pids = [p for p in pids if p > 1 and p != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (timeout_s if sig == signal.SIGTERM else 2.0)
        while time.monotonic() < deadline:
            pids = [p for p in pids if alive(p)]
            if not pids:
                return
            time.sleep(0.05)


def stop_tree(pidfile: Path) -> None:
    """Stop the daemon in pidfile and everything it spawned; remove the pid file."""
    pid = read_pid(pidfile)
    if pid is not None:
        kill_all([pid, *descendants(pid)])
    pidfile.unlink(missing_ok=True)
