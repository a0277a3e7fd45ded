"""A failed connect names its real cause: paramiko's "[Errno None] Unable to connect" hid refused vs no route.

Refused and a silent port are real sockets on loopback; a timeout, no route and an unknown name are the
exception objects the socket layer raises for them (they cannot be produced on loopback).
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from paramiko.ssh_exception import NoValidConnectionsError

from orchestrator.errors import RemoteError
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import Host
from orchestrator.remote.ssh import SshHost, unreachable
from tests.shared import EXAMPLE_INVENTORY

REPO = Path(__file__).resolve().parents[3]


def host_at(port: int, tmp_path: Path) -> Host:
    h = load_inventory(EXAMPLE_INVENTORY).hosts["pve-gpu-1"]
    ssh = h.ssh.model_copy(update={"port": port, "connect_timeout_s": 1.0, "known_hosts": tmp_path / "kh"})
    return h.model_copy(update={"address": "127.0.0.1", "ssh": ssh, "example": False})


@pytest.fixture
def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel completes them from the backlog) and never speaks."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    yield int(s.getsockname()[1])
    s.close()


def connect_error(port: int, tmp_path: Path) -> RemoteError:
    with pytest.raises(RemoteError) as err, SshHost(host_at(port, tmp_path)) as ssh:
        ssh.connect()
    return err.value


def test_refused_says_nothing_listens_and_how_to_fix(closed_port: int, tmp_path: Path) -> None:
    err = connect_error(closed_port, tmp_path)
    assert err.step == "connect" and err.host == "pve-gpu-1" and err.exit_code == 3
    assert err.what == (f"cannot reach 127.0.0.1:{closed_port}: connection refused: nothing listens on port "
                        f"{closed_port} (or a firewall rejects it)")
    assert "Errno None" not in str(err) and "ssh.port" in err.fix and "sshd" in err.fix
    assert err.details == {"cause": "refused"}


def test_a_port_without_an_ssh_server_is_named(silent_port: int, tmp_path: Path) -> None:
    err = connect_error(silent_port, tmp_path)
    assert err.details == {"cause": "no-banner"}
    assert f"127.0.0.1:{silent_port} accepted the connection but completed no SSH handshake within 1 s" in err.what
    assert f"port {silent_port} is sshd's" in err.fix


def test_no_route_inside_paramikos_wrapper() -> None:
    wrapped = NoValidConnectionsError({("192.0.2.7", 22): OSError(errno.EHOSTUNREACH, "No route to host")})
    assert "Errno None" in str(wrapped)  # what users saw before
    cause, reason, fix = unreachable(wrapped, "192.0.2.7", 22, 10.0)
    assert cause == "no-route" and reason.startswith("no route to host") and "192.0.2.7" in fix


@pytest.mark.parametrize(("exc", "cause", "words"), [
    (TimeoutError("timed out"), "timeout", "no answer within 10 s"),
    (OSError(errno.ENETUNREACH, "Network is unreachable"), "network-unreachable", "network is unreachable"),
    (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "no-such-name", "does not resolve"),
    (OSError(errno.EACCES, "Permission denied"), "os-error", "Permission denied"),
])
def test_each_cause_gets_its_own_reason_and_fix(exc: OSError, cause: str, words: str) -> None:
    got_cause, reason, fix = unreachable(exc, "pve.example", 22, 10.0)
    assert got_cause == cause and words in reason and fix


def test_the_example_host_is_refused_before_any_connection(silent_port: int, tmp_path: Path) -> None:
    """`deploy init` writes the worked example's host with `example: true`: the tool contacts nothing for it."""
    from orchestrator.errors import ConfigError
    from orchestrator.remote.pve import HttpsPve
    from orchestrator.runlog import Metrics

    example = host_at(silent_port, tmp_path).model_copy(update={"example": True})
    with pytest.raises(ConfigError) as exc:
        SshHost(example).connect()
    assert "example" in exc.value.what and "nothing was contacted" in exc.value.what
    assert "example: true" in (exc.value.fix or "")
    with pytest.raises(ConfigError):
        HttpsPve(example, Metrics())
    shipped = load_inventory(EXAMPLE_INVENTORY).hosts["pve-gpu-1"]
    assert shipped.example, "the shipped example must stay marked: its address is not the user's"


def test_a_silent_port_prints_deploys_error_and_no_paramiko_traceback(silent_port: int, inv: Path) -> None:
    """Issue 25 item 7: paramiko's transport thread logged its traceback to stderr beside deploy's own error."""
    hosts = inv / "hosts.yaml"
    hosts.write_text(hosts.read_text().replace("address: 10.1.230.174", "address: 127.0.0.1")
                     .replace("example: true", "example: false")
                     .replace("      port: 22\n", f"      port: {silent_port}\n      connect_timeout_s: 1\n")
                     .replace("~/.ssh/known_hosts", str(inv / "known_hosts")))
    res = subprocess.run([sys.executable, "-m", "orchestrator", "--inventory", str(inv), "status", "host",
                          "pve-gpu-1"], capture_output=True, text=True, cwd=REPO, timeout=60,
                         env={**os.environ, "DEPLOY_PVE_TOKEN_SECRET": "not-used"})
    assert res.returncode == 3
    assert "accepted the connection but completed no SSH handshake" in res.stderr
    assert "Traceback" not in res.stderr and "paramiko" not in res.stderr, res.stderr
