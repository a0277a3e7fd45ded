"""Issue 23: the --slo grammar, refused before any remote change (exit 2) with a did-you-mean."""

from __future__ import annotations

import pytest

from orchestrator.errors import ConfigError
from orchestrator.parsers.bench import BenchResult
from orchestrator.tune.slo import parse_slo


def test_units_and_operators() -> None:
    slo = parse_slo("ttft_p99<=2s, tpot_p99<80ms,e2e_latency_median<=1.5s")
    assert [(b.name, b.field, b.limit_ms, b.strict) for b in slo.bounds] == [
        ("ttft_p99", "p99_ttft_ms", 2000.0, False), ("tpot_p99", "p99_tpot_ms", 80.0, True),
        ("e2e_latency_median", "median_e2e_latency_ms", 1500.0, False)]
    assert slo.text() == "ttft_p99<=2000ms,tpot_p99<80ms,e2e_latency_median<=1500ms"


def test_misses_name_the_broken_bound() -> None:
    slo = parse_slo("ttft_p99<=2s,tpot_p99<80ms")
    result = BenchResult(source="jsonl", completed=1, output_throughput=1.0, p99_ttft_ms=2000.0, p99_tpot_ms=80.0)
    assert slo.misses(slo.figures(result)) == ["tpot_p99 80 ms > 80 ms"]
    assert slo.misses({"ttft_p99": 10.0}) == ["tpot_p99 not measured"]


@pytest.mark.parametrize(("text", "words"), [
    ("", "empty"),
    ("ttft_p99", "not METRIC<=VALUE"),
    ("ttft_p99>=2s", "not METRIC<=VALUE"),
    ("ttft_p99<=2", "unit must be ms or s"),
    ("ttft_p99<=2min", "unit must be ms or s"),
    ("ttft_p99<=0ms", "above zero"),
    ("ttft_p99<=2s,ttft_p99<=3s", "twice"),
    ("ttft_99<=2s", "unknown metric"),
])
def test_bad_slo_is_refused(text: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_slo(text)
    assert words in err.value.what and err.value.exit_code == 2


def test_did_you_mean() -> None:
    with pytest.raises(ConfigError) as err:
        parse_slo("tftt_p99<=2s")
    assert "did you mean ttft_p99?" in err.value.fix
