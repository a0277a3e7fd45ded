"""Issue 23: the tune's plan (--over against the sglang schema, --range, --budget), its record and ledger links,
and its report table: all refused or written before/without any remote change."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.flags.schema import FlagSchema
from orchestrator.ledger.sqlite import Ledger
from orchestrator.tune.plan import make_plan, parse_budget, parse_range
from orchestrator.tune.record import PointRecord, RunEntry, TuneRecord, load, save
from orchestrator.tune.report import tune_table, write_tune_report

SCHEMA = FlagSchema.load(FlagSchema.known_versions()[-1])


def test_points_are_the_product_of_the_over_values() -> None:
    plan = make_plan(("num-continuous-decode-steps=4,8", "--max-running-requests=512,1024"), "8:64:8", "30m", SCHEMA)
    assert plan.flags == ("num-continuous-decode-steps", "max-running-requests")
    assert [p.label for p in plan.points] == [
        f"num-continuous-decode-steps={s},max-running-requests={m}" for s in (4, 8) for m in (512, 1024)]
    assert plan.points[0].sets == ("num-continuous-decode-steps=4", "max-running-requests=512")
    assert plan.grid == (8, 16, 24, 32, 40, 48, 56, 64) and plan.max_runs_per_point == 5 and plan.budget_s == 1800


@pytest.mark.parametrize(("over", "words"), [
    (("max-runing-requests=1,2",), "did you mean --max-running-requests"),
    (("max-running=1,2",), "only a prefix"),
    (("max-running-requests",), "FLAG=V1,V2"),
    (("max-running-requests=1,1",), "twice"),
    (("max-running-requests=1", "max-running-requests=2"), "twice"),
    (("max-running-requests=1;reboot",), "not a plain flag value"),
    ((), "at least one --over"),
])
def test_bad_over_is_refused(over: tuple[str, ...], words: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_plan(over, "8:64", None, SCHEMA)
    assert words in str(err.value) and err.value.exit_code == 2


def test_range_and_budget() -> None:
    assert parse_range("16:64") == (16, 32, 48, 64) and parse_range("10:35:10") == (10, 20, 30, 35)
    for bad in ("64:8", "8", "a:b", "0:8", "8:8"):
        with pytest.raises(ConfigError):
            parse_range(bad)
    assert parse_budget("1h30m") == 5400 and parse_budget("90s") == 90 and parse_budget(None) is None
    for bad in ("soon", "0m", "30"):
        with pytest.raises(ConfigError):
            parse_budget(bad)


def _record() -> TuneRecord:
    run = RunEntry(run_id="r-1", concurrency=32, purpose="search", figures={"ttft_p99": 900.0}, output_tok_s=1000.0,
                   tok_s_per_w=2.5, j_per_token=0.4, power_pct_of_limit=35.0)
    good = PointRecord(label="steps=8", sets=["num-continuous-decode-steps=8"], status="done", limit=32,
                       runs=[run], search_runs=3, goodput={"n": 1, "mean": 1000.0, "stdev": 0.0, "ci95_low": 950.0,
                                                           "ci95_high": 1050.0, "min": 1000.0, "max": 1000.0})
    lost = PointRecord(label="steps=16", sets=["num-continuous-decode-steps=16"], status="lost",
                       reason="crash: the server did not come up")
    return TuneRecord(tune_id="t-20261201-000000-abcd", host="h", preset="quick", slo="ttft_p99<=2000ms",
                      over=["num-continuous-decode-steps=8,16"], range="8:64:8", started_at="2026-12-01T00:00:00",
                      points=[PointRecord(label="current", sets=[]), good, lost], winner="steps=8",
                      verdict="best goodput")


def test_record_round_trip_is_private(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path))
    path = save(_record())
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load("t-20261201-000000-abcd") == _record()
    with pytest.raises(ConfigError):
        load("t-20990101-000000-ffff")
    with pytest.raises(ConfigError):
        load("../ledger")


def test_runs_are_linked_to_the_tune(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    led.link_tune_run("t-1", "r-2", point="steps=8", concurrency=32, purpose="confirm")
    led.link_tune_run("t-1", "r-1", point="steps=8", concurrency=16, purpose="search")
    led.link_tune_run("t-2", "r-3", point="current", concurrency=8, purpose="search")
    assert led.tune_runs("t-1") == [("r-1", "steps=8", 16, "search"), ("r-2", "steps=8", 32, "confirm")]


def test_report_table_says_why_a_point_lost(tmp_path: Path) -> None:
    rec = _record()
    table = tune_table(rec, 8)
    rows = {r[0]: r for r in table.rows}
    assert rows["steps=8"][1] == "WINNER" and rows["steps=8"][2] == "32 (±8)"
    assert rows["steps=8"][3] == "1,000.0 ± 50.0 (n=1)" and rows["steps=8"][4] == "2.500"
    assert rows["steps=16"][1] == "lost" and rows["steps=16"][-1].startswith("crash:")
    png, page = write_tune_report(rec, tmp_path, 8, ["verdict: best goodput"])
    assert png.read_bytes()[:4] == b"\x89PNG" and "crash: the server did not come up" in page.read_text()


def test_a_huge_range_is_refused_by_arithmetic_before_any_grid_is_built() -> None:
    """Issue 38 item 6: `1:20000000` built a 1 GB grid before its size check; `1:999999999999` was MemoryError."""
    import time
    for text in ("1:20000000", "1:999999999999", "1:" + "9" * 40):
        start = time.process_time()
        with pytest.raises(ConfigError, match="more than"):
            parse_range(text)
        assert time.process_time() - start < 0.05, text  # counted, not listed
    assert parse_range("8:20:8") == (8, 16, 20)  # the grid itself is unchanged: high always included


@pytest.mark.parametrize("over", ["admin-api-key=secret-aaaa,secret-bbbb", "api-key=secret-aaaa",
                                  "--admin-api-key=x,y", "ssl-keyfile-password=aaaaaa,bbbbbb"])
def test_a_secret_flag_is_never_a_tune_dimension(over: str) -> None:
    """Issue 38 item 1: its values would be point labels, drawn in tune.png, written into report.html, the record
    and the ledger's tune_runs.point."""
    with pytest.raises(ConfigError, match="is a secret") as exc:
        make_plan((over,), "8:64:8", None, SCHEMA)
    assert "secret-aaaa" not in exc.value.what + (exc.value.fix or "")  # the refusal does not echo the value


def test_a_flag_the_profile_marks_secret_is_refused_too() -> None:
    with pytest.raises(ConfigError, match="is a secret"):
        make_plan(("served-model-name=a,b",), "8:64:8", None, SCHEMA, secret_flags=["served_model_name"])
    make_plan(("served-model-name=a,b",), "8:64:8", None, SCHEMA)  # not marked: an ordinary dimension


def test_a_huge_over_product_is_refused_by_arithmetic_before_any_point_is_built() -> None:
    """Like --range (issue 38 item 6): three --over of 300 values each made 27 million points (9 GB, 83 s) before
    their size check."""
    import time
    vals = ",".join(str(i) for i in range(1, 301))
    over = (f"max-running-requests={vals}", f"num-continuous-decode-steps={vals}", f"chunked-prefill-size={vals}")
    start = time.process_time()
    with pytest.raises(ConfigError, match="gives 27000000 flag points, more than 64"):
        make_plan(over, "8:64:8", None, SCHEMA)
    assert time.process_time() - start < 2.0


@pytest.mark.parametrize("text", ["9" * 5000 + "s", "9" * 400 + "h", "721h", "43201m"])
def test_an_absurd_budget_is_refused_not_an_internal_error(text: str) -> None:
    """A 5000-digit part was a ValueError of int(), a 400-digit one an OverflowError of float()."""
    with pytest.raises(ConfigError, match="more than 30 days"):
        parse_budget(text)
    assert parse_budget("720h") == 30 * 86400.0
