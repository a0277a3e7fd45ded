"""dmon: columns by header name, units line, '-' as None, repeated headers, optional Date/Time columns."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from orchestrator.parsers.dmon import DmonParseError, dmon_argv, parse_dmon
from tests.shared import H200_NVLINK

FIX = H200_NVLINK

# Header and row from reference/sglang.md 6.1 (-o T, older column order: rxpci/txpci before sbecc).
REFERENCE_T = """\
#Time         gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk  pviol  tviol     fb   bar1   ccpm  rxpci  txpci  sbecc  dbecc    pci
#HH:MM:SS     Idx      W      C      C      %      %      %      %      %      %    MHz    MHz      %   bool     MB     MB     MB   MB/s   MB/s   errs   errs   errs
 04:12:44       0    130     37     37     66     17      0      0      -      -    877   1530      0      0   4198      5      0    248     34      0      0      0
"""  # noqa: E501


def fixture(name: str) -> str:
    return (FIX / name).read_text()


def test_under_load_capture() -> None:
    t = parse_dmon(fixture("dmon-under-load.txt"))
    assert t.columns[:3] == ("gpu", "pwr", "gtemp")
    assert t.units["pwr"] == "W" and t.units["rxpci"] == "MB/s" and t.units["tviol"] == "bool"
    assert len(t.samples) == 12 and t.skipped_rows == 0
    last0 = [s for s in t.samples if s.gpu == 0][-1]
    assert last0.number("pwr") == 691.0
    assert last0.number("sm") == 100.0
    assert last0.number("pclk") == 1485.0
    assert last0.number("mclk") == 3201.0
    assert last0.number("rxpci") == 14.0 and last0.number("txpci") == 6.0
    assert last0.number("pviol") == 100.0
    assert last0.ts is None
    assert [s.tick for s in t.samples if s.gpu == 1] == list(range(6))


def test_idle_capture() -> None:
    t = parse_dmon(fixture("dmon-idle.txt"))
    assert {s.number("sm") for s in t.samples} == {0.0}
    assert [s.number("pwr") for s in t.samples if s.gpu == 0] == [90.0, 80.0, 79.0]


def test_reference_time_column_and_dashes() -> None:
    t = parse_dmon(REFERENCE_T, day=date(2026, 11, 30))
    (s,) = t.samples
    assert s.gpu == 0
    assert s.ts == datetime(2026, 11, 30, 4, 12, 44)
    assert s.values["jpg"] is None and s.values["ofa"] is None
    # Looked up by name although this order differs from the H200 capture.
    assert s.number("rxpci") == 248.0 and s.number("txpci") == 34.0 and s.number("pci") == 0.0
    assert "Time" not in s.values


def test_date_time_columns_repeated_header_and_torn_row() -> None:
    text = (
        "#Date       Time        gpu    pwr     sm  rxpci  txpci\n"
        "#YYYYMMDD   HH:MM:SS    Idx      W      %   MB/s   MB/s\n"
        " 20261130   23:59:59      0    300     90    500    400\n"
        "#Date       Time        gpu    pwr     sm  rxpci  txpci\n"
        "#YYYYMMDD   HH:MM:SS    Idx      W      %   MB/s   MB/s\n"
        " 20261201   00:00:00      0    310     91    510    410\n"
        " 20261201   00:00:01      0    3\n"
    )
    t = parse_dmon(text)
    assert [s.ts for s in t.samples] == [datetime(2026, 11, 30, 23, 59, 59), datetime(2026, 12, 1)]
    assert t.skipped_rows == 1
    assert t.units["rxpci"] == "MB/s"


def test_time_only_wraps_past_midnight() -> None:
    text = "#Time gpu pwr\n#HH:MM:SS Idx W\n 23:59:59 0 1\n 00:00:00 0 2\n"
    t = parse_dmon(text, day=date(2026, 11, 30))
    assert t.samples[1].ts == datetime(2026, 12, 1, 0, 0, 0)


def test_no_header_is_an_error() -> None:
    with pytest.raises(DmonParseError):
        parse_dmon("    0     90     34\n")


def test_dmon_argv() -> None:
    assert dmon_argv() == ["nvidia-smi", "dmon", "-s", "pucvmet", "-o", "DT", "-d", "1"]
    assert dmon_argv(2, timestamps="T") == ["nvidia-smi", "dmon", "-s", "pucvmet", "-o", "T", "-d", "2"]
    with pytest.raises(ValueError):
        dmon_argv(selectors="pz")
