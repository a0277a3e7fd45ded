"""`deploy sim reboot` and pct as on PVE: on-demand NVIDIA nodes gone after a boot, pve-guests' start order and its
errors, the host's own units, nvidia-modprobe's real options, `pct exec` with the caller's environment and no wait."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest

from simulator.manager.lifecycle import sim_reboot

pytestmark = pytest.mark.e2e

GPU_DEVS = "--dev0 /dev/nvidia0,mode=0666 --dev1 /dev/nvidiactl,mode=0666 --dev2 /dev/nvidia-uvm,mode=0666"
NODES_UNIT = """[Unit]
Description=test: on-demand NVIDIA nodes
Before=pve-guests.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=nvidia-modprobe -c0 -c255
ExecStart=nvidia-modprobe -u -c0
ExecStart=nvidia-modprobe -f /proc/driver/nvidia/capabilities/mig/config \\
  -f /proc/driver/nvidia/capabilities/mig/monitor
[Install]
WantedBy=multi-user.target
"""


def _root(sim: Any) -> Any:
    return sim.host_dir.parent.parent


def test_reboot_leaves_an_onboot_ct_down_with_pves_error(ssh: Any, make_ct: Any, sim: Any, prox: Any) -> None:
    assert make_ct(124, f"{GPU_DEVS} --onboot 1").rc == 0
    assert ssh.run("pct start 124").rc == 0
    boot_before = ssh.run("cat /proc/sys/kernel/random/boot_id").out
    lines = sim_reboot(_root(sim), sim.name)
    assert "Starting CT 124" in lines
    # The kernel module makes no node: the first devN (/dev/nvidia0) is the first PVE finds missing.
    assert "Starting CT 124 failed: Device /dev/nvidia0 does not exist" in lines
    ssh.client = None  # the reboot closed the connection
    assert ssh.run("pct status 124").out == "status: stopped\n"
    boot_after = ssh.run("cat /proc/sys/kernel/random/boot_id").out
    assert re.fullmatch(r"[0-9a-f-]{36}\n", boot_after) and boot_after != boot_before
    listing = ssh.run("ls /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/nvidia-caps /dev/nvidiactl /dev/nvidia0")
    for gone in ("/dev/nvidia-uvm", "/dev/nvidia-caps", "/dev/nvidiactl", "/dev/nvidia0"):
        assert f"cannot access '{gone}'" in listing.err, listing
    assert listing.out == "" and "nvidia-uvm" not in ssh.run("cat /proc/devices").out
    tasks = [t for t in prox.nodes(sim.node).tasks.get() if t["type"] == "vzstart" and t["id"] == "124"]
    # The boot's start is a vzstart task of its own that failed with PVE's text (the test's own `pct start` before
    # the reboot may end in the same second, so the list's order between the two is not defined).
    assert [t["status"] for t in tasks].count("Device /dev/nvidia0 does not exist") == 1, tasks
    assert next(n for n in prox.nodes.get() if n["node"] == sim.node)["uptime"] < 60  # uptime restarted


def test_unit_before_pve_guests_brings_the_cts_back_in_startup_order(ssh: Any, make_ct: Any, sim: Any) -> None:
    assert make_ct(125, f"{GPU_DEVS} --onboot 1 --startup order=2").rc == 0
    assert make_ct(126, "--onboot 1 --startup order=1").rc == 0
    assert make_ct(127, "--onboot 0").rc == 0
    res = ssh.run("cat > /etc/systemd/system/nodes.service && systemctl daemon-reload && "
                  "systemctl enable nodes.service && systemctl is-enabled nodes.service", stdin=NODES_UNIT)
    assert res.rc == 0 and res.out == "enabled\n", res.err
    lines = sim_reboot(_root(sim), sim.name)
    assert lines.index("systemd: nodes.service: started") < lines.index("Starting CT 126") \
        < lines.index("Starting CT 125")
    # "CT 127", not "127": the boot id line is a random UUID that may hold those digits.
    assert not any("CT 127" in line or "failed" in line for line in lines), lines
    ssh.client = None
    assert ssh.run("pct status 125").out == "status: running\n"
    assert ssh.run("pct status 127").out == "status: stopped\n"
    listing = ssh.run("ls -l /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/nvidia-caps/").out
    assert "nvidia-cap1" in listing and "nvidia-cap2" in listing and "nvidia-uvm-tools" in listing
    assert ssh.run("systemctl is-active nodes.service").out == "active\n"


def test_nvidia_modprobe_options_as_nvidias(ssh: Any, sim: Any) -> None:
    sim_reboot(_root(sim), sim.name)
    ssh.client = None
    assert ssh.run("nvidia-modprobe -u").rc == 0  # loads the module: no node without -c
    assert "nvidia-uvm" in ssh.run("cat /proc/devices").out
    assert ssh.run("ls /dev/nvidia-uvm").rc != 0
    assert ssh.run("nvidia-modprobe -u -c0 && nvidia-modprobe -m && ls /dev/nvidia-uvm-tools /dev/nvidia-modeset"
                   ).rc == 0
    res = ssh.run("nvidia-modprobe -c0 -f /proc/driver/nvidia/capabilities/mig/config && stat -c '%a %t' "
                  "/dev/nvidia-caps/nvidia-cap1")
    assert res.rc == 0 and res.out.startswith("400 ")
    res = ssh.run("nvidia-modprobe -f /proc/driver/nvidia/capabilities/nope")
    assert res.rc == 1
    res = ssh.run("nvidia-modprobe -x")
    assert res.rc == 1 and 'unrecognized option: "-x"' in res.err
    res = ssh.run("nvidia-modprobe -c1 -c255 && stat -c '%t %T %n' /dev/nvidia1 /dev/nvidiactl")
    assert res.out.splitlines() == ["c3 1 /dev/nvidia1", "c3 ff /dev/nvidiactl"], res  # 195 = 0xc3


PERSISTENCED_UNIT = """[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target
[Service]
Type=forking
# the real unit says /usr/bin/nvidia-persistenced; the stand-in is found on PATH
ExecStart=nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
[Install]
WantedBy=multi-user.target
"""


def test_a_host_with_nvidia_persistenced_starts_it_before_a_unit_ordered_after_it(ssh: Any, make_ct: Any,
                                                                                    sim: Any) -> None:
    """NVML in nvidia-persistenced makes nvidiactl and the GPU nodes (not uvm's); a unit `After=` it and `Before=`
    pve-guests pulls it ahead of the guests, as systemd's ordering does."""
    assert make_ct(129, f"{GPU_DEVS} --onboot 1").rc == 0
    uvm_only = NODES_UNIT.replace("ExecStart=nvidia-modprobe -c0 -c255\n", "").replace(
        "Before=pve-guests.service", "After=nvidia-persistenced.service\nBefore=pve-guests.service")
    res = ssh.run("cat > /etc/systemd/system/nvidia-persistenced.service && "
                  f"printf '%s' {shlex.quote(uvm_only)} > /etc/systemd/system/nodes.service && "
                  "systemctl enable nvidia-persistenced.service nodes.service", stdin=PERSISTENCED_UNIT)
    assert res.rc == 0, res.err
    lines = sim_reboot(_root(sim), sim.name)
    started = [lines.index(f"systemd: {u}: started") for u in ("nvidia-persistenced.service", "nodes.service")]
    assert started[0] < started[1] < lines.index("Starting CT 129"), lines
    assert not any("failed" in line for line in lines), lines
    ssh.client = None
    assert ssh.run("pct status 129").out == "status: running\n"


SLOW_BOOT_UNIT = """[Unit]
Description=test: a boot that takes a while
[Service]
Type=oneshot
ExecStart=/bin/sleep 8
[Install]
WantedBy=multi-user.target
"""


def test_pct_exec_keeps_the_environment_and_does_not_wait_for_systemd(ssh: Any, make_ct: Any, sim: Any) -> None:
    assert make_ct(128).rc == 0
    assert ssh.run("pct start 128").rc == 0
    res = ssh.run("pct exec 128 -- sh -c 'for i in $(seq 100); do [ -n \"$(systemctl is-system-running --wait)\" ] "
                  "&& break; sleep 0.1; done; "
                  "cat > /etc/systemd/system/slow.service && systemctl enable slow.service'", stdin=SLOW_BOOT_UNIT)
    assert res.rc == 0, res.err
    assert ssh.run("pct stop 128 && pct start 128").rc == 0
    res = ssh.run("pct exec 128 -- systemctl is-system-running")
    # pct start did not wait for the boot, nor does pct exec: systemd is still starting (or not on its bus yet)
    assert res.rc != 0 and res.out.strip() in ("starting", "initializing", "offline", ""), res
    res = ssh.run("LANG=de_DE.UTF-8 LC_ALL=C FOO='a b' pct exec 128 -- sh -c 'echo \"$FOO|$LANG|$LC_ALL|$HOME\"; "
                  "env | grep -c DEPLOY_SIM_ || true'")
    assert res.out.splitlines() == ["a b|de_DE.UTF-8|C|/root", "0"], res.out


def test_reboot_resets_the_gpus_a_fault_left_broken(ssh: Any, sim: Any) -> None:
    """A reboot brings a lost GPU back, applies a pending row remap (a failed one stays), and the kernel log it
    starts holds no Xid of the boot before."""
    from simulator.manager.faults import set_faults

    set_faults(_root(sim), sim.name, xid="79@2", remap="3:pending,4:failed", recovery="2:reboot")
    klog = ssh.run("journalctl -k -q --no-pager").out
    assert "NVRM: Xid (PCI:0000:75:00): 79" in klog
    assert ("NVRM: Xid (PCI:0000:75:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot "
            "Required)") in klog
    assert "GPU is lost" in ssh.run("nvidia-smi -q -d ECC,ROW_REMAPPER,PERFORMANCE").err
    full = ssh.run("nvidia-smi -q")
    assert full.rc == 15 and "GPU is lost" in full.err and "GPU Recovery Action" in full.out
    sim_reboot(_root(sim), sim.name)
    assert ssh.run("journalctl -k -q --no-pager").out == ""
    after = ssh.run("nvidia-smi -q -d ECC,ROW_REMAPPER,PERFORMANCE")
    assert after.rc == 0 and "GPU is lost" not in after.err
    assert after.out.count("Remapping Failure Occurred                     : Yes") == 1
    assert "Pending                                        : Yes" not in after.out
    full = ssh.run("nvidia-smi -q").out  # the driver's recovery action is None again
    assert full.count("GPU Recovery Action                                : None") == 8 and ": Reboot" not in full
