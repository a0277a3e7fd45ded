"""The simulated host's real sshd: strict host keys, the host view, stdin forwarding, the SSH-drop fault."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import paramiko
import pytest

from orchestrator.inventory.loader import load_inventory
from orchestrator.remote.ssh import SshHost
from simulator.config import HostPaths
from simulator.host import sshd
from simulator.manager.faults import set_faults
from simulator.manager.lifecycle import sim_up
from tests.shared import EXAMPLE_INVENTORY

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def ssh_argv(info: Any, known_hosts: str) -> list[str]:
    return ["ssh", "-i", str(info.key_file), "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-p", str(info.ssh_port), f"root@{info.address}"]


def test_ssh_binary_with_generated_key_and_known_hosts(sim: Any) -> None:
    res = subprocess.run([*ssh_argv(sim, str(sim.known_hosts)), "hostname; echo $DEPLOY_SIM_HOST; "
                          "cat /proc/driver/nvidia/version; ls /root; command -v pct"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == sim.name and lines[1] == sim.name
    assert sim.driver_version in lines[2]
    assert f"NVIDIA-Linux-x86_64-{sim.driver_version}.run" in res.stdout
    assert res.stdout.strip().endswith("/bin/host/pct")


def test_wrong_known_hosts_is_refused(sim: Any, tmp_path: Any) -> None:
    wrong = tmp_path / "known_hosts"
    other_key = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True)
    pub = (tmp_path / "other.pub").read_text().split()
    wrong.write_text(f"[{sim.address}]:{sim.ssh_port} {pub[0]} {pub[1]}\n")
    res = subprocess.run([*ssh_argv(sim, str(wrong)), "true"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 255
    assert "HOST IDENTIFICATION HAS CHANGED" in res.stderr or "verification failed" in res.stderr


def test_paramiko_reject_policy_connects(sim: Any) -> None:
    client = paramiko.SSHClient()
    client.load_host_keys(str(sim.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(sim.address, port=sim.ssh_port, username="root", key_filename=str(sim.key_file),
                   look_for_keys=False, allow_agent=False, timeout=10)
    _, out, _ = client.exec_command("echo ok")
    assert out.read() == b"ok\n"
    client.close()


def test_tool_connection_turns_nagle_off(sim: Any) -> None:
    """The tool's own SSH connection runs with TCP_NODELAY (orchestrator.remote.ssh.open_tcp): with Nagle on,
    each back-to-back command waited ~40 ms for a delayed ACK."""
    host = load_inventory([EXAMPLE_INVENTORY, sim.host_dir.parent.parent]).find_host(sim.name)
    with SshHost(host) as ssh:
        assert ssh.run("hostname").stdout == f"{sim.node}\n"
        transport = ssh.connect().get_transport()
        assert transport is not None
        assert transport.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_bash_s_reads_script_from_stdin(ssh: Any) -> None:
    res = ssh.run("bash -s", stdin="set -e\nx=$((6*7))\necho answer=$x\nexit 3\n")
    assert res.rc == 3
    assert res.out == "answer=42\n"


def test_host_view_is_private(ssh: Any, sim: Any) -> None:
    """Writes to /root and /tmp in the session land in the host's fs/, not on the real machine."""
    res = ssh.run("echo hi > /tmp/sim-private-probe && echo hi > /root/probe && ls /etc/pve")
    assert res.rc == 0, res.err
    assert (sim.host_dir / "fs/tmp/sim-private-probe").exists()
    assert (sim.host_dir / "fs/root/probe").exists()
    assert not __import__("os").path.exists("/tmp/sim-private-probe")


def test_session_environment_is_the_documented_one(ssh: Any, sim: Any) -> None:
    """Nothing from this machine's shell init (root's .bashrc: pyenv here) or sshd's own settings leaks in."""
    res = ssh.run("env -0")
    assert res.rc == 0, res.err
    env = dict(kv.split("=", 1) for kv in res.out.split("\0") if kv)
    assert set(env) == {"HOME", "USER", "LOGNAME", "SHELL", "PATH", "LANG", "PWD", "SHLVL", "_", "SSH_CLIENT",
                        "SSH_CONNECTION", "SSH_ORIGINAL_COMMAND", "DEPLOY_SIM_PYTHON", "DEPLOY_SIM_REPO",
                        "DEPLOY_SIM_ROOT", "DEPLOY_SIM_HOST"}
    assert env["PATH"].split(":")[0] == "/run/deploy-sim/root/bin/host"
    assert (env["DEPLOY_SIM_HOST"], env["PWD"]) == (sim.name, "/root")


def test_sessions_share_one_persistent_host_view(ssh: Any, sim: Any) -> None:
    """Every session joins the view `sim up` built (one mount namespace, not this machine's), as sessions on a
    real host share its root: a mount made in one session is still there in the next."""
    first = ssh.run("readlink /proc/self/ns/mnt; mkdir -p /tmp/viewprobe && mount -t tmpfs probe /tmp/viewprobe "
                    "&& touch /tmp/viewprobe/mark")
    assert first.rc == 0, first.err
    try:
        second = ssh.run("readlink /proc/self/ns/mnt; hostname; ls /tmp/viewprobe")
        assert second.out.split() == [first.out.strip(), sim.node, "mark"]
        assert first.out.strip() != os.readlink("/proc/self/ns/mnt")
        assert not (sim.host_dir / "fs/tmp/viewprobe/mark").exists()  # on the tmpfs, inside the view only
    finally:
        ssh.run("umount /tmp/viewprobe; rmdir /tmp/viewprobe")


def test_lost_host_view_is_reported_and_sim_up_restores_it(ssh: Any, sim: Any) -> None:
    hp = HostPaths(sim.host_dir)
    view = sshd.view_running(hp)
    assert view is not None
    ssh.close()
    os.kill(view, signal.SIGKILL)
    res = subprocess.run([*ssh_argv(sim, str(sim.known_hosts)), "true"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 255
    assert f"deploy sim: {sim.name}: the host view" in res.stderr and "deploy sim up --root" in res.stderr
    root = sim.host_dir.parent.parent
    (info,) = sim_up(root, hosts=1, first=int(sim.name.split("-")[1]), time_scale=5.0)
    assert sshd.view_running(hp) not in (None, view) and info.sshd_pid is not None
    assert ssh.run("hostname").out == f"{sim.node}\n"


def test_ssh_drop_after_kills_one_connection(ssh: Any, sim: Any) -> None:
    set_faults(sim.host_dir.parent.parent, sim.name, ssh_drop_after=2)
    assert ssh.run("true").rc == 0
    assert ssh.run("true").rc == 0
    with pytest.raises((paramiko.SSHException, EOFError, OSError)):
        res = ssh.run("echo should-not-run")
        # a dropped channel may also surface as an empty result with rc -1
        if res.rc == -1 and res.out == "":
            raise paramiko.SSHException("connection dropped")
    transport = ssh.client.get_transport() if ssh.client else None
    assert transport is None or not transport.is_active()
    # the knob resets itself: the next connection works
    assert ssh.run("echo back").out == "back\n"
    assert sim_host_faults(sim)["ssh_drop_after"] is None


def sim_host_faults(sim: Any) -> dict[str, Any]:
    import json

    return dict(json.loads((sim.host_dir / "host.json").read_text())["faults"])


def test_output_sent_after_the_exit_status_is_not_cut_off(sim: Any) -> None:
    """sshd sends the exit status when the command exits, and forwards what is still in its pipes after that (here:
    a child that outlives the shell and writes later). The tool reads to EOF: the fact batch's last section was
    once lost this way on a loaded machine."""
    host = load_inventory([EXAMPLE_INVENTORY, sim.host_dir.parent.parent]).find_host(sim.name)
    with SshHost(host) as ssh:
        res = ssh.run("(sleep 0.5; echo late; echo late-err >&2) & echo early", check=False)
        assert res.rc == 0
        assert res.stdout == "early\nlate\n" and res.stderr == "late-err\n"
