"""One claim per host on this machine, shared by single-host and fleet commands (issue 21 item 4).

Why a local claim beside the host's lease (locks/lease.py): a fleet roll plans (preflight) and keeps a record for
minutes before any host's lease is taken, and between hosts it holds no lease at all, so two overlapping fleet
rolls (or a `roll host X` during a fleet roll of X) both ran. The claim is taken before any planning and held
until the command ends: an exclusive `flock` on `state_dir()/claims/HOST.claim`, released by the kernel when the
process dies (SIGKILL included), so a dead run never leaves a claim behind. The file names the holder.

Two kinds: a fleet command claims its hosts exclusively; a single-host `roll`/`rollback` claims its host shared.
So a fleet roll and any other command over one of its hosts exclude each other, while two single-host runs on one
host meet at the host's own lease (locks/lease.py), which names the run that holds it.

Within one process the claim is re-entrant: a fleet roll holds its hosts' claims while its worker threads run each
host's single-host roll, which claims the same host again.

The router is claimed too (issue 37 item 3), under a name no host can have (ROUTER): every fleet command that can
change the router's worker list (`up`, `roll` and `rollback` of a fleet, `router add/remove`) takes it with its
hosts (claim_fleet), so none can undo another's drain: an `up group` of other hosts used to re-add, through its
live reconcile, a host a fleet roll had drained and not yet gated.
"""

from __future__ import annotations

import fcntl
import getpass
import os
import re
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.errors import LockHeld
from orchestrator.localfile import open_no_follow
from orchestrator.locks.local_runs import file_name
from orchestrator.paths import state_dir

#: The router's claim: host names start with a letter or digit (inventory/models.py), so none is this.
ROUTER = "_router"
_HELD: dict[str, tuple[int, int, bool]] = {}  # host → (fd, depth, exclusive) held by this process
_MUTEX = threading.Lock()
_SECRET_ARG = re.compile(r"((?:api[-_]?key|token|secret|passw\w*)[\w-]*(?:=|\s+))\S+", re.IGNORECASE)


def claims_dir() -> Path:
    return state_dir() / "claims"


def _path(host: str) -> Path:
    return claims_dir() / f"{file_name(host)}.claim"


def holder(command: str) -> str:
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    masked = _SECRET_ARG.sub(r"\1***", command)
    return f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()} running '{masked}' since {since}"


def _take(host: str, command: str, exclusive: bool) -> str | None:
    """Claim `host` (re-entrant); None when done, else who holds it."""
    with _MUTEX:
        if host in _HELD:
            fd, depth, excl = _HELD[host]
            _HELD[host] = (fd, depth + 1, excl)
            return None
        claims_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = open_no_follow(_path(host), os.O_RDWR | os.O_CREAT, 0o600, what="claim file")
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                lines = os.pread(fd, 4096, 0).decode(errors="replace").strip().splitlines()
                # Only an exclusive (fleet) holder writes its name: shared holders come and go together.
                who = lines[0].strip() if lines else "a single-host roll or rollback"
            finally:
                os.close(fd)
            return who
        if exclusive:
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder(command).encode() + b"\n", 0)
        _HELD[host] = (fd, 1, exclusive)
        return None


def _release(host: str) -> None:
    with _MUTEX:
        fd, depth, excl = _HELD[host]
        if depth > 1:
            _HELD[host] = (fd, depth - 1, excl)
            return
        del _HELD[host]
        if excl:
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the only descriptor releases the flock


def _label(name: str) -> str:
    return "the router" if name == ROUTER else name


@contextmanager
def claim_fleet(hosts: Sequence[str], command: str, *, router: bool) -> Iterator[None]:
    """A fleet command's claim: its hosts exclusively, and the router (ROUTER) when it may change the router's
    worker list (`router`: the inventory has a router). Refuses (LockHeld, exit 3) before any planning."""
    with claim_hosts([*hosts, *([ROUTER] if router else [])], command):
        yield


@contextmanager
def claim_hosts(hosts: Sequence[str], command: str, *, exclusive: bool = True) -> Iterator[None]:
    """Hold every host's claim for the block (exclusive: a fleet command; shared: a single-host one); refuses
    (LockHeld, exit 3) naming each holder, claiming none."""
    taken: list[str] = []
    refused: dict[str, str] = {}
    try:
        for host in hosts:
            who = _take(host, command, exclusive)
            if who is None:
                taken.append(host)
            else:
                refused[host] = who
    except BaseException:  # a claim file that cannot be opened (a link: ConfigError): give back those taken
        for host in taken:
            _release(host)
        raise
    if refused:
        for host in taken:
            _release(host)
        text = "; ".join(f"{_label(h)}: {who}" for h, who in refused.items())
        raise LockHeld(f"another deploy command on this machine holds {', '.join(map(_label, refused))}: {text}",
                       fix="wait for it to finish (or stop it: it cleans up on Ctrl-C/SIGTERM); nothing was "
                           "planned or changed", step="claim")
    try:
        yield
    finally:
        for host in taken:
            _release(host)
