"""verify_p2p reads the host's P2P status matrices only when the container's topology cannot be read (issue 24:
fewer questions per round trip, each skipped read provably unused), on the real 8-GPU capture."""

from __future__ import annotations

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
