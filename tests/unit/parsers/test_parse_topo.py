"""parse_topo on real captures and on hand-made variants of the layouts seen in the wild."""

from __future__ import annotations

import pytest

from orchestrator.parsers import ParseError
from orchestrator.parsers.topo import expand_cpu_list, link_rank, parse_topo
from tests.shared import fixture

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def test_h200_nvlink_capture() -> None:
    topo = parse_topo(fixture("nvidia-smi/h200x2-nvlink/topo-m.txt"))
    assert topo.gpus == ("GPU0", "GPU1")
    assert topo.nics == ()
    assert topo.link(0, 1) == "NV18"
    assert topo.link("GPU1", "GPU0") == "NV18"
    assert topo.link(0, 0) == "X"
    aff = topo.affinity["GPU1"]
    assert (aff.cpu_affinity, aff.numa_affinity, aff.gpu_numa_id) == ("0-31", "0", None)
    assert aff.cpus == tuple(range(32))
    assert topo.has_numa_columns
    assert set(topo.legend) == {"X", "SYS", "NODE", "PHB", "PXB", "PIX", "NV#"}


def test_rtx_pro_6000_bare_capture() -> None:
    topo = parse_topo(fixture("nvidia-smi/rtx-pro-6000-x8-bare/topo-m.txt"))
    assert topo.gpus == tuple(f"GPU{i}" for i in range(8))
    assert topo.link(0, 1) == "PIX"
    assert topo.link(0, 2) == "NODE"
    assert topo.link(3, 4) == "SYS"
    assert topo.link(6, 7) == "PIX"
    assert topo.link(7, 4) == "NODE"
    assert topo.affinity["GPU0"].cpu_affinity == "0-63,128-191"
    assert topo.affinity["GPU5"].cpu_affinity == "64-127,192-238"
    assert topo.affinity["GPU5"].numa_affinity == "1"
    assert len(topo.gpu_pairs()) == 28
    counts = {t: sum(topo.link(a, b) == t for a, b in topo.gpu_pairs()) for t in ("PIX", "NODE", "SYS")}
    assert counts == {"PIX": 4, "NODE": 8, "SYS": 16}


def test_vm_capture_is_flat_phb() -> None:
    topo = parse_topo(fixture("nvidia-smi/rtx-pro-6000-x8-vm/topo-m.txt"))
    assert {topo.link(a, b) for a, b in topo.gpu_pairs()} == {"PHB"}


def test_to_dict_is_complete() -> None:
    topo = parse_topo(fixture("nvidia-smi/rtx-pro-6000-x8-bare/topo-m.txt"))
    d = topo.to_dict()
    assert d["links"]["GPU2"]["GPU3"] == "PIX"  # type: ignore[index]
    assert d["affinity"]["GPU4"]["numa_affinity"] == "1"  # type: ignore[index]


NIC_TABS = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV12\tSYS\tSYS\tPXB\tSYS\t0-23\t0\t\tN/A\n"
    "GPU1\tNV12\t X \tSYS\tSYS\tPXB\tSYS\t0-23\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tNV12\tSYS\tPIX\t24-47\t1\t\tN/A\n"
    "GPU3\tSYS\tSYS\tNV12\t X \tSYS\tPIX\t24-47\t1\t\tN/A\n"
    "NIC0\tPXB\tPXB\tSYS\tSYS\t X \tSYS\n"
    "NIC1\tSYS\tSYS\tPIX\tPIX\tSYS\t X \n"
    + LEGEND
    + "\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n\n"
)


def test_nic_rows_columns_and_legend() -> None:
    topo = parse_topo(NIC_TABS)
    assert topo.gpus == ("GPU0", "GPU1", "GPU2", "GPU3")
    assert topo.nics == ("NIC0", "NIC1")
    assert topo.link(2, 3) == "NV12"
    assert topo.nic_link(0, "NIC0") == "PXB"
    assert topo.nic_link(3, "NIC1") == "PIX"
    assert topo.nic_aliases == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert topo.affinity["GPU2"].cpu_affinity == "24-47"
    assert topo.affinity["GPU2"].numa_affinity == "1"
    assert "NIC0" not in topo.affinity


OLD_NO_NUMA = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tmlx5_0\tCPU Affinity\n"
    "GPU0\t X \tPIX\tSOC\tSOC\tPHB\t0-13,28-41\n"
    "GPU1\tPIX\t X \tSOC\tSOC\tPHB\t0-13,28-41\n"
    "GPU2\tSOC\tSOC\t X \tPIX\tSOC\t14-27,42-55\n"
    "GPU3\tSOC\tSOC\tPIX\t X \tSOC\t14-27,42-55\n"
    "mlx5_0\tPHB\tPHB\tSOC\tSOC\t X \t\n"
    "\nLegend:\n\n  X   = Self\n"
    "  SOC  = Connection traversing PCIe as well as the SMP link between CPU sockets(e.g. QPI)\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe switches (without traversing the PCIe Host Bridge)\n"
    "  PIX  = Connection traversing a single PCIe switch\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
)


def test_older_format_without_numa_columns_and_soc() -> None:
    topo = parse_topo(OLD_NO_NUMA)
    assert topo.gpus == ("GPU0", "GPU1", "GPU2", "GPU3")
    assert topo.nics == ("mlx5_0",)
    assert topo.link(0, 2) == "SYS"  # old SOC spelling normalised
    assert topo.nic_link(1, "mlx5_0") == "PHB"
    assert topo.affinity["GPU3"].cpu_affinity == "14-27,42-55"
    assert topo.affinity["GPU3"].numa_affinity is None
    assert topo.affinity["GPU3"].gpu_numa_id is None
    assert not topo.has_numa_columns


def test_space_aligned_paste() -> None:
    tabbed = fixture("nvidia-smi/rtx-pro-6000-x8-bare/topo-m.txt")
    spaced = "\n".join(line.replace("\x1b[4m", "").replace("\x1b[0m", "").expandtabs(8) for line in
                       tabbed.splitlines())
    assert "\t" not in spaced
    topo = parse_topo(spaced)
    assert topo == parse_topo(tabbed)


def test_space_aligned_with_single_space_between_names() -> None:
    text = (
        "        GPU0    GPU1    mlx5_10 CPU Affinity    NUMA Affinity   GPU NUMA ID\n"
        "GPU0     X      SYS     PIX     0-15            0               N/A\n"
        "GPU1    SYS      X      SYS     16-31           1               N/A\n"
        "mlx5_10 PIX     SYS      X\n"
    )
    topo = parse_topo(text)
    assert topo.nics == ("mlx5_10",)
    assert topo.link(0, 1) == "SYS"
    assert topo.affinity["GPU1"].numa_affinity == "1"


def test_trailing_prompt_after_matrix_without_legend() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPHB\t0-7\nGPU1\tPHB\t X \t0-7\nroot@pve:~# \n"
    assert parse_topo(text).link(1, 0) == "PHB"


@pytest.mark.parametrize(
    "text",
    [
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
        "latest NVIDIA driver is installed and running.\n",
        "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n",
        "",
    ],
)
def test_failure_messages_raise(text: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_topo(text)
    assert "topo -m" in str(err.value)
    if text:
        assert text.split()[0] in err.value.excerpt


def test_truncated_matrix_raises() -> None:
    text = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\nGPU0\t X \tPIX\tSYS\t0-7\nGPU1\tPIX\t X \tSYS\t0-7\n"
    with pytest.raises(ParseError, match="GPU2"):
        parse_topo(text)


def test_unknown_cell_raises() -> None:
    with pytest.raises(ParseError, match="not a link type"):
        parse_topo("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tFOO\t X \n")


def test_link_rank_order() -> None:
    order = ["NV18", "PIX", "PXB", "PHB", "NODE", "SYS"]
    assert [link_rank(x) for x in order] == sorted(link_rank(x) for x in order)
    assert link_rank("NV4") == link_rank("NV18") < link_rank("PIX")
    with pytest.raises(ValueError):
        link_rank("BOGUS")


def test_expand_cpu_list() -> None:
    assert expand_cpu_list("0-2,8,10-11") == (0, 1, 2, 8, 10, 11)
    with pytest.raises(ValueError):
        expand_cpu_list("0-x")
