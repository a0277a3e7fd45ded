"""The runs of this machine that hold (or held) a host's lease, and proof that one of them is dead.

Why: a run killed with SIGKILL leaves its lease on the host until it expires (locks/lease.py, 60 s), and the
operator's next command, run at once from the same machine, was refused for that minute. The machine that started
the run can prove that it is dead: each run holds an exclusive `flock` on a file of its own here for as long as its
process lives, and the kernel drops the lock when the process dies, whatever killed it. A lease whose run is proven
dead this way is taken over at once, exactly as one that expired (nobody can renew it any more).

A run of another machine is never in this list, so its lease is still waited for.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.local.files import file_name
from orchestrator.local.paths import state_dir


def runs_dir(host: str) -> Path:
    return state_dir() / "runs" / file_name(host)


@dataclass
class LocalRun:
    """This process's mark for one run on one host: the file stays locked until `end()` or the process dies."""

    path: Path
    fd: int | None

    def end(self) -> None:
        if self.fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = None


    def abandon(self) -> None:
        """Give up the mark but leave its file: the run reads as dead from now on (`dead_runs`), so a lease it may
        have taken without learning so (a signal during the acquire's round trip) is taken over at once."""
        if self.fd is None:
            return
        os.close(self.fd)
        self.fd = None


def start_run(host: str, run_id: str, holder: str) -> LocalRun:
    """Mark `run_id` as alive on this machine (best effort: without a writable state dir nothing is proven later,
    and the lease simply expires as before)."""
    path = runs_dir(host) / f"{file_name(run_id)}.run"
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Never through a link (O_TRUNC would empty its target); a link there just loses the proof, as any error.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    except OSError:
        return LocalRun(path, None)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{run_id}\n{holder}\n".encode())
    except OSError:
        os.close(fd)
        return LocalRun(path, None)
    return LocalRun(path, fd)


def dead_runs(host: str) -> tuple[str, ...]:
    """The run ids this machine started on `host` whose process is gone (their file's lock is free)."""
    found: list[str] = []
    try:
        entries = sorted(runs_dir(host).glob("*.run"))
    except OSError:
        return ()
    for path in entries:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)  # its run is alive (in this process or another)
            continue
        try:
            first = os.pread(fd, 256, 0).decode(errors="replace").split("\n", 1)[0].strip()
        finally:
            os.close(fd)
        if first:
            found.append(first)
    return tuple(found)


def forget(host: str, run_ids: tuple[str, ...]) -> None:
    """Drop the marks of dead runs once the host's lease no longer names them."""
    for run_id in run_ids:
        (runs_dir(host) / f"{file_name(run_id)}.run").unlink(missing_ok=True)
