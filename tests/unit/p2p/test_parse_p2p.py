"""parse_p2p on the real `topo -p2p r/w/n/a/p` captures and hand-made variants."""

from __future__ import annotations

import pytest

from orchestrator.p2p.parse import P2PStatus, detect_p2p_kind, parse_p2p
from orchestrator.parsers import ParseError
from tests.shared import fixture


@pytest.mark.parametrize(
    ("letter", "kind", "expected"),
    [("r", "read", "OK"), ("w", "write", "OK"), ("n", "nvlink", "OK"), ("a", "atomics", "OK"), ("p", "pcie", "NS")],
)
def test_h200_captures(letter: str, kind: str, expected: str) -> None:
    m = parse_p2p(fixture(f"nvidia-smi/h200x2-nvlink/topo-p2p-{letter}.txt"), kind)  # type: ignore[arg-type]
    assert m.gpus == ("GPU0", "GPU1")
    assert m.kind == kind
    assert m.get(0, 1) == P2PStatus(expected)
    assert m.get(1, 0) == P2PStatus(expected)
    assert m.get(0, 0) == P2PStatus.X
    assert m.all_ok() == (expected == "OK")


def test_kind_unknown_without_header_or_argument() -> None:
    m = parse_p2p(fixture("nvidia-smi/h200x2-nvlink/topo-p2p-r.txt"))
    assert m.kind is None


def test_rtx_bare_all_ok_and_vm_all_cns() -> None:
    bare = parse_p2p(fixture("nvidia-smi/rtx-pro-6000-x8-bare/topo-p2p-r.txt"), "read")
    assert len(bare.gpus) == 8 and bare.all_ok()
    vm = parse_p2p(fixture("nvidia-smi/rtx-pro-6000-x8-vm/topo-p2p-w.txt"), "write")
    off_diag = {vm.get(a, b) for a in range(8) for b in range(8) if a != b}
    assert off_diag == {P2PStatus.CNS}
    assert not vm.all_ok()
    assert vm.to_dict()["status"]["GPU3"]["GPU5"] == "CNS"  # type: ignore[index]


GNS_MATRIX = (
    " \t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\t\x1b[0m\n"
    " GPU0\tX\tGNS\tOK\tDR\t\n"
    " GPU1\tGNS\tX\tTNS\tU\t\n"
    " GPU2\tOK\tTNS\tX\tNS\t\n"
    " GPU3\tDR\tU\tNS\tX\t\n"
    "\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n  GNS  = GPU not supported\n"
    "  TNS  = Topology not supported\n  NS   = Not supported\n  DR   = Disabled by regkey\n  U    = Unknown\n"
)


def test_every_status_code() -> None:
    m = parse_p2p(GNS_MATRIX, "read")
    assert m.get(0, 1) is P2PStatus.GNS
    assert m.get(1, 2) is P2PStatus.TNS
    assert m.get(0, 3) is P2PStatus.DR
    assert m.get(1, 3) is P2PStatus.U
    assert m.get(2, 3) is P2PStatus.NS
    assert m.get(0, 2) is P2PStatus.OK
    assert P2PStatus.DR.meaning == "disabled by regkey"


def test_space_aligned_no_ansi() -> None:
    text = "        GPU0    GPU1\n GPU0   X       OK\n GPU1   CNS     X\n"
    m = parse_p2p(text, "write")
    assert m.get(1, 0) is P2PStatus.CNS and m.get(0, 1) is P2PStatus.OK


def test_kind_from_command_echo_and_conflict() -> None:
    text = "$ nvidia-smi topo -p2p w\n \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n GPU1\tOK\tX\t\n"
    assert detect_p2p_kind(text) == "write"
    assert parse_p2p(text).kind == "write"
    with pytest.raises(ParseError, match="expected a topo -p2p read"):
        parse_p2p(text, "read")


def test_kind_from_title_line() -> None:
    text = "P2P read capability\n \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n GPU1\tOK\tX\t\n"
    assert parse_p2p(text).kind == "read"


@pytest.mark.parametrize(
    "text",
    [
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        " \tGPU0\tGPU1\t\n GPU0\tX\tMAYBE\t\n GPU1\tOK\tX\t\n",
        " \tGPU0\tGPU1\tGPU2\t\n GPU0\tX\tOK\tOK\t\n",
        " \tGPU0\tGPU1\t\n GPU0\tX\t\n GPU1\tOK\tX\t\n",
    ],
    ids=["driver-failure", "unknown-status", "truncated", "short-row"],
)
def test_bad_input_raises(text: str) -> None:
    with pytest.raises(ParseError):
        parse_p2p(text, "read")
