"""A host reboot needs no operator: `up` leaves a unit that recreates every NVIDIA node the container is given (the
GPUs, nvidiactl, uvm, caps: a boot leaves none) before pve-guests, so after `deploy sim reboot` the onboot container
starts and its server serves again with no deploy command. The time to serving is printed (`-s` shows it)."""

from __future__ import annotations

import time

from tests.e2e.conftest import DeployEnv, until

UNIT = "deploy-nvidia-nodes.service"
#: The server's health, asked inside the container (pct exec over SSH), as an operator would check it.
HEALTH = "curl -s -o /dev/null -w '%{http_code}' -m 3 http://127.0.0.1:8000/health"
SERVE_WAIT_S = 180


def test_after_a_host_reboot_the_server_serves_again_by_itself(converged: DeployEnv) -> None:
    host = converged.host
    assert converged.ssh(f"systemctl is-enabled {UNIT}").stdout == "enabled\n"
    boot_before = converged.ssh("cat /proc/sys/kernel/random/boot_id").stdout

    gpu_nodes = converged.ssh("ls /dev/nvidia0 /dev/nvidia7 /dev/nvidiactl").stdout
    start = time.monotonic()
    res = converged.run("sim", "reboot", host, "--root", str(converged.root))
    rebooted_s = time.monotonic() - start
    assert res.rc == 0, res.text
    lines = res.stdout.splitlines()
    assert any("no /dev/nvidia* node" in line for line in lines), res.stdout  # the kernel made none
    assert f"systemd: {UNIT}: started" in lines and "Starting CT 120" in lines, res.stdout
    assert lines.index(f"systemd: {UNIT}: started") < lines.index("Starting CT 120")
    assert not any("failed" in line for line in lines), res.stdout
    assert converged.ssh("cat /proc/sys/kernel/random/boot_id").stdout != boot_before

    def serves() -> bool:
        return converged.ct(HEALTH).stdout.strip() == "200"

    assert until(serves, SERVE_WAIT_S, 1.0), (
        f"the server did not serve within {SERVE_WAIT_S} s of the reboot: "
        f"{converged.ct('systemctl status sglang --no-pager | head -n 20').text}")
    print(f"\nhost reboot: `sim reboot` {rebooted_s:.1f} s, serving {time.monotonic() - start:.1f} s after it began")
    assert converged.ssh("ls /dev/nvidia0 /dev/nvidia7 /dev/nvidiactl").stdout == gpu_nodes  # the unit made them

    doctor = converged.run("--json", "doctor", "host", host)
    found = {f["check"]: f for f in doctor.json["findings"]}
    assert found["boot-nodes-unit"]["status"] == "ok" and found["nvidia-uvm-node"]["status"] == "ok"
    # Without the unit, doctor says what the next reboot would do, and how to fix it.
    assert converged.ssh(f"systemctl disable {UNIT} && rm /etc/systemd/system/{UNIT}").rc == 0
    doctor = converged.run("--json", "doctor", "host", host)
    unit = {f["check"]: f for f in doctor.json["findings"]}["boot-nodes-unit"]
    assert unit["status"] == "warn" and "Device /dev/nvidia0 does not exist" in unit["observed"]
    assert "deploy up" in unit["fix"]
