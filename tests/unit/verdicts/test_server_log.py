from pathlib import Path

import pytest

from orchestrator.verdicts.server_log import (
    CAPTURE_STUCK,
    FATAL_PATTERNS,
    CapturePhase,
    argparse_error,
    find_fatal,
)
from tests.shared import FIXTURES


def test_nan_assertion_is_fatal():
    lines = ["[TP0] Decode batch, #running-req: 64",
             "/pytorch/aten/src/ATen/native/cuda/MultinomialKernel.cu: Assertion "
             "`probability tensor contains either `inf`, `nan` or element < 0` failed."]
    hit = find_fatal(lines)
    assert hit is not None and hit.code == "nan"
    assert "probability tensor" in hit.line


def test_unsupported_architecture_is_fatal():
    hit = find_fatal(["RuntimeError: TllmGenFmhaRunner: Unsupported architecture"])
    assert hit is not None and hit.code == "unsupported-arch"
    assert "SM120" in hit.meaning


def test_ordinary_lines_are_not_fatal():
    assert find_fatal(["Load weight end. mem usage=57.06 GB", "The server is fired up and ready to roll!"]) is None


def test_argparse_error_is_found():
    line = "sglang serve: error: unrecognized arguments: --no-such-flag 1"
    assert argparse_error(["usage: sglang serve [-h]", line]) == line
    assert argparse_error(["all good"]) is None


# ------------------------------------------------------------------ real lines (tests/fixtures/sglang/fatal)

FATAL = FIXTURES / "sglang" / "fatal"
SINGLE_LINE = sorted(p for p in FATAL.glob("*.log") if "." not in p.stem and not p.stem.startswith("benign")
                     and p.stem != "capture-stuck")


def lines_of(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip()]


def test_every_verdict_code_has_a_fixture() -> None:
    codes = {p.code for p in FATAL_PATTERNS} - {"nan", "no-cuda-arch"}  # those two predate the fixtures
    assert codes <= {p.stem for p in SINGLE_LINE}
    assert (FATAL / f"{CAPTURE_STUCK.code}.log").exists()


@pytest.mark.parametrize("path", SINGLE_LINE, ids=lambda p: p.stem)
def test_every_real_fatal_line_classifies_to_its_code(path: Path) -> None:
    for line in lines_of(path):
        hit = find_fatal([line])
        assert hit is not None and hit.code == path.stem, line
        assert hit.line == line.strip() and hit.meaning and hit.fix


def test_the_real_servers_death_without_a_gpu_quotes_the_exception_not_the_source_line() -> None:
    """The real sglang 0.5.12.post1's journal in a simulated container (no CUDA): the traceback shows the `raise`
    line before the exception's; the verdict quotes the exception."""
    hit = find_fatal(lines_of(FATAL / "no-gpu.traceback.log"))
    assert hit is not None and hit.code == "no-gpu"
    assert hit.line == "RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) is available."


def test_the_real_0_5_23_servers_death_without_a_gpu_is_no_gpu() -> None:
    """sglang 0.5.23 words it `… MUSA, MPS) or platform plugin is available.` (common.py:1124), from its serving hook:
    before, no verdict matched it and the roll waited out the whole start timeout."""
    hit = find_fatal(lines_of(FATAL / "no-gpu.traceback-0.5.23.log"))
    assert hit is not None and hit.code == "no-gpu"
    assert hit.line == "RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available."


@pytest.mark.parametrize("path", sorted(FATAL.glob("*.*.log")), ids=lambda p: p.name)
def test_a_fatal_sequence_classifies_to_its_code(path: Path) -> None:
    hit = find_fatal(lines_of(path))
    assert hit is not None and hit.code == path.name.split(".")[0]


@pytest.mark.parametrize("name", ["benign.log", "benign-standin.log"])
def test_real_benign_lines_are_not_fatal(name: str) -> None:
    lines = lines_of(FATAL / name)
    assert [ln for ln in lines if find_fatal([ln]) is not None] == []
    phase = CapturePhase()
    assert find_fatal(lines, phase) is None and phase.stuck() is None  # every capture that began, ended


def test_the_other_fixtures_logs_are_not_fatal() -> None:
    """Every capture in tests/fixtures that is not a fatal sample: no line of it is a false positive (the
    hardware/ lines are fatal samples too: a lost GPU's Xid and nvidia-smi error)."""
    samples = (FATAL, FIXTURES / "hardware")
    others = [p for p in FIXTURES.rglob("*") if p.is_file() and not any(s in p.parents for s in samples)
              and p.suffix in {".txt", ".log", ".csv"}]
    assert others
    for path in others:
        hits = [h for ln in path.read_text(errors="replace").splitlines() if (h := find_fatal([ln])) is not None]
        assert hits == [], path


def test_an_oom_during_capture_is_cuda_graph_oom_and_elsewhere_plain_oom() -> None:
    oom = lines_of(FATAL / "cuda-graph-oom.during-capture.log")[-1]
    phase = CapturePhase()
    assert find_fatal(["[2026-11-30 03:15:55 TP0] Capture cuda graph begin. avail mem=7.51 GB"], phase) is None
    hit = find_fatal([oom], phase)  # the capture state carries over from an earlier probe
    assert hit is not None and hit.code == "cuda-graph-oom"
    hit = find_fatal(["[2026-11-30 03:15:55 TP0] Capture cuda graph begin.",
                      "[2026-11-30 03:15:57 TP0] Capture cuda graph end. Time elapsed: 2 s.", oom])
    assert hit is not None and hit.code == "cuda-oom"


def test_a_capture_that_never_ends_is_capture_stuck_quoting_its_begin_line() -> None:
    lines = lines_of(FATAL / "capture-stuck.log")
    phase = CapturePhase()
    assert find_fatal(lines, phase) is None  # not a line: an absence, told when the wait runs out
    stuck = phase.stuck()
    assert stuck is not None and stuck.code == "capture-stuck" and stuck.line == lines[-1]
    assert "--cuda-graph-max-bs" in stuck.fix


def test_capture_is_tracked_per_rank() -> None:
    phase = CapturePhase()
    for line in ["[2026-05-05 04:41:51 DP2 TP2 EP2] Capture cuda graph begin.",
                 "[2026-05-05 04:41:51 DP3 TP3 EP3] Capture cuda graph begin.",
                 "[2026-05-05 04:43:00 DP2 TP2 EP2] Capture cuda graph end. Time elapsed: 69 s."]:
        phase.feed(line)
    stuck = phase.stuck()
    assert stuck is not None and "TP3" in stuck.line
    phase.feed("[2026-05-05 04:43:01 DP3 TP3 EP3] Capture cuda graph end. Time elapsed: 70 s.")
    assert phase.stuck() is None


def test_xid_verdict_names_the_xid_and_the_gpu() -> None:
    hit = find_fatal(["NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus"])
    assert hit is not None and hit.code == "gpu-xid"
    assert "Xid 79 on GPU 0000:44:00" in hit.meaning and "fallen off the bus" in hit.meaning
    assert "journalctl -k" in hit.fix
    unknown = find_fatal(["NVRM: Xid (PCI:0000:dc:00): 154, GPU recovery action changed"])
    assert unknown is not None and "Xid 154" in unknown.meaning


def test_an_illegal_access_in_the_nccl_watchdog_is_not_an_nccl_timeout() -> None:
    hit = find_fatal(lines_of(FATAL / "illegal-memory-access.log")[1:2])
    assert hit is not None and hit.code == "illegal-memory-access"


def test_a_driver_too_old_names_its_cause_before_the_no_accelerator_death_and_the_cuda_it_runs() -> None:
    """torch 2.11.0 warns at `torch.cuda.is_available()` and sglang then dies of no-gpu's line: the verdict is the
    warning's, with the CUDA the driver runs read from torch's number (12080: CUDA 12.8)."""
    hit = find_fatal(lines_of(FATAL / "driver-too-old.no-accelerator.log"))
    assert hit is not None and hit.code == "driver-too-old"
    assert hit.meaning.endswith(": the driver runs CUDA 12.8 at most"), hit.meaning
    assert "branch 580 or newer" in hit.fix
    assert hit.line.startswith("/opt/deploy/stacks/") and "UserWarning: CUDA initialization:" in hit.line
