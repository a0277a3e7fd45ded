"""A real PostgreSQL server for the team store's tests (issue 51): Debian's server binaries, started on loopback on
a free port in a temporary directory, torn down at the end. Never a mock of the database.

PostgreSQL refuses to run as root: as root (the CI, the developers' machines) the server runs as the `postgres`
system user the package creates, in a directory it owns. Password authentication (scram-sha-256) is on, so the
tests go through the tool's password file, as a team's setup does.

The server's TCP keepalive and user-timeout settings are the ones docs/team.md recommends (SERVER_SETTINGS): a
client killed on the same machine is seen at once anyway (the kernel closes its socket); a client whose machine
vanished is seen through them (tests/e2e/test_team_store_vanish.py measures it).
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.store.pg_conn import Lost, PgConn, conn_params, parse_url

SERVER_SETTINGS = {"listen_addresses": "127.0.0.1", "fsync": "off", "synchronous_commit": "off",
                   "full_page_writes": "off", "tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5",
                   "tcp_keepalives_count": "2", "tcp_user_timeout": "20000",
                   "client_connection_check_interval": "5000", "max_connections": "50", "shared_buffers": "16MB"}


def server_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(found[-1]).parent if found else None


@dataclass
class PgServer:
    bindir: Path
    root: Path
    port: int
    password: str
    proc: subprocess.Popen[bytes] | None = None
    #: Clients from elsewhere than loopback: (the server's own address there, the clients' network in CIDR).
    also_on: tuple[str, str] | None = None

    @property
    def data(self) -> Path:
        return self.root / "data"

    def _as_owner(self) -> list[str]:
        return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def start(self) -> None:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        if not self.data.exists():
            pwfile = self.root / "pw"
            pwfile.write_text(self.password + "\n")
            self._own(pwfile)
            subprocess.run([*self._as_owner(), str(self.bindir / "initdb"), "-D", str(self.data), "-U", "deploy",
                            f"--pwfile={pwfile}", "--auth=scram-sha-256", "-E", "UTF8", "--no-sync",
                            "--no-instructions"],
                           check=True, capture_output=True, env=env)
            pwfile.unlink()
            if self.also_on is not None:
                with open(self.data / "pg_hba.conf", "a") as hba:
                    hba.write(f"host all all {self.also_on[1]} scram-sha-256\n")
        listen = SERVER_SETTINGS["listen_addresses"] + (f",{self.also_on[0]}" if self.also_on else "")
        settings = [a for k, v in {**SERVER_SETTINGS, "listen_addresses": listen, "port": str(self.port),
                                   "unix_socket_directories": str(self.root)}.items() for a in ("-c", f"{k}={v}")]
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - the server's whole life
        self.proc = subprocess.Popen([*self._as_owner(), str(self.bindir / "postgres"), "-D", str(self.data),
                                      *settings], stdout=log, stderr=log, env=env, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:  # listening is not enough: after a crash the server recovers before it accepts logins
                self.connect(connect_timeout=2).close()
                return
            except Lost:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {(self.root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError("postgres did not listen within 30 s")

    def stop(self) -> None:
        """Immediate shutdown (what a crashed or unplugged server looks like to its clients)."""
        if self.proc is None:
            return
        subprocess.run([*self._as_owner(), str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                        "-w", "stop"], capture_output=True)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def _own(self, path: Path) -> None:
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(path, pw.pw_uid, pw.pw_gid)

    def connect(self, dbname: str = "postgres", connect_timeout: int = 5) -> PgConn:
        """An autocommit connection as the tool's own (state/pg_conn.py), for a test to look at the store."""
        return connect_url(f"{self.url(dbname)}&connect_timeout={connect_timeout}", self.password)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://deploy@127.0.0.1:{self.port}/{dbname}?sslmode=disable"

    def create_database(self) -> str:
        name = f"t_{secrets.token_hex(4)}"
        with self.connect() as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return name


def connect_url(url: str, password: str) -> PgConn:
    return PgConn.connect(conn_params(parse_url(url), password))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    bindir = server_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (scripts/install.sh installs Debian's postgresql)")
    root = Path(tempfile.mkdtemp(prefix="deploy-pg-"))
    os.chmod(root, 0o700)
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
    server = PgServer(bindir, root, free_port(), secrets.token_urlsafe(16))
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class TeamStore:
    """A fresh database of the test server, and a 0600 password file for it: what DEPLOY_STATE_URL names."""

    server: PgServer
    url: str
    password_file: Path

    def env(self) -> dict[str, str]:
        return {"DEPLOY_STATE_URL": self.url, "DEPLOY_STATE_PASSWORD_FILE": str(self.password_file)}


@pytest.fixture
def team_store(pg_server: PgServer, tmp_path: Path) -> TeamStore:
    pw = tmp_path / "store.pw"
    fd = os.open(pw, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(pg_server.password + "\n")
    return TeamStore(pg_server, pg_server.url(pg_server.create_database()), pw)
