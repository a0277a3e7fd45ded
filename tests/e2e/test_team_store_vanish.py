"""A holder whose machine vanishes (issue 51): its claims in the team store are freed within the detection time
that docs/team.md states, by the server's TCP keepalive and user-timeout settings (tests/pg_server.py sets the ones
docs/team.md recommends), and the holder itself notices it lost them (the client's settings, state/pg.py) before
another machine can take them.

A vanished machine sends nothing: no FIN, no RST, its packets and the server's are lost. The holder runs in a
network namespace this test makes (a veth pair to this machine, on a link-local /30 no other test uses); once it
holds its claims, every packet in and out of that namespace is dropped (nftables, inside the namespace only). The
server is a real PostgreSQL on this machine, listening on loopback and the veth; a second client on loopback tries
the claim every 0.1 s. Runs about 25 s.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.store import pg, pg_conn
from orchestrator.store.pg_conn import PgConn
from tests.pg_server import SERVER_SETTINGS, PgServer, free_port, server_bin

#: The settings the detection time follows from (tests/pg_server.py, docs/team.md): idle + count × interval.
SERVER_DETECT_S = (int(SERVER_SETTINGS["tcp_keepalives_idle"])
                   + int(SERVER_SETTINGS["tcp_keepalives_count"]) * int(SERVER_SETTINGS["tcp_keepalives_interval"]))
#: The client's: tcp_user_timeout (ms) bounds a heartbeat that is never answered.
CLIENT_DETECT_S = int(pg_conn.CLIENT_DEFAULTS["tcp_user_timeout"]) / 1000
SLACK_S = 3.0  # the holder's last heartbeat (HEARTBEAT_S) before the cut, the kernel's timer granularity, a poll

HOLD = """
import sys, time
from orchestrator.locks.claims import claim_fleet
from orchestrator.store import store
with claim_fleet(["gpu-1"], "deploy roll group g --set x=1", router=True):
    print("held", flush=True)
    backend = store.current().claims
    while backend.lost() is None:
        time.sleep(0.05)
    print("lost", time.monotonic(), backend.lost(), flush=True)
"""


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def vanishing_namespace() -> Iterator[tuple[str, str, str]]:
    """(namespace, this machine's address on the link, the link's network): removed on exit, its veth with it."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nft"):
        pytest.skip("needs root, ip and nft to make a network namespace (scripts/install.sh; the e2e suite runs "
                    "as root)")
    tag = f"{os.getpid() % 100000}"
    ns, host_if, ns_if = f"dt-vanish-{tag}", f"dtv{tag}h", f"dtv{tag}c"
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    third = next(x for x in [*range(os.getpid() % 150 + 100, 250), *range(100, 250)]
                 if f" 169.254.{x}." not in used)
    here, there, net = f"169.254.{third}.1", f"169.254.{third}.2", f"169.254.{third}.0/30"
    _run("ip", "netns", "add", ns)
    try:
        _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if, "netns", ns)
        _run("ip", "addr", "add", f"{here}/30", "dev", host_if)
        _run("ip", "link", "set", host_if, "up")
        _run("ip", "-n", ns, "addr", "add", f"{there}/30", "dev", ns_if)
        _run("ip", "-n", ns, "link", "set", ns_if, "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        yield ns, here, net
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def cut(ns: str) -> None:
    """The machine vanishes: every packet in or out of the namespace is dropped (no reset, no FIN)."""
    rules = ("table inet vanish {\n"
             "  chain in { type filter hook input priority -300; policy drop; }\n"
             "  chain out { type filter hook output priority -300; policy drop; }\n"
             "}\n")
    subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules, text=True, check=True,
                   capture_output=True, timeout=30)


@pytest.fixture
def server_on_link() -> Iterator[tuple[PgServer, str]]:
    bindir = server_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (scripts/install.sh installs Debian's postgresql)")
    with vanishing_namespace() as (ns, here, net):
        root = Path(tempfile.mkdtemp(prefix="deploy-pg-"))
        os.chmod(root, 0o700)
        if os.geteuid() == 0:
            import pwd

            pw = pwd.getpwnam("postgres")
            os.chown(root, pw.pw_uid, pw.pw_gid)
        server = PgServer(bindir, root, free_port(), secrets.token_urlsafe(16), also_on=(here, net))
        try:
            server.start()
            yield server, ns
        finally:
            server.stop()
            shutil.rmtree(root, ignore_errors=True)


def _free(conn: PgConn, key: int) -> bool:
    """The claim can be taken now (taken and given back at once)."""
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    if row and row[0]:
        conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        return True
    return False


def test_a_vanished_holders_claims_are_free_within_the_keepalive_detection_time(server_on_link: tuple[PgServer, str],
                                                                                tmp_path: Path) -> None:
    server, ns = server_on_link
    db = server.create_database()
    here = server.also_on[0] if server.also_on else ""
    pw = tmp_path / "store.pw"
    fd = os.open(pw, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(server.password + "\n")
    env = {**os.environ, "DEPLOY_STATE_DIR": str(tmp_path / "b"), "DEPLOY_STATE_PASSWORD_FILE": str(pw),
           "DEPLOY_STATE_URL": f"postgresql://deploy@{here}:{server.port}/{db}?sslmode=disable"}
    holder = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", HOLD], stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().split() == ["held"]
        key = pg.claim_key("gpu-1")
        with server.connect(db) as conn:
            assert not _free(conn, key), "the holder in the namespace does not hold its claim"
            time.sleep(2 * pg.HEARTBEAT_S)  # a heartbeat or two went through the link before it is cut
            cut(ns)
            cut_at = time.monotonic()
            free_after = None
            while time.monotonic() - cut_at < SERVER_DETECT_S + SLACK_S + 10:
                if _free(conn, key):
                    free_after = time.monotonic() - cut_at
                    break
                time.sleep(0.1)
        try:
            rest = holder.communicate(timeout=max(1.0, cut_at + CLIENT_DETECT_S + SLACK_S + 10 - time.monotonic()))[0]
        except subprocess.TimeoutExpired:
            rest = ""
        lost = (rest.splitlines() or [""])[0].split(maxsplit=2)
        lost_after = float(lost[1]) - cut_at if lost[:1] == ["lost"] else None
        print(f"vanished holder: claims free {free_after} s after the cut (server: tcp_keepalives_idle "
              f"{SERVER_SETTINGS['tcp_keepalives_idle']} s, interval {SERVER_SETTINGS['tcp_keepalives_interval']} s, "
              f"count {SERVER_SETTINGS['tcp_keepalives_count']}, tcp_user_timeout "
              f"{SERVER_SETTINGS['tcp_user_timeout']} ms); the holder saw its claims lost {lost_after} s after it "
              f"(client tcp_user_timeout {pg_conn.CLIENT_DEFAULTS['tcp_user_timeout']} ms): {' '.join(lost[2:])}")
        assert free_after is not None, f"the vanished holder's claims were not free {SERVER_DETECT_S + SLACK_S} s " \
                                       "after the cut"
        assert free_after <= SERVER_DETECT_S + SLACK_S
        assert lost_after is not None and lost_after <= CLIENT_DETECT_S + SLACK_S
        assert lost_after < free_after, "the vanished holder still believed it held claims another machine could take"
    finally:
        holder.kill()
        holder.wait(timeout=30)
