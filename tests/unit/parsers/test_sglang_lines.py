"""The boot ledger and the capture verdict read the lines the released sglang 0.5.12.post1 and 0.5.23 print (and
flashinfer 0.7.2's JIT line): tests/fixtures/sglang/lines/ keeps the wheels' format strings and lines rendered from
them (provenance in its README)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.parsers.boot import parse_boot
from orchestrator.parsers.sglang_lines import AUTOTUNE_BEGIN
from orchestrator.verdicts.server_log import CapturePhase, find_fatal

LINES = Path(__file__).resolve().parents[2] / "fixtures" / "sglang" / "lines"


def _log(name: str) -> list[str]:
    return (LINES / name).read_text(encoding="utf-8").splitlines()


def _formats() -> list[tuple[str, str, str]]:
    """(release, where, source line) of each row of formats.tsv."""
    rows = []
    for row in (LINES / "formats.tsv").read_text(encoding="utf-8").splitlines():
        release, wheel, path, lineno, source = row.split("\t")
        rows.append((release, f"{wheel}:{path}:{lineno}", source))
    return rows


def _literal(source: str) -> str:
    """The fixed text a source line prints first: its string literal up to the first placeholder."""
    m = re.search(r'f?"([^"]*)"', source)
    assert m is not None, source
    return re.split(r"\{|%[sd(]", m.group(1))[0]


@pytest.mark.parametrize("release", ["0.5.12.post1", "0.5.23"])
def test_every_message_format_of_the_release_is_in_its_rendered_log(release: str) -> None:
    text = "\n".join(_log(f"{release}.log"))
    wanted = [(where, _literal(src)) for r, where, src in _formats()
              if r == release and "DISABLED" not in src  # the autotune line of a start without its cache
              and ("logger" in src or src.startswith(('f"Capture', 'f"Load', '"Running')))]
    assert len(wanted) >= 5
    for where, literal in wanted:
        if literal.strip():
            assert literal.strip() in text, f"{where}: {literal!r} is not in {release}.log"


def test_the_autotune_line_without_a_cache_opens_the_autotune_phase_too() -> None:
    source = next(src for r, _, src in _formats() if r == "0.5.23" and "DISABLED" in src)
    assert AUTOTUNE_BEGIN.search(_literal(source))


def test_no_released_0_5_23_line_says_capture_cuda_graph_begin() -> None:
    """The wording the old ledger keyed on: 0.5.23's formats never print it."""
    assert not any("Capture cuda graph" in src for r, _, src in _formats() if r == "0.5.23")
    assert not any("Capture cuda graph" in line for line in _log("0.5.23.log"))


@pytest.mark.parametrize("release", ["0.5.12.post1", "0.5.23"])
def test_the_boot_ledger_reads_both_releases_capture_phases(release: str) -> None:
    start = parse_boot(_log(f"{release}.log"))
    assert start is not None and start.complete
    capture, prefill = start.phase("capture"), start.phase("piecewise")
    assert capture is not None and capture.seconds == 58.0
    assert prefill is not None and prefill.seconds == (5.0 if release == "0.5.12.post1" else 7.0)
    autotune = start.phase("autotune")
    assert autotune is not None and autotune.seconds is not None and autotune.seconds > 0
    assert start.capture_s() == capture.seconds + prefill.seconds


def test_flashinfer_0_7_2_s_jit_line_makes_the_start_cold() -> None:
    """flashinfer 0.7.2 prints `Building JIT module` only when it compiles the module: cold, without a cache check."""
    start = parse_boot(_log("0.5.23.log"))
    assert start is not None and start.jit_built == ["fused_moe_120"]
    judged = start.judged(None)
    assert judged.cold is True and "fused_moe_120" in judged.cold_basis
    old = parse_boot(_log("0.5.12.post1.log"))  # flashinfer 0.6.11.post1 prints no JIT line
    assert old is not None and old.jit_built == [] and old.judged(None).cold is None


def test_a_0_5_23_decode_capture_that_never_ends_is_capture_stuck() -> None:
    phase = CapturePhase()
    assert find_fatal(_log("stuck-0.5.23.log"), phase) is None
    stuck = phase.stuck()
    assert stuck is not None and stuck.code == "capture-stuck"
    assert "Capture target decode CUDA graph begin" in stuck.line
    assert "--cuda-graph-backend-decode=disabled" in stuck.fix


def test_a_0_5_23_prefill_capture_that_never_ends_names_its_own_switch() -> None:
    phase = CapturePhase()
    find_fatal(_log("stuck-0.5.23.log")[:1], phase)
    stuck = phase.stuck()
    assert stuck is not None and stuck.code == "capture-stuck"
    assert stuck.meaning.startswith("Prefill CUDA-graph capture")
    assert "cuda-graph-backend-prefill: disabled" in stuck.fix
    assert "disable-piecewise-cuda-graph" not in stuck.fix


@pytest.mark.parametrize("release", ["0.5.12.post1", "0.5.23"])
def test_a_complete_start_of_either_release_leaves_no_capture_open(release: str) -> None:
    phase = CapturePhase()
    assert find_fatal(_log(f"{release}.log"), phase) is None
    assert not phase.capturing
