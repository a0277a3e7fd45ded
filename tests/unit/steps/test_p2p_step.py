"""verify_p2p reads the host's P2P status matrices only when the container's topology cannot be read (issue 24:
fewer questions per round trip, each skipped read provably unused), on the real 8-GPU capture."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.engine.state import RunInputs
from orchestrator.errors import CheckFailed
from tests.shared import NVIDIA_SMI
from tests.unit.steps.conftest import out

BARE = NVIDIA_SMI / "rtx-pro-6000-x8-bare"


def capture(name: str) -> str:
    return (BARE / name).read_text()


def test_a_running_container_is_judged_with_no_host_status_read(make_run) -> None:
    ct = {"topo": capture("topo-m.txt"), "p2p_read": capture("topo-p2p-r.txt"), "p2p_write": capture("topo-p2p-w.txt")}
    run = make_run({}, {})
    run.ctx.facts.gathered = False  # the step gathers its own facts, as in `up`, in one round trip
    run.ctx.playbook_steps = ["verify_p2p"]
    run.node.host_after = {"topo": capture("topo-m.txt")}
    run.node.ct_after = ct
    record = run.step("verify_p2p")
    assert record.summary.startswith("P2P warn over 8 GPUs"), record.summary  # pass, with a warning on SYS pairs
    assert record.details["matches_host"]["same"] is True
    (call,) = run.node.calls
    host_part = call.command.split("ct_facts:")[0]
    assert host_part.strip() == "topo: nvidia-smi topo -m", host_part  # no `topo -p2p` on the host
    assert "nvidia-smi topo -p2p r" in call.command.split("ct_facts:")[1]


def test_without_a_container_topology_the_host_status_is_read_in_one_more_round_trip(make_run) -> None:
    run = make_run({"topo": capture("topo-m.txt")}, None)  # the container is not running
    run.node.host_after = {"p2p_read": capture("topo-p2p-r.txt"), "p2p_write": capture("topo-p2p-w.txt")}
    run.step("verify_p2p")
    (call,) = run.node.calls
    assert call.kind == "batch" and call.command.splitlines() == [
        "p2p_read: nvidia-smi topo -p2p r", "p2p_write: nvidia-smi topo -p2p w"]
    report = run.ctx.state.p2p_report
    assert report.container.topo is None and report.host.read is not None and report.host.write is not None
    assert report.verdict is not None and report.verdict.p2p == "pass"


def test_an_unreadable_container_topology_also_falls_back_to_the_host(make_run) -> None:
    run = make_run({"topo": capture("topo-m.txt")},
                   {"topo": out("Failed to initialize NVML: Unknown Error\n", 255), "p2p_read": out(rc=255),
                    "p2p_write": out(rc=255)})
    run.node.host_after = {"p2p_read": capture("topo-p2p-r.txt"), "p2p_write": out("", 1)}
    run.step("verify_p2p")
    assert len(run.node.calls) == 1
    report = run.ctx.state.p2p_report
    assert "Failed to initialize NVML" in report.container.error
    assert report.host.read is not None and report.host.write is None  # a failed read judged as not read


PROBE = (Path(__file__).resolve().parents[1] / "data" / "p2p-probe-h200x2.json").read_text()  # the real 2x H200 run
MARKER = "@@deploy-ab12cd34ef56ab78"


def _probe_output(gen_gpu1: int) -> str:
    """The probe's real JSON, then the link sampler's rows framed as the script prints them (GPU 1 at `gen_gpu1`)."""
    rows = "".join(f"2026/12/04 12:40:0{t}.100, {g}, 00000000:00:0{6 + g}.0, {gen_gpu1 if g else 5}, 5, 16, 16, 0\n"
                   for t in range(3) for g in range(2))
    return f"PCIE_MAX=5, 16\n{PROBE}{MARKER} begin links\n{rows}{MARKER} end links\n"


def _bandwidth_run(make_run, monkeypatch, gen_gpu1: int, gate: bool):
    monkeypatch.setattr("orchestrator.steps.p2p.secrets.token_hex", lambda _n: MARKER.removeprefix("@@deploy-"))
    run = make_run({}, {}, inputs=RunInputs(want_bandwidth=True, bandwidth_gate=gate))
    run.node.answer("DEPLOY_PROBE_EOF", _probe_output(gen_gpu1))
    return run


def test_a_remedys_bandwidth_gate_fails_on_a_link_below_its_capability_under_the_copies(make_run, monkeypatch) -> None:
    run = _bandwidth_run(make_run, monkeypatch, 2, gate=True)
    with pytest.raises(CheckFailed) as err:
        run.step("p2p_bandwidth")
    assert "P2P under load failed" in err.value.what
    assert "GPU 1 (slot 00000000:00:07.0): PCIe link Gen2 x16 under the P2P copy matrix" in err.value.what
    assert "reboot the node" in err.value.fix
    (call,) = run.node.calls  # the sampler runs in the probe's own round trip
    assert "nvidia-smi --query-gpu=timestamp,index,pci.bus_id,pcie.link.gen.current" in call.command
    # verify-p2p (no gate) reports the same link in its result and exit code, without raising
    run = _bandwidth_run(make_run, monkeypatch, 2, gate=False)
    record = run.step("p2p_bandwidth")
    assert run.ctx.state.bandwidth is not None and run.ctx.state.bandwidth["ok"] is False
    assert "PCIe links under load FAIL: GPU 1" in record.summary


def test_links_that_reach_their_capability_under_the_copies_pass_the_gate(make_run, monkeypatch) -> None:
    run = _bandwidth_run(make_run, monkeypatch, 5, gate=True)
    record = run.step("p2p_bandwidth")
    assert record.summary.endswith("PCIe links under load: 2 of 2 GPU(s) at their capability during the P2P copy "
                                   "matrix (6 samples)"), record.summary
