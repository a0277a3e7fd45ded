"""Which simulated host numbers a test session uses, so that it never collides with a running demo or session.

sim-N listens on 127.0.0.(N+1) (:2222 sshd, :8006 API) whatever its root, so two roots up at the same time need
disjoint numbers. Each test process (the whole session, or one pytest-xdist worker) owns a block of BLOCK
numbers, laid out by the OFFSET_* constants below. The block is found once per run, by the controlling process:
- DEPLOY_SIM_FIRST=N set: the run starts at N, unchecked (the user chose it; a taken address then fails with the
  simulator's "already in use" message);
- otherwise: the first block from AUTO_FIRST on whose addresses are all free and that no other test run has
  reserved (a lock file per number, held until this run ends, covers the time before its hosts are up), so
  `bash scripts/demo.sh` (sim-1) and another test run (its own block) can keep running beside this one.
Worker gwK of pytest-xdist takes the K-th block after that start.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import tempfile
from pathlib import Path
from typing import IO

FIRST_ENV = "DEPLOY_SIM_FIRST"  # the user's override
BASE_ENV = "DEPLOY_TEST_SIM_BASE"  # the start chosen by the controlling process, handed to xdist workers
AUTO_FIRST = 150  # away from the demo's sim-1 and from the round numbers people pick by hand (10, 20, … 120)
BLOCK = 14  # host numbers per test process
LAST = 253  # sim-253 is 127.0.0.254

# What each number of a block is for (add one here when a test starts another simulated root).
OFFSET_SESSION_HOST = 0  # the session's sim_host (tests/conftest.py)
OFFSET_SECOND_ROOT = 1  # tests/sim/test_lifecycle.py, test_sim_inventory.py: up/down of a second root in one test
OFFSET_VM_HOST = 2  # tests/e2e/test_up_failures.py: the VM-passthrough host
OFFSET_ADDRESS_TAKEN = 3  # tests/sim/test_address_in_use.py: a number whose address the test itself occupies
OFFSET_FLEET = 4  # tests/e2e/test_fleet.py: three hosts of one root (4, 5, 6)
OFFSET_ROUTER_API = 7  # tests/e2e/test_fleet.py: a router and a stand-in worker (7, 8)
OFFSET_FLEET_ROUTER = 9  # tests/e2e/test_fleet.py: the router in front of the fleet's servers
OFFSET_ROUTER_UP = 10  # tests/e2e/test_fleet_router.py: two hosts, the router managed by `up` (10, 11)
OFFSET_LXC = 12  # tests/sim/test_lxc_*.py, tests/e2e/test_up_real_container.py: a host per module
OFFSET_SITE_TEMPLATE = 13  # tests/e2e/site_template.py: the host that provisions and dumps the site template

PORTS = (2222, 8006)  # simulator.config.SSH_PORT, API_PORT


def address(number: int) -> str:
    return f"127.0.0.{number + 1}"


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


def reserve(numbers: range) -> bool:
    """Take the lock of every number (non-blocking); on any refusal release what was taken and say False."""
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
            return False
        taken.append(fh)
    _held.extend(taken)
    return True


def find_free_start(count: int, start: int = AUTO_FIRST, block: int = BLOCK, hold: bool = False,
                    ports: tuple[int, ...] = PORTS) -> int:
    """The first start >= `start`, in steps of `block`, whose `count` consecutive numbers are all free (and, with
    `hold`, not reserved by another run: they are then reserved for this one)."""
    for first in range(start, LAST - count + 2, block):
        numbers = range(first, first + count)
        if all(number_free(n, ports) for n in numbers) and (not hold or reserve(numbers)):
            return first
    raise RuntimeError(f"no {count} free simulated host numbers from {start} to {LAST} (127.0.0.{start + 1}-254 "
                       f"all taken?): stop other simulated hosts with `deploy sim down`, or set {FIRST_ENV}=N")


def choose_base(workers: int) -> int:
    """The start of this run's numbers (called once, by the controlling process)."""
    chosen = os.environ.get(FIRST_ENV)
    if chosen:
        first = int(chosen)
        if not 1 <= first <= LAST - BLOCK * workers + 1:
            raise ValueError(f"{FIRST_ENV}={chosen}: {workers} block(s) of {BLOCK} numbers must fit in 1..{LAST}")
        return first
    return find_free_start(BLOCK * workers, hold=True)


def worker_index() -> int:
    """0 for a plain run; K for pytest-xdist worker gwK."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw") or 0)


def sim_number(offset: int) -> int:
    """The host number this process uses for `offset` (one of the OFFSET_* constants)."""
    base = os.environ.get(BASE_ENV) or os.environ.get(FIRST_ENV)
    start = int(base) if base else find_free_start(BLOCK)
    return start + BLOCK * worker_index() + offset


def claim(offset: int, count: int = 1, ports: tuple[int, ...] = PORTS) -> int:
    """The first of `count` numbers for `offset`, proven free now, just before the caller binds them.

    The run's block was free when the run began, but a simulated host started since (a demo, another root on a
    number picked by hand) may sit on one of its numbers. Then the numbers move to the first free run of `count`
    that no other test run has reserved (reserved now for this one), instead of failing with "already in use".
    """
    planned = sim_number(offset)
    if all(number_free(n, ports) for n in range(planned, planned + count)):
        return planned
    return find_free_start(count, start=1, block=1, hold=True, ports=ports)
