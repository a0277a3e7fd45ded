"""Which simulated host numbers a test session uses, so that it never collides with a running demo or session.

sim-N listens on 127.0.0.(N+1) (past sim-253 on 127.0.1.1, … as `deploy sim` numbers them: simulator.layout)
whatever its root, so two roots up at the same time need disjoint numbers. Each test process (the whole session,
or one pytest-xdist worker) owns a block of BLOCK consecutive numbers, laid out by the OFFSET_* constants below.
The blocks are found once per run, by the controlling process:
- DEPLOY_SIM_FIRST=N set: the run's blocks are N, N+BLOCK, … unchecked (the user chose them; a taken address then
  fails with the simulator's "already in use" message);
- otherwise: each block is the first run of BLOCK numbers from AUTO_FIRST on (past 253 too) whose addresses are
  all free and that no other test run has reserved (a lock file per number, held until this run ends, covers the
  time before its hosts are up), so `bash scripts/demo.sh` (sim-1) and other test runs can keep running beside
  this one. The blocks need not touch: sim-170 and sim-240 taken by others leave room for five blocks of 14
  between them and after. When there is no room at all, the run stops with a usage error that says so (NoRoom).
Worker gwK of pytest-xdist takes the K-th block.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from simulator.layout import MAX_HOST_NUMBER, host_address

FIRST_ENV = "DEPLOY_SIM_FIRST"  # the user's override
BASE_ENV = "DEPLOY_TEST_SIM_BASE"  # the block starts chosen by the controlling process (comma-separated), for workers
AUTO_FIRST = 150  # away from the demo's sim-1 and from the round numbers people pick by hand (10, 20, … 120)
BLOCK = 14  # host numbers per test process
LAST = MAX_HOST_NUMBER  # the simulator's own last number (its addresses stay inside 127.0.0.0/8)

# What each number of a block is for (add one here when a test starts another simulated root).
OFFSET_SESSION_HOST = 0  # the session's sim_host (tests/conftest.py)
OFFSET_SECOND_ROOT = 1  # tests/sim/test_lifecycle.py, test_sim_inventory.py: up/down of a second root in one test
OFFSET_VM_HOST = 2  # tests/e2e/test_up_failures.py: the VM-passthrough host
OFFSET_ADDRESS_TAKEN = 3  # tests/sim/test_address_in_use.py: a number whose address the test itself occupies
OFFSET_FLEET = 4  # tests/e2e/test_fleet.py: three hosts of one root (4, 5, 6)
OFFSET_ROUTER_API = 7  # tests/e2e/test_fleet.py: a router and a stand-in worker (7, 8)
OFFSET_FLEET_ROUTER = 9  # tests/e2e/test_fleet.py: the router in front of the fleet's servers
OFFSET_ROUTER_UP = 10  # tests/e2e/test_fleet_router.py: two hosts, the router managed by `up` (10, 11)
OFFSET_LXC = 12  # tests/sim/test_lxc_*.py, tests/e2e/test_up_real_container.py, test_debian13.py: a host per module
OFFSET_SITE_TEMPLATE = 13  # tests/e2e/site_template.py: the host that provisions and dumps the site template

PORTS = (2222, 8006)  # simulator.config.SSH_PORT, API_PORT


def address(number: int) -> str:
    return host_address(number)


class NoRoom(RuntimeError):
    """No run of free host numbers is left: tests/conftest.py reports it as a usage error, not an INTERNALERROR."""


def number_free(number: int, ports: tuple[int, ...] = PORTS) -> bool:
    """True if nothing is bound on sim-<number>'s address and ports (a bind attempt, so nothing is contacted)."""
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT leftover is not "in use"
            try:
                s.bind((address(number), port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return False
                raise
    return True


LOCK_DIR = Path(tempfile.gettempdir()) / "deploy-test-sim-numbers"
_held: list[IO[str]] = []  # lock files of the numbers this process reserved: released when it exits


def reserve(numbers: range) -> int | None:
    """Take the lock of every number (non-blocking); on a refusal release what was taken and return the number
    another run holds (None: all taken for this run)."""
    LOCK_DIR.mkdir(exist_ok=True)
    taken: list[IO[str]] = []
    for n in numbers:
        fh = open(LOCK_DIR / f"sim-{n}.lock", "w")  # noqa: SIM115 (held open until the process exits)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            for other in taken:
                other.close()
            return n
        taken.append(fh)
    _held.extend(taken)
    return None


def first_fit(count: int, start: int, last: int, refused: Callable[[range], int | None]) -> int | None:
    """Pure: the lowest first >= `start` whose `count` numbers (up to `last`) `refused` takes (it returns None),
    else None. `refused(numbers)` names a number it cannot have; the search goes on just past it."""
    first = start
    while first + count - 1 <= last:
        bad = refused(range(first, first + count))
        if bad is None:
            return first
        first = bad + 1
    return None


def find_blocks(blocks: int, count: int, start: int, last: int,
                refused: Callable[[range], int | None]) -> list[int] | None:
    """Pure: the starts of `blocks` disjoint runs of `count` numbers, each the first fit after the one before;
    None when they do not all fit up to `last`."""
    starts: list[int] = []
    for _ in range(blocks):
        first = first_fit(count, starts[-1] + count if starts else start, last, refused)
        if first is None:
            return None
        starts.append(first)
    return starts


def _refused(hold: bool, ports: tuple[int, ...]) -> Callable[[range], int | None]:
    """A taken number (something listens there), else with `hold` one another run reserved; None: these are
    this run's now (reserved when `hold`)."""
    def refused(numbers: range) -> int | None:
        busy = next((n for n in numbers if not number_free(n, ports)), None)
        if busy is not None or not hold:
            return busy
        return reserve(numbers)
    return refused


def _no_room(what: str, start: int) -> NoRoom:
    return NoRoom(f"no {what} free simulated host numbers from sim-{start} to sim-{LAST} ({address(start)} to "
                  f"{address(LAST)}): other simulated hosts or test runs hold them; stop simulated hosts you do not "
                  f"need with `deploy sim down --root R`, or set {FIRST_ENV}=N to pick the numbers yourself")


def find_free_start(count: int, start: int = AUTO_FIRST, hold: bool = False, ports: tuple[int, ...] = PORTS) -> int:
    """The first start >= `start` whose `count` consecutive numbers are all free (and, with `hold`, not reserved
    by another run: they are then reserved for this one); NoRoom when there is none."""
    first = first_fit(count, start, LAST, _refused(hold, ports))
    if first is None:
        raise _no_room(str(count), start)
    return first


def choose_bases(workers: int) -> list[int]:
    """The start of each worker's block (called once, by the controlling process)."""
    chosen = os.environ.get(FIRST_ENV)
    if chosen:
        first = int(chosen)
        if not 1 <= first <= LAST - BLOCK * workers + 1:
            raise ValueError(f"{FIRST_ENV}={chosen}: {workers} block(s) of {BLOCK} numbers must fit in 1..{LAST}")
        return [first + BLOCK * k for k in range(workers)]
    starts = find_blocks(workers, BLOCK, AUTO_FIRST, LAST, _refused(True, PORTS))
    if starts is None:
        raise _no_room(f"{workers} block(s) of {BLOCK}", AUTO_FIRST)
    return starts


def worker_index() -> int:
    """0 for a plain run; K for pytest-xdist worker gwK."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw") or 0)


def sim_number(offset: int) -> int:
    """The host number this process uses for `offset` (one of the OFFSET_* constants)."""
    index = worker_index()
    bases = [int(b) for b in (os.environ.get(BASE_ENV) or os.environ.get(FIRST_ENV) or "").split(",") if b]
    if not bases:
        bases = [find_free_start(BLOCK)]
    # One start for several workers: DEPLOY_SIM_FIRST set in a worker's environment by hand (blocks follow on).
    start = bases[index] if index < len(bases) else bases[0] + BLOCK * index
    return start + offset


def claim(offset: int, count: int = 1, ports: tuple[int, ...] = PORTS) -> int:
    """The first of `count` numbers for `offset`, proven free now, just before the caller binds them.

    The run's block was free when the run began, but a simulated host started since (a demo, another root on a
    number picked by hand) may sit on one of its numbers. Then the numbers move to the first free run of `count`
    that no other test run has reserved (reserved now for this one), instead of failing with "already in use".
    """
    planned = sim_number(offset)
    if all(number_free(n, ports) for n in range(planned, planned + count)):
        return planned
    return find_free_start(count, start=1, hold=True, ports=ports)
