"""The boot unit that recreates the on-demand NVIDIA nodes before pve-guests: its text, `doctor`'s finding, and
`up`'s `boot_nodes` step (installs it once, then leaves it alone)."""

from __future__ import annotations

from orchestrator.facts import HOST
from orchestrator.parsers.devices import nvidia_char_devices, parse_dev_listing
from orchestrator.render.boot_unit import SEPARATOR, UNIT_NAME, render_boot_unit
from orchestrator.verdicts.host import BOOT_UNIT_FIX, UVM_FIX, doctor_findings
from tests.shared import doctor_host_facts

LISTING = """\
crw-rw-rw- 1 root root 195,   0 Nov 30 10:00 /dev/nvidia0
crw-rw-rw- 1 root root 195,   3 Nov 30 10:00 /dev/nvidia3
crw-rw-rw- 1 root root 195, 255 Nov 30 10:00 /dev/nvidiactl
crw-rw-rw- 1 root root 508,   0 Nov 30 10:00 /dev/nvidia-uvm
crw-rw-rw- 1 root root 508,   1 Nov 30 10:00 /dev/nvidia-uvm-tools

/dev/nvidia-caps:
total 0
cr-------- 1 root root 511, 1 Nov 30 10:00 nvidia-cap1
cr--r--r-- 1 root root 511, 2 Nov 30 10:00 nvidia-cap2
"""
WANTED = render_boot_unit(nvidia_char_devices(parse_dev_listing(LISTING)))


def fact(enabled: str, text: str | None) -> str:
    return f"{enabled}\n{SEPARATOR}\n{text or ''}"


def test_the_unit_runs_nvidia_modprobe_for_every_node_before_pve_guests() -> None:
    lines = WANTED.splitlines()
    assert "Before=pve-guests.service" in lines and "WantedBy=multi-user.target" in lines
    assert "Type=oneshot" in lines and "RemainAfterExit=yes" in lines
    # A boot leaves no /dev/nvidia* node at all: each GPU's minor and nvidiactl (minor 255) first, without -u
    # (with -u the same -c makes uvm nodes); a host with nvidia-persistenced has it start first.
    assert "After=systemd-modules-load.service nvidia-persistenced.service" in lines
    assert [ln for ln in lines if ln.startswith("ExecStart=")] == [
        "ExecStart=nvidia-modprobe -c0 -c3 -c255",
        "ExecStart=nvidia-modprobe -u -c0",
        "ExecStart=nvidia-modprobe -f /proc/driver/nvidia/capabilities/mig/config "
        "-f /proc/driver/nvidia/capabilities/mig/monitor"]
    assert "RequiredBy" not in WANTED  # a failure must not keep the host's other guests down


def _finding(boot_unit: str) -> tuple[str, str, str]:
    found = {f.check: f for f in doctor_findings(doctor_host_facts({HOST.dev_listing: LISTING,
                                                                      HOST.boot_unit: boot_unit}))}
    f = found["boot-nodes-unit"]
    return f.status, f.observed, f.fix


def test_doctor_warns_when_no_unit_recreates_the_nodes_at_boot() -> None:
    status, observed, fix = _finding(fact("", None))
    assert status == "warn" and f"no {UNIT_NAME}" in observed and "Device /dev/nvidia0 does not exist" in observed
    assert fix == BOOT_UNIT_FIX and "deploy up" in fix and "pve-guests.service" in fix
    assert _finding(fact("disabled", WANTED))[0:2] == ("warn", f"{UNIT_NAME} is not enabled: a reboot will not run it")
    assert _finding(fact("enabled", WANTED.replace(" -u -c0", " -u")))[0] == "warn"  # not what the host needs
    assert _finding(fact("enabled", WANTED))[0] == "ok"


def test_the_uvm_fix_no_longer_says_persistenced_loads_uvm() -> None:
    assert "nvidia-modprobe -u -c0" in UVM_FIX and "does not load nvidia-uvm" in UVM_FIX
    assert "enable --now nvidia-persistenced" not in UVM_FIX


def test_boot_nodes_installs_the_unit_once(make_run) -> None:
    run = make_run({"dev_listing": LISTING, "boot_unit": fact("", None)})
    run.node.succeed("systemctl enable")
    rec = run.step("boot_nodes")
    assert rec.status == "changed" and rec.changes[0].startswith(f"install {UNIT_NAME}: nvidia-modprobe -c0 -c3 -c255; "
                                                                     "nvidia-modprobe -u -c0")
    [script] = run.node.commands("script")
    assert "/etc/systemd/system/deploy-nvidia-nodes.service" in script and "Before=pve-guests.service" in script
    assert "systemctl daemon-reload" in script and f"systemctl enable {UNIT_NAME}" in script

    again = make_run({"dev_listing": LISTING, "boot_unit": fact("enabled", WANTED)})
    rec = again.step("boot_nodes")
    assert rec.status != "changed" and rec.changes == [] and again.node.calls == []


def test_boot_nodes_plans_without_changing(make_run) -> None:
    run = make_run({"dev_listing": LISTING, "boot_unit": fact("enabled", WANTED + "# edited\n")}, dry_run=True)
    rec = run.step("boot_nodes")
    assert rec.status == "would-change" and rec.changes[0].startswith(f"update {UNIT_NAME}")
    assert run.node.calls == []
