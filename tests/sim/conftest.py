"""Clients for the simulated host: one strict-host-key paramiko connection, proxmoxer over HTTPS with the CA."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import paramiko
import pytest


@dataclass
class Result:
    rc: int
    out: str
    err: str


class Ssh:
    """Runs commands over one SSH connection (reconnects if the simulator dropped it)."""

    def __init__(self, info: Any):
        self.info = info
        self.client: paramiko.SSHClient | None = None

    def connect(self) -> paramiko.SSHClient:
        if self.client is not None:
            transport = self.client.get_transport()
            if transport is not None and transport.is_active():
                return self.client
        client = paramiko.SSHClient()
        client.load_host_keys(str(self.info.known_hosts))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(self.info.address, port=self.info.ssh_port, username="root",
                       key_filename=str(self.info.key_file), look_for_keys=False, allow_agent=False, timeout=10)
        self.client = client
        return client

    def run(self, command: str, stdin: str | None = None, timeout: float = 30) -> Result:
        _, out, err = self.connect().exec_command(command, timeout=timeout)
        if stdin is not None:
            out.channel.sendall(stdin.encode())
        out.channel.shutdown_write()
        o, e = out.read().decode(), err.read().decode()
        rc = out.channel.recv_exit_status()
        out.channel.close()  # not left open until garbage collection: the transport holds only live channels
        return Result(rc, o, e)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


@pytest.fixture(scope="session")
def ssh_session(sim_host: Any) -> Iterator[Ssh]:
    s = Ssh(sim_host)
    yield s
    s.close()


@pytest.fixture
def ssh(sim: Any, ssh_session: Ssh) -> Ssh:
    return ssh_session


@pytest.fixture
def prox(sim: Any) -> Any:
    """proxmoxer with the API token and real TLS verification against the simulator's CA."""
    from proxmoxer import ProxmoxAPI

    return ProxmoxAPI(sim.address, port=sim.api_port, user="root@pam", token_name="deploy",
                      token_value=sim.token_secret_file.read_text().strip(), verify_ssl=str(sim.ca_file),
                      timeout=15)


TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


@pytest.fixture
def make_ct(ssh: Ssh) -> Any:
    """`pct create` a small privileged CT over SSH (root@pam); returns the Result."""

    def create(vmid: int = 120, extra: str = "") -> Result:
        return ssh.run(f"pct create {vmid} {TEMPLATE} --hostname ct{vmid} --cores 2 --memory 1024 "
                       f"--rootfs local-lvm:8 --net0 name=eth0,bridge=vmbr0,ip=dhcp --unprivileged 0 "
                       f"--features nesting=1 {extra}")

    return create
