"""--query-gpu CSV: header+units, noheader+nounits, and the real 250 ms loop capture."""

from __future__ import annotations

import shlex
from datetime import datetime

import pytest

from orchestrator.parsers.gpu_query import (
    SAMPLER_FIELDS,
    GpuQueryParseError,
    parse_query_gpu,
    parse_value,
    sampler_argv,
)
from tests.shared import H200_NVLINK

FIX = H200_NVLINK

# The field list that produced query-gpu-noheader-nounits.csv (same columns as the header of query-gpu.csv).
CAPTURE_STATIC_FIELDS = (
    "index", "uuid", "name", "pci.bus_id", "driver_version", "power.draw", "power.limit", "enforced.power.limit",
    "power.max_limit", "utilization.gpu", "utilization.memory", "memory.used", "memory.total", "temperature.gpu",
    "clocks.current.sm", "clocks.max.sm", "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
    "pcie.link.width.max",
)


def fixture(name: str) -> str:
    return (FIX / name).read_text()


def test_values_with_units_and_placeholders() -> None:
    assert parse_value("98.84 W") == 98.84
    assert parse_value("0 %") == 0.0
    assert parse_value("143771 MiB") == 143771.0
    assert parse_value("[N/A]") is None
    assert parse_value("[Not Supported]") is None
    assert parse_value("580.159.04") == "580.159.04"
    assert parse_value("GPU-9054e7a3-e8dc-6457-2abb-fe978933f052") == "GPU-9054e7a3-e8dc-6457-2abb-fe978933f052"


def test_header_with_units_real_capture() -> None:
    samples = parse_query_gpu(fixture("query-gpu.csv"))
    assert [s.gpu for s in samples] == [0, 1]
    g0 = samples[0]
    assert g0.number("power.draw") == 98.84
    assert g0.number("power.limit") == 700.0
    assert g0.number("clocks.max.sm") == 1980.0
    assert g0.number("clocks.current.sm") == 435.0
    assert g0.values["name"] == "NVIDIA H200"
    assert g0.values["driver_version"] == "580.159.04"
    assert g0.ts is None
    assert samples[1].number("power.draw") == 106.12


def test_noheader_nounits_matches_header_capture() -> None:
    with_units = parse_query_gpu(fixture("query-gpu.csv"))
    bare = parse_query_gpu(fixture("query-gpu-noheader-nounits.csv"), CAPTURE_STATIC_FIELDS)
    assert len(bare) == 2
    # Same box, two reads: static columns agree, power differs a little.
    for a, b in zip(with_units, bare, strict=True):
        for f in ("power.limit", "clocks.max.sm", "memory.total", "pcie.link.width.max"):
            assert a.number(f) == b.number(f)
    assert bare[0].number("power.draw") == 96.65


def test_loop_capture_parses_with_sampler_fields() -> None:
    samples = parse_query_gpu(fixture("query-loop-under-load.csv"), SAMPLER_FIELDS)
    assert len(samples) == 24
    assert {s.gpu for s in samples} == {0, 1}
    first = samples[0]
    assert first.ts == datetime(2026, 11, 30, 2, 3, 55, 170000)
    assert first.number("power.draw") == 690.69
    assert first.number("clocks.sm") == 1440.0
    assert first.number("temperature.gpu") == 56.0
    assert first.number("memory.used") == 883.0
    assert [s.tick for s in samples if s.gpu == 1][:3] == [0, 1, 2]
    assert all(s.number("utilization.gpu") == 100.0 for s in samples)


def test_loop_capture_with_wrong_field_list_is_refused() -> None:
    eleven = (*SAMPLER_FIELDS[:5], "utilization.memory", *SAMPLER_FIELDS[5:])
    with pytest.raises(GpuQueryParseError, match="line 1: 10 columns, expected 11"):
        parse_query_gpu(fixture("query-loop-under-load.csv"), eleven)


def test_torn_last_line_only_forgiven_when_asked() -> None:
    text = fixture("query-loop-under-load.csv") + "2026/11/30 02:03:58.195, 0, 69"
    with pytest.raises(GpuQueryParseError):
        parse_query_gpu(text, SAMPLER_FIELDS)
    assert len(parse_query_gpu(text, SAMPLER_FIELDS, drop_torn_tail=True)) == 24


def test_header_repeated_and_na_values() -> None:
    text = ("timestamp, index, power.draw [W], clocks.sm [MHz]\n"
            "2026/11/30 02:03:55.170, 0, [N/A], 1440 MHz\n"
            "timestamp, index, power.draw [W], clocks.sm [MHz]\n"
            "2026/11/30 02:03:55.420, 0, 12.5 W, [Not Supported]\n")
    s = parse_query_gpu(text)
    assert len(s) == 2
    assert s[0].values["power.draw"] is None and s[0].number("clocks.sm") == 1440.0
    assert s[1].number("power.draw") == 12.5 and s[1].values["clocks.sm"] is None


def test_noheader_without_fields_is_an_error() -> None:
    with pytest.raises(GpuQueryParseError, match="expected a --query-gpu header"):
        parse_query_gpu("0, 96.65, 700.00\n")


def test_sampler_argv() -> None:
    argv = sampler_argv(250)
    assert argv[0] == "nvidia-smi"
    assert argv[1] == "--query-gpu=" + ",".join(SAMPLER_FIELDS)
    assert argv[2:] == ["--format=csv,noheader,nounits", "-lms", "250"]
    assert shlex.split(shlex.join(argv)) == argv
    with pytest.raises(ValueError):
        sampler_argv(0)
    with pytest.raises(ValueError):
        sampler_argv(250, ["power.draw; rm -rf /"])
