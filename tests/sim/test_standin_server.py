"""The host's stand-in server (simulator.host.standin_server): a call through it is the same call as a direct run
(output, exit status, descriptors, environment, cwd), signals reach the command, a killed caller takes its command with
it, and without the server (or with its code changed) the stand-ins still run, directly."""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import threading
from typing import Any

import pytest

from simulator.host.standin_client import FORWARDED, call, encode_request
from simulator.host.standin_server import decode_request
from tests.e2e.conftest import until

pytestmark = pytest.mark.e2e

SOCK = "$DEPLOY_SIM_ROOT/hosts/$DEPLOY_SIM_HOST/sshd/standin.sock"
#: The same tool run directly, as the wrappers did before the server (and do when it cannot take a call).
DIRECT = {"pct": "$DEPLOY_SIM_PYTHON -S -m simulator.pve.cli pct",
          "pvesh": "$DEPLOY_SIM_PYTHON -S -m simulator.pve.cli pvesh",
          "nvidia-smi": "$DEPLOY_SIM_PYTHON -S -m simulator.gpu.smi"}


def test_request_encoding_round_trips() -> None:
    env = {b"A": b"1", b"EMPTY": b"", b"EQ": b"x=y", b"U": "é".encode()}
    data = encode_request([b"pct", b"", b"a b", b"--x=\xff"], env, b"/root", 0o027, 0b101)
    req = decode_request(data)
    assert req.argv == ["pct", "", "a b", "--x=\udcff"] and req.cwd == "/root"
    assert req.umask == 0o027 and req.fd_mask == 0b101
    assert req.env == {"A": "1", "EMPTY": "", "EQ": "x=y", "U": "é"}


@pytest.fixture
def handlers_kept() -> Any:
    """call() forwards signals to the server; the test process gets its own handlers back."""
    saved = {signum: signal.getsignal(signum) for signum in FORWARDED}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _server_closing(first: bytes = b"") -> tuple[socket.socket, threading.Thread]:
    """A client socket whose server waits for the request, then either closes with it unread (`first` empty) or
    reads it, sends `first` and closes."""
    client, server = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

    def serve() -> None:
        with server:
            select.select([server], [], [], 10)
            if first:
                _, ancdata, _, _ = server.recvmsg(1 << 20, socket.CMSG_SPACE(3 * 4))
                for _, _, fds in ancdata:  # the caller's stdio, passed along: closed, as the real server does
                    for i in range(0, len(fds) - 3, 4):
                        os.close(int.from_bytes(fds[i:i + 4], sys.byteorder))
                server.send(first)

    thread = threading.Thread(target=serve)
    thread.start()
    return client, thread


def test_a_call_the_server_closed_unread_runs_directly(handlers_kept: None) -> None:
    """A server that closes a connection with its request unread (it stopped listening: every stand-in server of
    the machine drains when a stand-in module changes) makes the client's recv fail with ECONNRESET, not EOF;
    nothing ran, so the client runs the tool directly (None) instead of dying with a traceback (seen in CI)."""
    client, thread = _server_closing()
    with client:
        assert call(client, "pct", ["list"]) is None
    thread.join()


def test_a_server_gone_after_run_is_exit_255_with_a_line(handlers_kept: None, capfd: Any) -> None:
    client, thread = _server_closing(b"run")  # then EOF: the server went away while the command ran
    with client:
        assert call(client, "pct", ["list"]) == 255
    thread.join()
    assert "the stand-in server stopped while `pct` ran" in capfd.readouterr().err


@pytest.mark.parametrize("tool, args", [
    ("pct", "status 999"),  # an error: its message on stderr, exit 2
    ("pct", "list"),
    ("pvesh", "get /version --output-format json"),
    ("pvesh", "get /nodes/nosuchnode/lxc"),
    ("nvidia-smi", "--query-gpu=index,name,pci.bus_id --format=csv,noheader"),
    ("nvidia-smi", "--bogus-flag"),
])
def test_a_call_through_the_server_is_the_direct_call(ssh: Any, tool: str, args: str) -> None:
    assert ssh.run(f"test -S {SOCK}").rc == 0, "the view runs no stand-in server"
    served = ssh.run(f"{tool} {args}")
    direct = ssh.run(f"{DIRECT[tool]} {args}")
    assert (served.rc, served.out, served.err) == (direct.rc, direct.out, direct.err)


def test_descriptors_environment_cwd_and_umask_are_the_callers(ssh: Any) -> None:
    res = ssh.run(f"cd /var/lib/vz && umask 077 && pvesh get /version --output-format json > out.json 2> err.txt "
                  f"< /dev/null; echo rc=$?; stat -c %a out.json; cat out.json; rm -f out.json err.txt; "
                  f"nvidia-smi -L | wc -l; test -S {SOCK} && echo served")
    lines = res.out.splitlines()
    assert lines[0] == "rc=0" and lines[1] == "600" and '"version"' in lines[2], res
    assert lines[3] == "8" and lines[4] == "served"
    # the caller's environment: pvesh draws its table borders by the locale (box drawing only in a UTF-8 one)
    plain, utf8 = ssh.run("LC_ALL=C pvesh get /version"), ssh.run("LC_ALL=C.UTF-8 pvesh get /version")
    assert "+-" in plain.out and "+-" not in utf8.out and "\u2500" in utf8.out, (plain.out, utf8.out)
    assert ssh.run(f"LC_ALL=C {DIRECT['pvesh']} get /version").out == plain.out


#: The commands the server forked for this host (its children), by name: other hosts' and containers' processes
#: share the machine's pid space.
SERVER = "$(cat $DEPLOY_SIM_ROOT/hosts/$DEPLOY_SIM_HOST/sshd/view.pid)"
MINE = f"pgrep -P {SERVER} -x nvidia-smi"
LOOP = "nvidia-smi --query-gpu=index --format=csv -l 1 > /dev/null"


def test_the_command_runs_under_its_own_name(ssh: Any) -> None:
    res = ssh.run(f"{LOOP} & sleep 1; {MINE} > /dev/null && echo named; kill %1; wait")
    assert "named" in res.out, res


def test_a_signal_reaches_the_command_and_a_killed_caller_takes_it_along(ssh: Any) -> None:
    # SIGTERM to the caller reaches the looping nvidia-smi, which ends as the direct run does (quietly, 0)
    term = "& pid=$!; sleep 1; kill -TERM $pid; wait $pid; echo rc=$?"
    direct = ssh.run(f"{DIRECT['nvidia-smi']} --query-gpu=index --format=csv -l 1 > /dev/null {term}")
    res = ssh.run(f"{LOOP} {term}; sleep 0.5; {MINE} || echo gone")
    assert direct.out == "rc=0\n" and res.out == "rc=0\ngone\n", (res, direct)
    # the command killed by a signal: the caller ends by the same signal (the shell reads 128 + 9)
    res = ssh.run(f"{LOOP} & pid=$!; sleep 1; pkill -KILL -P {SERVER} -x nvidia-smi; wait $pid; echo rc=$?")
    assert res.out == "rc=137\n", res
    # SIGKILL to the caller: the command cannot outlive it
    res = ssh.run(f"{LOOP} & pid=$!; sleep 1; {MINE} > /dev/null && echo running; "
                  f"kill -KILL $pid; wait $pid; sleep 0.5; {MINE} || echo gone")
    assert "running" in res.out and "gone" in res.out, res


def test_without_the_server_the_tools_run_directly(ssh: Any) -> None:
    served = ssh.run("pct list; pvesh get /version --output-format json")
    moved = ssh.run(f"mv {SOCK} {SOCK}.away && pct list; pvesh get /version --output-format json; "
                    f"rc=$?; mv {SOCK}.away {SOCK}; exit $rc")
    assert moved.rc == 0 and moved.out == served.out and moved.err == served.err


def test_changed_code_is_never_served_stale(ssh: Any, sim: Any) -> None:
    """An edited stand-in module is used at once: the server lets that call run directly and restarts itself
    (same holder, same view) on the new code."""
    view = ssh.run(f"echo {SERVER}").out.strip()
    src = "$DEPLOY_SIM_REPO/simulator/pve/cli.py"
    saved = ssh.run(f"stat -c %y {src}").out.strip()
    try:
        ssh.run(f"touch {src}")  # a newer mtime, the content unchanged: the loaded module is out of date
        assert ssh.run("pct list").rc == 0  # answered directly while the server re-executes itself
        until(lambda: ssh.run(f"test -S {SOCK}").rc == 0, timeout_s=20)
        res = ssh.run(f"echo {SERVER}; pvesh get /version --output-format json > /dev/null && test -S {SOCK} && "
                      "echo served")
        assert res.out.split() == [view, "served"], res
    finally:  # the old mtime back (the server restarts once more on the next call; nothing waits for it)
        ssh.run(f"touch -d '{saved}' {src}")
