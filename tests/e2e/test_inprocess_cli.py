"""The in-process CLI (tests/e2e/inprocess.py) answers as the `deploy` process does, and leaves this process as
it found it: the e2e suite relies on both when it runs the CLI in-process to save a second per call.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading

from orchestrator import redact
from tests.e2e.conftest import DeployEnv, Result, until


def _same_words(a: str, b: str) -> str:
    """Text with figures (durations, times) blanked, so two runs of one command compare equal."""
    return re.sub(r"\d+(\.\d+)?", "N", " ".join(a.split())) if a else a


def _alike(inproc: Result, process: Result) -> None:
    assert inproc.rc == process.rc, (inproc.text, process.text)
    assert _same_words(inproc.stdout, process.stdout) == _same_words(process.stdout, process.stdout)
    assert _same_words(inproc.stderr, process.stderr) == _same_words(process.stderr, process.stderr)


def test_exit_codes_stdout_and_stderr_match_the_process(deploy_env: DeployEnv) -> None:
    env = deploy_env
    for args in (("doctor", "host", env.host),  # real SSH and the PVE API, text on stdout
                 ("up", "--skip-benhc"),  # click's usage error (exit 2)
                 ("--json", "up", "--skip-benhc"),  # the same as JSON on stdout
                 ("status", "host", "no-such-host"),  # the tool's own error: one line on stderr, exit 2
                 ("--version",)):
        inproc, process = env.run(*args), env.run_process(*args)
        _alike(inproc, process)
        assert "Traceback" not in inproc.text, inproc.text


def test_a_run_leaves_the_test_process_as_it_found_it(deploy_env: DeployEnv) -> None:
    env = deploy_env
    env.env["E2E_API_KEY"] = "sk-inprocess-0123456789"
    env.set_profile(api_key={"env": "E2E_API_KEY"})  # registered as a secret by the run that reads it
    environ, cwd, argv = dict(os.environ), os.getcwd(), list(sys.argv)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    threads = set(threading.enumerate())
    stdout, stderr = sys.stdout, sys.stderr

    res = env.run("--json", "plan", "host", env.host)
    assert res.rc == 0, res.text
    assert "sk-inprocess-0123456789" not in res.text

    assert dict(os.environ) == environ and os.getcwd() == cwd and sys.argv == argv
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert sys.stdout is stdout and sys.stderr is stderr  # the redacting wrappers went with the run's streams
    assert redact.registered_count() == 0  # the next run starts without this run's secrets, as a process would
    left = until(lambda: not [t for t in threading.enumerate() if t not in threads and t.is_alive()], 10)
    assert left, [t.name for t in threading.enumerate() if t not in threads]  # SSH connections closed
