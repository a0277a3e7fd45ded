"""One claim per host, shared by single-host and fleet commands (issue 21 item 4), kept in the state store.

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

Where (issue 51): on this machine by default (the flocks above); with a team store (state/store.py) a claim is a
PostgreSQL session advisory lock, which the server frees when the holder's connection dies, as the kernel frees a
flock, and the holder's name is a row the refused command reads (state/pg.py). Such a claim can be lost with the
connection: `ensure_held`, called before each remote command, stops the run there (LockLost).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from orchestrator.errors import LockHeld, LockLost
from orchestrator.store import store
from orchestrator.store.store import Claims, Holder, LocalClaims

#: The router's claim: host names start with a letter or digit (inventory/models.py), so none is this.
ROUTER = "_router"
_HELD: dict[str, tuple[Claims, int, bool]] = {}  # name → (backend, depth, exclusive) held by this process
_MUTEX = threading.Lock()
_SECRET_ARG = re.compile(r"((?:api[-_]?key|token|secret|passw\w*)[\w-]*(?:=|\s+))\S+", re.IGNORECASE)


def claims_dir() -> Path:
    return LocalClaims.folder()


def holder(command: str) -> Holder:
    """This process as a claim's holder (a secret on the command line is masked)."""
    masked = _SECRET_ARG.sub(r"\1***", command)
    return Holder(store.user(), store.machine(), os.getpid(), masked, store.run_id(), store.now_text())


def _take(host: str, command: str, exclusive: bool) -> str | None:
    """Claim `host` (re-entrant); None when done, else who holds it."""
    with _MUTEX:
        if host in _HELD:
            backend, depth, excl = _HELD[host]
            _HELD[host] = (backend, depth + 1, excl)
            return None
        backend = store.current().claims
        who = backend.take(host, holder(command), exclusive)
        if who is not None:
            return who.text() if isinstance(who, Holder) else who
        _HELD[host] = (backend, 1, exclusive)
        return None


def _release(host: str) -> None:
    with _MUTEX:
        backend, depth, excl = _HELD[host]
        if depth > 1:
            _HELD[host] = (backend, depth - 1, excl)
            return
        del _HELD[host]
        backend.release(host)


def ensure_held() -> None:
    """A safe point (before each remote command of a run): a claim held in a team store whose connection was lost
    is gone (the server freed it), so the run stops here, before changing anything more."""
    with _MUTEX:
        backends = {id(b): b for b, _d, _e in _HELD.values()}
    for backend in backends.values():
        why = backend.lost()
        if why:
            raise LockLost(f"the claim of this run {backend.scope} is gone ({why}); stopped before changing "
                           "anything more",
                           fix="this run changed nothing after the store was lost; check the hosts with `deploy "
                               "status`, the store with `deploy state status`, then re-run (a fleet roll: "
                               "`--resume`)", step="claim")


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
    except BaseException:  # a claim file that cannot be opened (a link: ConfigError), a store lost: give back
        for host in taken:
            _release(host)
        raise
    if refused:
        for host in taken:
            _release(host)
        text = "; ".join(f"{_label(h)}: {who}" for h, who in refused.items())
        names = ", ".join(map(_label, refused))
        raise LockHeld(f"another deploy command {store.current().claims.scope} holds {names}: {text}",
                       fix="wait for it to finish (or stop it: it cleans up on Ctrl-C/SIGTERM); nothing was "
                           "planned or changed", step="claim")
    try:
        yield
    finally:
        for host in taken:
            _release(host)
