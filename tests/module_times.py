"""The time of each test module: printed at the end of a run, and used to hand the slowest modules out first.

A module's time is the sum of its tests' setup, call and teardown, as reported to the controlling process: the
module- and session-scoped fixtures are counted in the test that first needed them.

Under xdist (`--dist loadfile --no-loadscope-reorder`, scripts/test.sh) modules go to the processes in collection
order. `order_by_time` puts the modules that took longest in the last measured run (tests/module_times.txt) first,
so that no long module starts last and runs alone at the end. `DEPLOY_TEST_TIMES_FILE=PATH` writes this run's
times there, in that file's format.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest

_seconds: dict[str, float] = defaultdict(float)
SHOWN = 30  # modules listed one by one, slowest first
MEASURED = Path(__file__).with_name("module_times.txt")
HEADER = """\
# Seconds each test module took in a whole run (5 processes, this class of 2-core machine), slowest first.
# scripts/test.sh hands modules to its processes in this order (tests/module_times.py), so the longest start first
# and none is left running alone at the end. Only the order matters; a module not listed runs after these.
# Refresh: DEPLOY_TEST_TIMES_FILE=tests/module_times.txt bash scripts/test.sh
"""


def measured_times(path: Path = MEASURED) -> dict[str, float]:
    """Module path -> seconds, from a times file (missing or unreadable: none)."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    times: dict[str, float] = {}
    for line in text.splitlines():
        seconds, _, module = line.partition(" ")
        if line.startswith("#") or not module:
            continue
        try:
            times[module.strip()] = float(seconds)
        except ValueError:
            continue
    return times


def order_by_time(items: list[pytest.Item], times: dict[str, float]) -> None:
    """Modules by measured time, longest first (unknown modules last, in their order); tests keep their order
    within a module."""
    rank = {module: i for i, module in enumerate(sorted(times, key=lambda m: -times[m]))}
    position = {item: i for i, item in enumerate(items)}
    items.sort(key=lambda item: (rank.get(item.nodeid.split("::")[0], len(rank)), position[item]))


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
    out = os.environ.get("DEPLOY_TEST_TIMES_FILE")
    if out:
        lines = [f"{seconds:.0f} {module}" for module, seconds in ranked if seconds >= 5]
        Path(out).write_text(HEADER + "\n".join(lines) + "\n")
        terminalreporter.write_line(f"module times written to {out}")
