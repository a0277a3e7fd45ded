"""Prints the time of each test module at the end of a run, so a slow module is seen without reading durations.

A module's time is the sum of its tests' setup, call and teardown, as reported to the controlling process: the
module- and session-scoped fixtures are counted in the test that first needed them.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

_seconds: dict[str, float] = defaultdict(float)
SHOWN = 30  # modules listed one by one, slowest first


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds[report.nodeid.split("::")[0]] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not _seconds:
        return
    ranked = sorted(_seconds.items(), key=lambda item: -item[1])
    terminalreporter.write_sep("=", "time per module (setup, tests and teardown)")
    for module, seconds in ranked[:SHOWN]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {module}")
    if len(ranked) > SHOWN:
        rest = ranked[SHOWN:]
        terminalreporter.write_line(f"{sum(s for _, s in rest):8.1f} s  the other {len(rest)} modules")
    terminalreporter.write_line(f"{sum(_seconds.values()):8.1f} s  all modules, over every process")
