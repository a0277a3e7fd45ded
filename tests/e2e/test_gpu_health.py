"""GPU hardware health through the real CLI: the simulator writes real Xid lines and nvidia-smi states on the host;
doctor and status show each GPU's fault with its evidence and the catalog's action, in the same round trips."""

from __future__ import annotations

import re

import pytest

from orchestrator.monitoring.publish import PROM_PATH
from tests.e2e.conftest import SHARED, DeployEnv


def _gpu(doc: dict, bus: str) -> dict:
    return next(g for g in doc["gpus"] if g["bus_id"] == bus)


def test_doctor_names_an_xid_and_a_failed_remap_with_the_catalogs_action(deploy_env: DeployEnv) -> None:
    env = deploy_env
    healthy = env.run("--json", "doctor", "host", env.host)
    assert healthy.rc == 0, healthy.text
    ok = next(f for f in healthy.json["findings"] if f["check"] == "gpu-hardware")
    assert ok["status"] == "ok" and "8 GPU(s)" in ok["observed"]
    trips = healthy.json["totals"]["ssh_round_trips"]

    env.faults(xid="79@2")  # a real Xid 79 line in the host's kernel log, and GPU 2 (75:00.0) off the bus
    doc = env.run("--json", "doctor", "host", env.host)
    assert doc.rc == 1, doc.text
    assert doc.json["totals"]["ssh_round_trips"] == trips  # the sensors ride in the same batch
    lost = next(f for f in doc.json["findings"] if f["check"] == "gpu-hardware GPU 2 (00000000:75:00.0)")
    assert lost["status"] == "fail" and "reboot" in lost["fix"] and "deploy up host" in lost["fix"]
    gpu = _gpu(doc.json["hardware"], "00000000:75:00.0")
    kinds = {f["kind"]: f for f in gpu["faults"]}
    assert kinds["xid"]["evidence"].endswith("NVRM: Xid (PCI:0000:75:00): 79, pid='<unknown>', name=<unknown>, "
                                             "GPU has fallen off the bus.")
    assert kinds["xid"]["action"] == "reboot_host" and "RESTART_BM" in kinds["xid"]["source"]
    assert "GPU is lost.  Reboot the system to recover this GPU" in kinds["lost"]["evidence"]
    text = env.run("doctor", "host", env.host)
    assert text.rc == 1 and "fallen off the bus" in text.stdout

    env.faults(remap="3:failed")
    doc = env.run("--json", "doctor", "host", env.host)
    hw = doc.json["hardware"]
    assert doc.rc == 1 and hw["action"] == "isolate_gpu" and hw["fatal"]
    remap = _gpu(hw, "00000000:76:00.0")
    assert remap["gpu"] == 3 and remap["faults"][0]["kind"] == "remap-failed"
    assert "Remapping Failure Occurred: Yes" in remap["faults"][0]["evidence"]
    assert "replacing" in remap["faults"][0]["fix"]


def test_doctor_never_alarms_on_idle_downshifts_and_warns_on_a_restart_class_xid(deploy_env: DeployEnv) -> None:
    env = deploy_env
    env.faults(link="0:idle-downshift,5:stuck-gen2", xid="13@1")
    doc = env.run("--json", "doctor", "host", env.host)
    assert doc.rc == 0, doc.text  # idle links are not judged; Xid 13 asks for a unit restart: a warning
    hw = doc.json["hardware"]
    assert [g["gpu"] for g in hw["gpus"] if g["faults"]] == [1] and hw["action"] == "restart_unit"
    assert all("not judged" in g["link"] for g in hw["gpus"])


@pytest.mark.xdist_group(SHARED)
def test_status_exits_non_zero_on_a_fatal_gpu_fault_and_shows_the_evidence(converged_shared: DeployEnv) -> None:
    env = converged_shared
    try:
        env.faults(remap="4:pending")
        res = env.run("--json", "status", "host", env.host)
        assert res.rc == 1 and res.json["health"] == "200", res.text
        gpu = _gpu(res.json["hardware"], "00000000:84:00.0")
        assert gpu["action"] == "reboot_host" and "Remapped Rows: Pending: Yes" in gpu["faults"][0]["evidence"]
        text = env.run("status", "host", env.host)
        assert text.rc == 1 and "GPU hardware" in text.stdout and "Pending: Yes" in text.stdout
        # up's host checks read the same sensors, and its last round trip publishes them (docs/monitoring.md)
        env.run("up", "host", env.host, "--skip-bench")
        prom = env.ssh(f"cat {PROM_PATH}").stdout
        assert re.search(r'^deploy_gpus\{host="[^"]+",release="[^"]+",state="fail"\} 1$', prom, re.M), prom
        assert re.search(r'^deploy_gpu_fault\{[^}]*bus_id="00000000:84:00.0",kind="remap-pending",'
                         r'action="reboot_host",severity="fail"\} 1$', prom, re.M), prom
    finally:
        env.faults(remap=None)
    assert env.run("status", "host", env.host).rc == 0
