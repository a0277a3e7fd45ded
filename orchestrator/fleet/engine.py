"""The fleet engine: run one job per host on a pool of at most `parallel` worker threads.

Why a pool and not a thread per host: at several hundred hosts, a thread, an SSH connection (paramiko adds a
transport thread each) and a socket per host would be the cost. Here a worker takes the next host only when its
previous run has ended, and each run closes its own connection, so threads and sockets stay bounded by
`parallel`. The engine samples both (threads, open socket descriptors) so the bound is measured, not assumed.

Workers never print: they post events to a queue that the calling thread drains (live view, plain lines). That
queue is a `queue.SimpleQueue` (C, no Python-level lock): a `queue.Queue` takes its mutex in Python code, and a
signal landing just after that acquire (Condition.__enter__) left the mutex held, so the next get hung the run.
A failing host never stops the others unless `fail_fast`; then hosts not yet started are reported as skipped.
"""

from __future__ import annotations

import _thread
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.local.crash import describe_bug

#: Hosts run at once unless --parallel says otherwise.
DEFAULT_PARALLEL = 8
HostResult = Literal["ok", "changed", "would change", "failed", "skipped"]


@dataclass
class HostOutcome:
    """One host's result: what the single-host command would have printed as --json is `report`."""

    host: str
    result: HostResult
    exit_code: int = 0
    report: dict[str, Any] | None = None
    duration_s: float = 0.0
    ssh_round_trips: int | None = None
    changed_steps: list[str] = field(default_factory=list)
    detail: str = ""
    # What others say about this host, e.g. {"router": {...}} from the router's worker list.
    extras: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "result": self.result, "exit_code": self.exit_code,
                "duration_s": round(self.duration_s, 3), "ssh_round_trips": self.ssh_round_trips,
                "changed_steps": self.changed_steps, "detail": self.detail, **self.extras, "report": self.report}


@dataclass(frozen=True)
class Event:
    """Posted by a worker: a host started, entered a step, ended a step (its status and seconds), said something,
    or finished."""

    host: str
    kind: Literal["start", "step", "ended", "say", "done"]
    text: str = ""
    outcome: HostOutcome | None = None
    status: str = ""
    duration_s: float = 0.0


class HostEvents:
    """The handle a job uses to report progress; thread-safe (a queue)."""

    def __init__(self, host: str, sink: queue.SimpleQueue[Event]) -> None:
        self.host = host
        self._sink = sink

    def step(self, name: str) -> None:
        self._sink.put(Event(self.host, "step", name))

    def ended(self, name: str, status: str, duration_s: float) -> None:
        self._sink.put(Event(self.host, "ended", name, status=status, duration_s=duration_s))

    def say(self, text: str) -> None:
        self._sink.put(Event(self.host, "say", text))


Job = Callable[[str, HostEvents], HostOutcome]


def open_sockets() -> int:
    """Socket descriptors of this process (SSH connections, API sessions): the 'open connections' count."""
    count = 0
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return -1
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            continue
    return count


@dataclass
class EngineStats:
    """What the engine used, sampled at every event and every tick of the calling thread."""

    parallel: int
    workers: int = 0
    peak_running: int = 0
    peak_threads: int = 0
    peak_open_sockets: int = 0
    baseline_threads: int = 0
    baseline_open_sockets: int = 0
    samples: int = 0

    def sample(self, running: int) -> None:
        self.samples += 1
        self.peak_running = max(self.peak_running, running)
        self.peak_threads = max(self.peak_threads, threading.active_count())
        self.peak_open_sockets = max(self.peak_open_sockets, open_sockets())

    def to_dict(self) -> dict[str, Any]:
        return {"parallel": self.parallel, "workers": self.workers, "peak_running": self.peak_running,
                "peak_threads": self.peak_threads, "baseline_threads": self.baseline_threads,
                "peak_open_sockets": self.peak_open_sockets, "baseline_open_sockets": self.baseline_open_sockets,
                "samples": self.samples}


@dataclass
class FleetRun:
    outcomes: list[HostOutcome]
    stats: EngineStats
    duration_s: float

    @property
    def exit_code(self) -> int:
        """The worst host's exit code (3 remote > 2 config > 1 check failed > 0)."""
        return max((o.exit_code for o in self.outcomes), default=0)


_new_lock = threading.Lock  # a name tests can replace with a lock that is hit by a signal

#: The signals a fleet run ends on (orchestrator/cli/common.py turns SIGTERM and SIGHUP into KeyboardInterrupt).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def noted_stops() -> Iterator[list[BaseException]]:
    """While the block runs, each stop a signal handler raises is also recorded (yielded list) before it is raised.

    Why: Python swallows an exception raised inside a weakref callback or a `__del__` ("Exception ignored in …"),
    and a signal's handler runs wherever the main thread is, those included. A Ctrl-C that landed there was lost:
    the run went on as if never stopped (a job waiting for the cancel waited for good). The record survives the
    swallow, and the run's loop stops on it. Main thread only (signals are delivered there); handlers that are not
    Python callables (SIG_DFL, SIG_IGN) are left alone."""
    stops: list[BaseException] = []
    if threading.current_thread() is not threading.main_thread():
        yield stops
        return
    old: dict[int, Any] = {}

    def noting(prev: Callable[[int, Any], Any]) -> Callable[[int, Any], Any]:
        def handler(signum: int, frame: Any) -> Any:
            try:
                return prev(signum, frame)
            except BaseException as exc:
                stops.append(exc)
                raise
        return handler

    for sig in STOP_SIGNALS:
        prev = signal.getsignal(sig)
        if callable(prev):
            old[sig] = prev
            signal.signal(sig, noting(prev))
    try:
        yield stops
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


def _join(worker: threading.Thread) -> None:
    """Wait for a worker. One the launcher is starting may run before `start()` has marked it started, which `join`
    refuses (RuntimeError): the launcher marks it at once, so wait for that."""
    while True:
        try:
            worker.join()
            return
        except RuntimeError:  # "cannot join thread before it is started"
            time.sleep(0.005)


def run_fleet(hosts: Sequence[str], job: Job, *, parallel: int, fail_fast: bool = False,
              on_event: Callable[[Event], None] | None = None, on_tick: Callable[[], None] | None = None,
              tick_s: float = 0.2, cancel: threading.Event | None = None) -> FleetRun:
    """Run `job(host, events)` for every host on min(parallel, len(hosts)) workers; outcomes keep host order.

    `job` must not raise (the engine turns a stray exception into a failed outcome anyway, so one bad host
    cannot take the others down). `on_event` (each event) and `on_tick` (every tick_s without one) run on the
    calling thread only.

    Signals arrive in the calling thread (Ctrl-C, SIGTERM and SIGHUP as KeyboardInterrupt) while the hosts' work
    and its leases live in the workers. With `cancel`, the first one sets it (jobs observe it and end through their
    own cleanup), no further host starts, the workers are waited for, then the KeyboardInterrupt is re-raised; a
    second one stops waiting. Without `cancel` it propagates at once.
    """
    with noted_stops() as noted:
        return _run_fleet(hosts, job, parallel=parallel, fail_fast=fail_fast, on_event=on_event, on_tick=on_tick,
                          tick_s=tick_s, cancel=cancel, noted=noted)


def _run_fleet(hosts: Sequence[str], job: Job, *, parallel: int, fail_fast: bool,
               on_event: Callable[[Event], None] | None, on_tick: Callable[[], None] | None,
               tick_s: float, cancel: threading.Event | None, noted: list[BaseException]) -> FleetRun:
    if parallel < 1:
        raise ValueError("parallel must be >= 1")
    stats = EngineStats(parallel=parallel, baseline_threads=threading.active_count(),
                        baseline_open_sockets=open_sockets())
    # SimpleQueue, not Queue: the calling thread must hold no Python-level lock when a signal lands (see `lock`).
    events: queue.SimpleQueue[Event] = queue.SimpleQueue()
    outcomes: dict[int, HostOutcome] = {}
    # Held by the workers only. The calling thread never takes it: a signal raised between a lock's acquire and
    # its `with` block leaves it held for good, and the next acquire (the workers', or the handler's own) would
    # wait forever; a Ctrl-C that landed there hung a fleet run instead of ending it.
    lock = _new_lock()
    next_index = 0
    running = 0
    ended = 0  # workers that ended (or never started): the calling thread reads it without the lock
    stop = False
    start = time.monotonic()

    def take() -> int | None:
        nonlocal next_index, running
        with lock:
            if stop or (cancel is not None and cancel.is_set()) or next_index >= len(hosts):
                return None
            index = next_index
            next_index += 1
            running += 1
            return index

    def worker() -> None:
        try:
            work()
        finally:
            end_one()

    def end_one() -> None:
        nonlocal ended
        with lock:
            ended += 1

    def work() -> None:
        nonlocal running, stop
        while (index := take()) is not None:
            name = hosts[index]
            events.put(Event(name, "start"))
            began = time.monotonic()
            try:
                outcome = job(name, HostEvents(name, events))
            except Exception as exc:  # a bug in one host's run must not stop the fleet
                what, path = describe_bug(exc)
                outcome = HostOutcome(name, "failed", exit_code=1, detail=f"{what} (a bug in deploy)"
                                      + (f"; its traceback is in {path}" if path else ""))
            if not outcome.duration_s:
                outcome.duration_s = time.monotonic() - began
            with lock:
                outcomes[index] = outcome
                running -= 1
                if fail_fast and outcome.result == "failed":
                    stop = True
            events.put(Event(name, "done", outcome=outcome))

    threads = [threading.Thread(target=worker, name=f"deploy-fleet-{i}", daemon=True)
               for i in range(min(parallel, len(hosts)))]
    stats.workers = len(threads)
    interrupted: KeyboardInterrupt | None = None

    def on_signal(exc: KeyboardInterrupt) -> None:
        nonlocal interrupted, stop
        if cancel is None or interrupted is not None:
            raise exc
        interrupted = exc
        cancel.set()  # before `stop`: take() checks both, so no host starts after this line
        stop = True

    def launch() -> None:
        for t in threads:
            try:
                t.start()
            except RuntimeError:  # can't start a new thread: the others run the hosts
                end_one()

    # Started from a bare thread, never from the calling thread: Thread.start waits on a Condition in Python code,
    # and a signal raised just after that Condition's acquire left its lock held, so the new worker could never
    # begin and the run waited for it for good. A bare thread gets no Python signal handler.
    try:
        _thread.start_new_thread(launch, ())
    except KeyboardInterrupt as exc:  # the launcher may or may not run: no host starts now either way
        on_signal(exc)
    while True:
        try:
            lost = [s for s in noted if isinstance(s, KeyboardInterrupt) and s is not interrupted]
            if lost and interrupted is None:  # raised where Python swallowed it (see noted_stops)
                on_signal(lost[0])
            try:
                event = events.get(timeout=tick_s)
            except queue.Empty:
                event = None
            stats.sample(running)  # read without the lock (see `lock`): a sample may be one step stale
            if event is not None and on_event is not None:
                on_event(event)
            elif event is None and on_tick is not None:
                on_tick()
            # all workers ended; or stopped with no host running (a worker that was not started yet, or is
            # starting, takes none now): the joins below wait for the rest
            if event is None and (ended == len(threads) or (stop and running == 0)):
                break
        except KeyboardInterrupt as exc:
            on_signal(exc)
    for t in threads:
        if t.ident is not None:
            try:
                _join(t)
            except KeyboardInterrupt as exc:
                on_signal(exc)
                _join(t)
    while not events.empty():  # events posted just before the last worker ended
        event = events.get_nowait()
        if on_event is not None:
            on_event(event)
    ordered = [outcomes.get(i) or HostOutcome(hosts[i], "skipped", detail="not started (--fail-fast)"
                                              if interrupted is None else "not started (interrupted)")
               for i in range(len(hosts))]
    run = FleetRun(ordered, stats, time.monotonic() - start)
    if interrupted is not None:
        interrupted.run = run  # type: ignore[attr-defined]  # what ran, for the caller's report
        raise interrupted
    return run
