"""The project's parsers and verdicts on output captured live on a 2× H200 (NV18) device machine."""

from pathlib import Path

import pytest

from orchestrator.p2p.bandwidth import p2p_bandwidth_verdict, parse_p2p_probe
from orchestrator.p2p.parse import P2PStatus, parse_p2p
from orchestrator.p2p.verdict import p2p_verdict
from orchestrator.parsers.devices import nvidia_char_devices, parse_dev_listing, parse_gpu_list, parse_proc_devices
from orchestrator.parsers.dmon import parse_dmon
from orchestrator.parsers.driver import parse_driver_version
from orchestrator.parsers.gpu_query import parse_query_gpu
from orchestrator.parsers.topo import parse_topo
from orchestrator.telemetry.sampler import parse_sampled_output, run_samples
from orchestrator.telemetry.summary import summarize

CAP = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia-smi" / "h200x2-device"


def read(name: str) -> str:
    return (CAP / name).read_text()


def test_live_topology_is_nvlink_and_p2p_passes():
    topo = parse_topo(read("topo-m.txt"))
    assert topo.gpus == ("GPU0", "GPU1") or list(topo.gpus) == ["GPU0", "GPU1"]
    assert topo.link("GPU0", "GPU1") == "NV18"
    verdict = p2p_verdict(topo, parse_p2p(read("topo-p2p-r.txt"), "read"), parse_p2p(read("topo-p2p-w.txt"), "write"))
    assert verdict.status == "pass" and not verdict.vm_passthrough


def test_nvlink_pairs_report_pcie_p2p_as_not_supported():
    # Over NVLink the PCIe P2P capability reads NS while nvlink/atomics read OK: not a failure for TP.
    assert parse_p2p(read("topo-p2p-n.txt"), "nvlink").all_ok()
    assert parse_p2p(read("topo-p2p-a.txt"), "atomics").all_ok()
    assert parse_p2p(read("topo-p2p-p.txt"), "pcie").get("GPU0", "GPU1") == P2PStatus.NS


def test_live_device_facts():
    assert [g.name for g in parse_gpu_list(read("list.txt"))] == ["NVIDIA H200", "NVIDIA H200"]
    assert parse_driver_version(read("proc-driver-version.txt")).version == "580.159.04"
    assert parse_proc_devices(read("proc-devices.txt"))["nvidia-uvm"] > 0
    paths = [n.path for n in nvidia_char_devices(parse_dev_listing(read("ls-dev-nvidia.txt")))]
    assert paths[:3] == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"]
    assert "/dev/nvidia-uvm" in paths
    rows = parse_query_gpu(read("query-gpu.csv"))
    assert len(rows) == 2 and rows[0].number("power.limit") == pytest.approx(700.0)
    assert len(parse_dmon(read("dmon-idle.txt")).samples) >= 2


def test_live_probe_is_rated_against_nvlink():
    result = parse_p2p_probe(read("p2p-probe.json"))
    verdict = p2p_bandwidth_verdict(result, {(0, 1): "NV18"})
    assert verdict.ok
    assert all(p.gbps > 300 for p in result.pairs)


def test_sampler_under_real_load_sees_power_rise():
    text = read("sampled-load.txt")
    nonce = text.split("@@deploy-", 1)[1].split(" ", 1)[0]
    run = parse_sampled_output(text, nonce)
    samples, static = run_samples(run)
    summary = summarize(samples, window=(run.started_at, run.ended_at), static=static)
    assert len(summary.gpus) == 2
    assert all((g.power_pct_of_limit or 0) > 50 for g in summary.gpus)
    assert summary.total_energy_j and summary.total_energy_j > 1000
