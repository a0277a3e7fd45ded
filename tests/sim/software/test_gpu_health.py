"""GPU hardware fault knobs in the real formats, read back by the tool's own parsers (orchestrator/hardware)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable

import pytest

from orchestrator.hardware.catalog import Action
from orchestrator.hardware.kernel_log import parse_kernel_log
from orchestrator.hardware.smi_health import LINK_QUERY_FIELDS, parse_smi_health
from orchestrator.hardware.state import judge_hardware
from simulator.gpu import health, smi
from simulator.gpu.simctx import SimContext
from simulator.host import journal as hostjournal

from .conftest import SimHost

HEALTH_Q = ("-q", "-d", "ECC,ROW_REMAPPER,PERFORMANCE")
LINKS = (f"--query-gpu={','.join(LINK_QUERY_FIELDS)}", "--format=csv,nounits")


def _smi(h: SimHost, *args: str) -> tuple[int, str, str]:
    """nvidia-smi in-process (the same code the host's stand-in runs), its exit, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    real, smi.sys.stderr = smi.sys.stderr, err
    try:
        rc = smi.run(list(args), SimContext(str(h.dir), None, "/dev"), out)
    finally:
        smi.sys.stderr = real
    return rc, out.getvalue(), err.getvalue()


def _load(h: SimHost, minors: list[int], util: float = 1.0) -> None:
    (h.dir / "gpu").mkdir(exist_ok=True)
    (h.dir / "gpu" / "load-test.json").write_text(json.dumps(
        {"updated": time.time(), "minors": minors, "util": util, "power_fraction": util}))


def test_health_sections_parse_and_carry_the_knobs(make_host: Callable[..., SimHost]) -> None:
    h = make_host(ecc="1:2:5", remap="3:failed,4:pending", clocks_event="5:hw_thermal")
    rc, out, err = _smi(h, *HEALTH_Q)
    assert rc == 0 and err == ""
    report = parse_smi_health(out)
    assert len(report.gpus) == 8
    gpus = {g.bus_id: g for g in report.gpus}
    bus = [g.bus_id for g in smi.get_profile("rtx-pro-6000-x8").gpus]
    assert (gpus[bus[1]].dram_uncorrectable, gpus[bus[1]].dram_correctable) == (2, 5)
    assert gpus[bus[3]].remap_failed and not gpus[bus[3]].remap_pending
    assert gpus[bus[4]].remap_pending and gpus[bus[5]].slowdowns == ("HW Thermal Slowdown",)
    assert not any(g.remap_pending or g.remap_failed or g.dram_uncorrectable for b, g in gpus.items()
                   if b not in (bus[1], bus[3], bus[4]))


def test_a_lost_gpu_is_nvidias_error_line(make_host: Callable[..., SimHost]) -> None:
    h = make_host(gpu_lost=2)
    rc, out, err = _smi(h, *HEALTH_Q)
    assert rc == 15 and err == ("Unable to determine the device handle for GPU 0000:75:00.0: GPU is lost.  Reboot "
                                "the system to recover this GPU\n")
    report = parse_smi_health(out + err)
    assert len(report.gpus) == 7 and [x.bus_id for x in report.lost] == ["00000000:75:00.0"]
    rc, out, err = _smi(h, *LINKS)
    assert rc == 0 and "GPU is lost" in err and len(out.splitlines()) == 1 + 7


def test_xid_knob_writes_real_lines_the_journal_shows_after_its_cursor(
        make_host: Callable[..., SimHost], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    h = make_host()
    bus = [g.bus_id for g in smi.get_profile("rtx-pro-6000-x8").gpus]
    health.append_kernel(str(h.dir), [health.xid_line(79, bus[2]), health.xid_line(13, bus[0])])
    monkeypatch.setenv("DEPLOY_SIM_HOST_DIR", str(h.dir))
    assert hostjournal.main(["-k", "-q", "--no-pager", "-o", "short-iso", "--show-cursor"]) == 0
    first = parse_kernel_log(capsys.readouterr().out)
    assert [(e.code, e.pci) for e in first.events] == [(79, "0000:75:00"), (13, "0000:06:00")]
    assert first.events[1].pid == "4242" and first.events[1].name == "python3" and first.cursor
    assert hostjournal.main(["-k", "-q", "--show-cursor", f"--after-cursor={first.cursor}"]) == 0
    assert parse_kernel_log(capsys.readouterr().out).events == ()  # nothing re-reported after the cursor
    state = judge_hardware(kernel_log="\n".join(e.line for e in first.events), smi_q="", links="")
    assert state.action is Action.reboot_host


def test_idle_downshift_never_alarms_and_stuck_gen2_is_flagged_under_load(make_host: Callable[..., SimHost]) -> None:
    """1,000 idle link samples with downshifts: no fault; under load the stuck GPU is flagged every time."""
    h = make_host(link="0:idle-downshift,6:stuck-gen2")
    alarms, downshifted = 0, 0
    for _ in range(125):  # 125 reads x 8 GPUs = 1,000 link samples
        rc, out, _ = _smi(h, *LINKS)
        state = judge_hardware(kernel_log="", smi_q="", links=out)
        alarms += len(state.faulty)
        downshifted += sum("not judged" in (g.link or "") for g in state.gpus)
    assert rc == 0 and alarms == 0 and downshifted == 1000
    _load(h, [g.minor for g in smi.get_profile("rtx-pro-6000-x8").gpus])
    for _ in range(20):
        state = judge_hardware(kernel_log="", smi_q="", links=_smi(h, *LINKS)[1])
        assert [(g.index, g.faults[0].kind) for g in state.faulty] == [(6, "link")]
        assert "Gen2 x16 of Gen5 x16" in state.faulty[0].faults[0].meaning


def test_a_malformed_knob_is_refused() -> None:
    with pytest.raises(ValueError, match=r"GPU:pending\|failed with GPU 0\.\.7"):
        health.check_knobs({"remap": "9:pending"}, 8)
    with pytest.raises(ValueError, match="CODE@GPU"):
        health.check_knobs({"xid": "79"}, 8)


def test_full_q_carries_the_knobs_and_the_drivers_recovery_action(make_host: Callable[..., SimHost]) -> None:
    """The tool reads the full `nvidia-smi -q` (GPU Recovery Action is in no -d section): each GPU's block of the
    real capture with the knobs applied, a lost GPU as NVIDIA's error line, and the recovery action as the driver
    prints it (`Reboot`) next to its Xid 154 line in the kernel log."""
    h = make_host(remap="4:pending", ecc="1:2", gpu_lost=2, recovery="3:reboot")
    bus = [g.bus_id for g in smi.get_profile("rtx-pro-6000-x8").gpus]
    health.append_kernel(str(h.dir), [health.recovery_line("reboot", bus[3])])  # what `deploy sim fault` writes
    rc, out, err = _smi(h, "-q")
    assert rc == 15 and "GPU is lost" in err
    gpus = {g.bus_id: g for g in parse_smi_health(out + err).gpus}
    assert len(gpus) == 7 and gpus[bus[3]].recovery_action == "Reboot" and gpus[bus[0]].recovery_action == "None"
    assert gpus[bus[4]].remap_pending and gpus[bus[1]].dram_uncorrectable == 2
    assert "Product Name" in out and "NVIDIA RTX PRO 6000" in out  # the real capture's blocks, not a stub
    klog = "\n".join(f"x kernel: {line}" for _, line in health.read_kernel(str(h.dir)))
    assert "154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)" in klog
    state = judge_hardware(kernel_log=klog, smi_q=out, smi_q_stderr=err, links=None)
    by_bus = {g.bus_id: g for g in state.gpus}
    assert by_bus[bus[3]].action is Action.reboot_host and by_bus[bus[4]].action is Action.none
    with pytest.raises(ValueError, match=r"GPU:reset\|reboot"):
        health.check_knobs({"recovery": "3:now"}, 8)
