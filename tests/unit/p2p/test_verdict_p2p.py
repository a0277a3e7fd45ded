"""P2P verdict on the real captures (NVLink H200, bare 8× RTX PRO 6000, the VM view) and hand-made cases."""

from __future__ import annotations

import json

import pytest

from orchestrator.p2p.parse import P2PMatrix, P2PStatus, parse_p2p
from orchestrator.p2p.verdict import (
    UNKNOWN_TOPOLOGY_ONLY,
    VM_FIX,
    VM_REASON,
    compare_topologies,
    p2p_verdict,
)
from orchestrator.parsers.topo import TopoMatrix, parse_topo
from tests.shared import fixture


def load(box: str) -> tuple[TopoMatrix, P2PMatrix, P2PMatrix]:
    base = f"nvidia-smi/{box}"
    return (
        parse_topo(fixture(f"{base}/topo-m.txt")),
        parse_p2p(fixture(f"{base}/topo-p2p-r.txt"), "read"),
        parse_p2p(fixture(f"{base}/topo-p2p-w.txt"), "write"),
    )


def topo_text(rows: list[list[str]]) -> str:
    n = len(rows)
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    body = "".join(f"GPU{i}\t" + "\t".join(" X " if c == "X" else c for c in row) + "\t0-7\t0\t\tN/A\n"
                   for i, row in enumerate(rows))
    return head + body


def p2p_text(rows: list[list[str]]) -> str:
    n = len(rows)
    head = " \t" + "\t".join(f"GPU{i}" for i in range(n)) + "\t\n"
    return head + "".join(f" GPU{i}\t" + "\t".join(row) + "\t\n" for i, row in enumerate(rows))


def test_h200_nvlink_passes() -> None:
    topo, r, w = load("h200x2-nvlink")
    v = p2p_verdict(topo, r, w)
    assert (v.status, v.p2p, v.vm_passthrough) == ("pass", "pass", False)
    (pair,) = v.pairs
    assert (pair.link, pair.read, pair.write, pair.status) == ("NV18", P2PStatus.OK, P2PStatus.OK, "pass")
    assert v.reasons == ()


def test_rtx_bare_warns_on_sys_pairs_only() -> None:
    topo, r, w = load("rtx-pro-6000-x8-bare")
    v = p2p_verdict(topo, r, w)
    assert v.status == "warn" and v.p2p == "pass" and not v.vm_passthrough
    warned = {(p.a, p.b) for p in v.pairs if p.status == "warn"}
    assert len(warned) == 16 and ("GPU0", "GPU4") in warned and ("GPU0", "GPU1") not in warned
    assert any("SYS" in r for r in v.reasons)
    assert any("NCCL_P2P_LEVEL=SYS" in f for f in v.fixes)


def test_rtx_bare_one_socket_passes() -> None:
    topo, r, w = load("rtx-pro-6000-x8-bare")
    v = p2p_verdict(topo, r, w, tp_gpus=[0, 1, 2, 3])
    assert v.status == "pass"
    assert v.gpus == ("GPU0", "GPU1", "GPU2", "GPU3")
    assert len(v.pairs) == 6


def test_vm_signature() -> None:
    topo, r, w = load("rtx-pro-6000-x8-vm")
    v = p2p_verdict(topo, r, w)
    assert v.status == "fail" and v.p2p == "fail"
    assert v.vm_passthrough
    assert v.reasons[0] == VM_REASON
    assert VM_FIX in v.fixes
    assert "x-nv-gpudirect-clique" in VM_FIX
    assert all(p.status == "fail" and p.read is P2PStatus.CNS for p in v.pairs)


def test_vm_topology_only_is_unknown_with_hint() -> None:
    topo, _, _ = load("rtx-pro-6000-x8-vm")
    v = p2p_verdict(topo)
    assert v.p2p == UNKNOWN_TOPOLOGY_ONLY
    assert v.status == "warn" and not v.vm_passthrough
    assert all(p.status == "unknown" and p.read is None for p in v.pairs)
    assert any("PHB" in r for r in v.reasons)


def test_bare_cns_is_not_called_a_vm() -> None:
    topo, _, _ = load("rtx-pro-6000-x8-bare")
    _, r, w = load("rtx-pro-6000-x8-vm")
    v = p2p_verdict(topo, r, w)
    assert v.status == "fail" and not v.vm_passthrough
    assert VM_REASON not in v.reasons
    assert any("CNS" in r and "28 pair(s)" in r for r in v.reasons)


def test_gns_row_fails_with_reason() -> None:
    links = [["X", "PIX", "PIX"], ["PIX", "X", "PIX"], ["PIX", "PIX", "X"]]
    statuses = [["X", "OK", "GNS"], ["OK", "X", "OK"], ["GNS", "OK", "X"]]
    topo = parse_topo(topo_text(links))
    r = parse_p2p(p2p_text(statuses), "read")
    w = parse_p2p(p2p_text(statuses), "write")
    v = p2p_verdict(topo, r, w)
    assert v.status == "fail"
    by_pair = {(p.a, p.b): p for p in v.pairs}
    assert by_pair[("GPU0", "GPU1")].status == "pass"
    bad = by_pair[("GPU0", "GPU2")]
    assert bad.status == "fail" and bad.read is P2PStatus.GNS
    assert any("GPU not supported" in x for x in bad.reasons)
    assert any("NCCL_P2P_DISABLE=1" in f for f in v.fixes)


def test_asymmetric_status_and_write_only_failure() -> None:
    topo = parse_topo(topo_text([["X", "PXB"], ["PXB", "X"]]))
    r = parse_p2p(p2p_text([["X", "OK"], ["OK", "X"]]), "read")
    w = parse_p2p(p2p_text([["X", "OK"], ["DR", "X"]]), "write")
    v = p2p_verdict(topo, r, w)
    assert v.status == "fail"
    assert v.pairs[0].write is P2PStatus.DR and v.pairs[0].read is P2PStatus.OK
    assert any("disabled by regkey" in x for x in v.reasons)


def test_sys_only_pair() -> None:
    topo = parse_topo(topo_text([["X", "SYS"], ["SYS", "X"]]))
    ok = parse_p2p(p2p_text([["X", "OK"], ["OK", "X"]]))
    v = p2p_verdict(topo, ok, ok)
    assert v.status == "warn"
    assert v.pairs[0].status == "warn" and v.pairs[0].link == "SYS"
    assert "NCCL_P2P_LEVEL=SYS" in v.pairs[0].reasons[0]


def test_only_read_matrix_is_partial() -> None:
    topo = parse_topo(topo_text([["X", "PIX"], ["PIX", "X"]]))
    ok = parse_p2p(p2p_text([["X", "OK"], ["OK", "X"]]), "read")
    v = p2p_verdict(topo, read=ok)
    assert v.status == "warn" and v.p2p == "partial"
    assert v.pairs[0].status == "unknown"


def test_wrong_matrix_kind_and_bad_gpu_set() -> None:
    topo, r, w = load("h200x2-nvlink")
    with pytest.raises(ValueError, match="write"):
        p2p_verdict(topo, read=w, write=r)
    with pytest.raises(KeyError):
        p2p_verdict(topo, r, w, tp_gpus=[0, 5])


def test_serialisable() -> None:
    topo, r, w = load("rtx-pro-6000-x8-vm")
    d = p2p_verdict(topo, r, w).to_dict()
    again = json.loads(json.dumps(d))
    assert again["status"] == "fail" and again["vm_passthrough"] is True
    assert again["pairs"][0] == {"a": "GPU0", "b": "GPU1", "link": "PHB", "read": "CNS", "write": "CNS",
                                 "status": "fail", "reasons": again["pairs"][0]["reasons"]}
    assert len(again["pairs"]) == 28


def test_compare_topologies_container_equals_host() -> None:
    host, _, _ = load("rtx-pro-6000-x8-bare")
    same = compare_topologies(host, parse_topo(fixture("nvidia-smi/rtx-pro-6000-x8-bare/topo-m.txt")))
    assert same.same and same.differing == ()
    assert "same" in same.describe()


def test_compare_topologies_vm_differs() -> None:
    host, _, _ = load("rtx-pro-6000-x8-bare")
    vm, _, _ = load("rtx-pro-6000-x8-vm")
    cmp = compare_topologies(host, vm)
    assert not cmp.same
    assert len(cmp.differing) == 56  # every ordered pair: PIX/NODE/SYS on the host, PHB in the VM
    first = cmp.differing[0]
    assert (first.a, first.b, first.host, first.container) == ("GPU0", "GPU1", "PIX", "PHB")
    assert json.loads(json.dumps(cmp.to_dict()))["same"] is False


def test_compare_topologies_missing_gpu() -> None:
    full = parse_topo(topo_text([["X", "PIX", "SYS"], ["PIX", "X", "SYS"], ["SYS", "SYS", "X"]]))
    partial = parse_topo(topo_text([["X", "PIX"], ["PIX", "X"]]))
    cmp = compare_topologies(full, partial)
    assert not cmp.same and cmp.only_on_host == ("GPU2",) and cmp.differing == ()
    assert "GPU2" in cmp.describe()
