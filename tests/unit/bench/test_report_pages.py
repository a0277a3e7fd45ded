"""Issue 52: every HTML report the tool writes, opened in a real headless Chromium: it renders (text, the embedded
plot decoded), a screenshot is taken, and no script error, console error or outside request occurs. The reports
are the sweep's (`bench --sweep`/`--sweep-server`) and the tune's (`tune`); the e2e tests check the same on the
reports of real runs against the simulator."""

from __future__ import annotations

from pathlib import Path

from orchestrator.bench.report import SweepResult, write_sweep_report
from orchestrator.tune.report import write_tune_report
from tests.browser import check_page
from tests.unit.bench.test_bench_report import points
from tests.unit.tune.test_tune_plan import _record


def test_the_sweep_report_renders_without_error(tmp_path: Path) -> None:
    result = SweepResult(parameter="max-concurrency", points=tuple(points()), host="pve-gpu-1", preset="quick")
    _, page = write_sweep_report(result, tmp_path)
    check = check_page(page)
    assert check.problems() == [], check.problems()
    assert check.screenshot_size[0] >= 800 and check.text_chars > 200


def test_the_tune_report_renders_without_error(tmp_path: Path) -> None:
    _, page = write_tune_report(_record(), tmp_path, 8, ["verdict: best goodput"])
    check = check_page(page)
    assert check.problems() == [], check.problems()
    assert check.screenshot_size[0] >= 800 and check.text_chars > 100
