"""Issue 25 item 15: `verify-p2p --bandwidth` shows an 8×8 matrix (not 56 rows) and states its threshold."""

from __future__ import annotations

import json

from rich.console import Console

from orchestrator.cli.verify_p2p_cmd import bandwidth_matrix
from orchestrator.p2p.bandwidth import P2PProbeResult, p2p_bandwidth_verdict
from orchestrator.parsers.topo import parse_topo
from orchestrator.ui.tables import plain, print_table
from tests.shared import fixture

BOX = "nvidia-smi/rtx-pro-6000-x8-bare"


def bandwidth() -> dict[str, object]:
    """What the p2p_bandwidth step returns for the 8-GPU box: the probe fixture judged over the real topology."""
    probe = P2PProbeResult.model_validate(json.loads(fixture(f"{BOX}/p2p-probe.json")))
    topo = parse_topo(fixture(f"{BOX}/topo-m.txt"))
    links = {(int(a[3:]), int(b[3:])): link for (a, b), link in topo.cells.items()
             if a.startswith("GPU") and b.startswith("GPU") and a != b}
    verdict = p2p_bandwidth_verdict(probe, links, pcie_gen=5, pcie_width=16)
    return {"ok": verdict.ok, **verdict.model_dump(mode="json")}


def test_the_56_pairs_render_as_an_8_by_8_matrix() -> None:
    table, _ = bandwidth_matrix(bandwidth())
    assert [c.header for c in table.columns] == ["", *(f"GPU{i}" for i in range(8))]
    assert len(table.rows) == 8 and all(len(r) == 9 for r in table.rows)
    cells = {(plain(r[0]), table.columns[j].header): plain(c) for r in table.rows for j, c in enumerate(r) if j}
    assert cells[("GPU0", "GPU0")] == "X"
    assert cells[("GPU0", "GPU1")] == "52.2"  # row: source, column: destination
    assert cells[("GPU6", "GPU7")] == "19.7 slow"


def test_the_lines_state_the_threshold_and_the_failing_pair() -> None:
    _, lines = bandwidth_matrix(bandwidth())
    assert lines[0] == "1 of 56 GPU pairs fail: 0 without peer access, 1 below 50 % of expected bandwidth"
    assert lines[1] == ("threshold: a pair below 50 % of its link's expected bandwidth is slow "
                        "(expected ~50 GB/s over NODE/PIX/SYS)")
    assert lines[2:] == ["  - GPU6->GPU7: 19.7 GB/s is 39 % of the ~50 GB/s expected over PIX (threshold 50 %)"]


def test_the_plain_layout_is_ten_lines_not_fifty_six_rows() -> None:
    console = Console(width=60, record=True, force_terminal=False)
    table, _ = bandwidth_matrix(bandwidth())
    print_table(console, table)
    text = console.export_text()
    assert len(text.strip().splitlines()) == 10  # title, header, 8 rows
