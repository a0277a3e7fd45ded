"""Skip policy (a pytest plugin, loaded by tests/conftest.py): the only skip a run may end with is "no GPU".

A skip hides a test that did not run; in CI that must be a failure unless the machine simply has no GPU. Tests
marked `gpu` are skipped here, with GPU_SKIP_REASON, when there is no CUDA GPU; any other skip (a missing tool,
no root, a missing file) is collected and turns the session's exit status into "tests failed", with a list of
what was skipped and why. `--allow-skips` turns the check off for a local run (e.g. unit tests as non-root).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pytest

GPU_MARKER = "gpu"
GPU_SKIP_REASON = "no GPU: needs an NVIDIA GPU and torch with CUDA"


@cache
def have_gpu() -> bool:
    """A CUDA GPU that torch can use (the only thing a `gpu` test needs beyond the repository)."""
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)


def skip_reason(longrepr: Any) -> str:
    """The reason of a skip report: pytest stores (path, line, "Skipped: reason"); xdist sends it as a list."""
    triple = isinstance(longrepr, tuple | list) and len(longrepr) == 3
    text = str(longrepr[2]) if triple else str(longrepr)
    return text.removeprefix("Skipped: ")


def allowed(reason: str, keywords: Any) -> bool:
    return reason == GPU_SKIP_REASON and GPU_MARKER in (keywords or {})


@dataclass(eq=False)  # a registered plugin must be hashable
class SkipPolicy:
    """Collects every disallowed skip of the session; fails the session at its end if there was one."""

    strict: bool
    disallowed: list[tuple[str, str]] = field(default_factory=list)

    def note(self, nodeid: str, longrepr: Any, keywords: Any) -> None:
        reason = skip_reason(longrepr)
        if not allowed(reason, keywords):
            self.disallowed.append((nodeid, reason))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.note(report.nodeid, report.longrepr, report.keywords)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:
            self.note(report.nodeid, report.longrepr, None)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.strict and self.disallowed and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.disallowed:
            return
        title = "skips that fail this run" if self.strict else "skips (allowed by --allow-skips)"
        terminalreporter.section(title, sep="=", red=self.strict, yellow=not self.strict)
        for nodeid, reason in self.disallowed:
            terminalreporter.line(f"SKIPPED {nodeid}: {reason}")
        if self.strict:
            terminalreporter.line(f"only '{GPU_SKIP_REASON}' (tests marked {GPU_MARKER}) may be skipped; make the "
                                  "missing part available (scripts/install.sh installs every tool the suite uses, "
                                  "root runs the simulator), or pass --allow-skips for a local run")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--allow-skips", action="store_true", default=False,
                     help="do not fail the run when a test is skipped for a reason other than 'no GPU'")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{GPU_MARKER}: needs a real NVIDIA GPU; skipped without one")
    config.pluginmanager.register(SkipPolicy(strict=not config.getoption("allow_skips")), "deploy-skip-policy")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker(GPU_MARKER)]
    if gpu_items and not have_gpu():
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=GPU_SKIP_REASON))
