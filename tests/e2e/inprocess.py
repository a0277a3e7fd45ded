"""The `deploy` CLI run inside the test process, as a separate process would run it, minus the start-up.

A `python -m orchestrator` costs about a second of interpreter start and imports per call, and the e2e suite makes
about 150 calls; here the same click entry point runs in this process with what a fresh process would have:
exactly the given environment, the repository as working directory, `sys.argv` as `python -m orchestrator ARGS`
sets it, empty stdin, stdout and stderr captured apart (not terminals), no secret registered by an earlier run,
and the signal handlers and warning filters of the test process restored afterwards. Everything the command does
on the host still goes over real SSH and HTTPS to the simulator. An exception that escapes the CLI is printed to
stderr as Python prints an uncaught one (exit 1), so "no traceback" assertions read the same text.

Tests about the process itself (signals, exit codes 130/143, a run killed half-way, `--help` start-up) use
`DeployEnv.run_process` / `popen`. `DEPLOY_TEST_CLI=process` sends every call through a subprocess, to check that
the in-process path hides nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from click.testing import CliRunner

MODE_ENV = "DEPLOY_TEST_CLI"  # "process": every DeployEnv.run is a subprocess
MAIN = Path(__file__).resolve().parents[2] / "orchestrator" / "__main__.py"
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_lock = threading.Lock()  # one in-process run at a time: environment, cwd and argv are process-wide


def subprocess_forced() -> bool:
    return os.environ.get(MODE_ENV, "") == "process"


def _fresh_tool_state() -> None:
    """What a new process starts without: the secrets a run registered, the once-per-process warnings."""
    from orchestrator import redact
    from orchestrator.remote import pve

    redact.forget_secrets()
    pve._warned_unverified.clear()


class _Interrupts:
    """Ctrl-C during an in-process run: the run unwinds as the CLI would (exit 130, lock released), then the test
    session stops as it would have, instead of counting the interrupted run as a failed test."""

    def __init__(self) -> None:
        self.seen = False

    def __call__(self, signum: int, frame: Any) -> None:
        self.seen = True
        raise KeyboardInterrupt


@contextlib.contextmanager
def _process_state(env: Mapping[str, str], cwd: Path, argv: list[str]) -> Iterator[_Interrupts]:
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    main_thread = threading.current_thread() is threading.main_thread()
    saved_handlers: dict[int, Any] = {s: signal.getsignal(s) for s in _SIGNALS} if main_thread else {}
    interrupts = _Interrupts()
    if main_thread:
        signal.signal(signal.SIGINT, interrupts)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = argv
    _fresh_tool_state()
    try:
        with warnings.catch_warnings():
            yield interrupts
    finally:
        for sig, handler in saved_handlers.items():
            signal.signal(sig, handler)
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        _fresh_tool_state()


def run_cli(args: Sequence[str], env: Mapping[str, str], cwd: Path) -> tuple[int, str, str]:
    """`deploy ARGS` in this process: (exit code, stdout, stderr) as the subprocess would give them."""
    from orchestrator.cli import cli

    with _lock, _process_state(env, cwd, [str(MAIN), *args]) as interrupts:
        result = CliRunner(catch_exceptions=True).invoke(cli, list(args), prog_name="deploy")
    if interrupts.seen:
        raise KeyboardInterrupt
    stderr = result.stderr
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        stderr += "".join(traceback.format_exception(exc))
    return result.exit_code, result.stdout, stderr
