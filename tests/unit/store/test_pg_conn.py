"""The team store's connection settings (orchestrator/store/pg_conn.py): what the URL may set, what is refused
before anything is sent, the password's sources, and the socket options on a real loopback socket."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.store import pg_conn
from orchestrator.store.pg import connect_params
from orchestrator.store.store import StoreSettings


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Both ends of a loopback TCP connection (TLS is never tried over a Unix socket, as libpq)."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        a = socket.create_connection(srv.getsockname())
        b, _ = srv.accept()
        return a, b


def _params(url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pg_conn.ConnParams:
    for k in ("PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGSSLMODE", "PGPASSWORD", "PGPASSFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return connect_params(StoreSettings(url))


def test_the_url_and_the_client_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    p = _params("postgresql://deploy@db.example:6432/team?sslmode=verify-full&sslrootcert=/etc/ssl/db%20ca.pem"
                "&keepalives_idle=30", monkeypatch, tmp_path)
    assert (p.host, p.port, p.user, p.dbname, p.password) == ("db.example", 6432, "deploy", "team", None)
    assert p.settings["sslrootcert"] == "/etc/ssl/db ca.pem" and p.settings["sslmode"] == "verify-full"
    assert p.settings["keepalives_idle"] == "30" and p.settings["tcp_user_timeout"] == "15000"
    assert p.settings["options"] == "-c search_path=deploy"


@pytest.mark.parametrize(("url", "says"), [
    ("postgresql://deploy@db/x?sslmode=allow", "sslmode=allow"),
    ("postgresql://deploy@db/x?sslcrl=/c.pem", "sslcrl"),
    ("postgresql://deploy@db/x?sslpassword=s3cret", "sslpassword"),
    ("postgresql://deploy@db/x?keepalives_idle=ten", "keepalives_idle=ten"),
    ("postgresql://deploy:s3cret@db/x", "carries a password"),
    ("host=db user=deploy", "not a PostgreSQL URL"),
    ("postgresql://deploy@db1,db2/x", "not a PostgreSQL URL"),
])
def test_a_setting_it_cannot_honour_is_refused(url: str, says: str, monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _params(url, monkeypatch, tmp_path)
    assert says in str(err.value)
    assert "s3cret" not in str(err.value)


def test_verify_full_without_the_ca_file_is_refused_before_the_login() -> None:
    p = pg_conn.ConnParams("127.0.0.1", 1, "u", "d", None, {**pg_conn.CLIENT_DEFAULTS, "sslmode": "verify-full",
                                                            "sslrootcert": "/nonexistent/ca.pem"})
    a, b = _tcp_pair()
    with a, b:
        with pytest.raises(ConfigError, match="does not exist"):
            pg_conn._tls(a, p)
        b.setblocking(False)
        with pytest.raises(BlockingIOError):  # nothing was sent
            b.recv(8)


def test_the_pgpass_line_that_matches_and_only_a_private_file(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    pgpass = tmp_path / "pgpass"
    pgpass.write_text("other:*:*:*:no\n# a comment\ndb:5432:*:deploy:pa\\:ss\n")
    os.chmod(pgpass, 0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    for k in ("PGPASSWORD", "PGHOST", "PGPORT", "PGUSER", "PGDATABASE"):
        monkeypatch.delenv(k, raising=False)
    assert pg_conn.conn_params(pg_conn.parse_url("postgresql://deploy@db/x"), None).password == "pa:ss"
    os.chmod(pgpass, 0o644)
    assert pg_conn.conn_params(pg_conn.parse_url("postgresql://deploy@db/x"), None).password is None


def test_the_socket_carries_keepalives_and_the_user_timeout() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        p = pg_conn.ConnParams("127.0.0.1", srv.getsockname()[1], "u", "d", None,
                               {**pg_conn.CLIENT_DEFAULTS, "sslmode": "disable", "keepalives_idle": "7"})
        with pg_conn._socket(p) as s:
            assert s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 7
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 5
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 2
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 15000
            assert s.gettimeout() == 5.0


def test_a_server_that_offers_no_tls_is_refused_under_require() -> None:
    p = pg_conn.ConnParams("127.0.0.1", 1, "u", "d", None, {**pg_conn.CLIENT_DEFAULTS, "sslmode": "require"})
    a, b = _tcp_pair()
    with a, b:
        b.sendall(b"N")
        with pytest.raises(pg_conn.Lost, match="does not offer TLS"):
            pg_conn._tls(a, p)
        assert b.recv(8) == pg_conn._SSL_REQUEST


def test_tls_against_a_real_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """TLS as sslmode says against a real PostgreSQL with a self-signed certificate: require and verify-full with
    its CA connect over TLS; verify-full against the system's CAs is refused."""
    import pwd
    import secrets
    import shutil
    import subprocess
    import tempfile

    from tests import pg_server

    bindir = pg_server.server_bin()
    if bindir is None or shutil.which("openssl") is None:
        pytest.skip("no PostgreSQL server binaries or openssl (scripts/install.sh installs both)")
    root = Path(tempfile.mkdtemp(prefix="deploy-pg-tls-"))  # the server's user must reach it (tmp_path: root's)
    certs = root / "certs"
    certs.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(certs / "k.pem"),
                    "-out", str(certs / "c.pem")], check=True, capture_output=True)
    os.chmod(certs / "k.pem", 0o600)
    data = root / "pg"
    data.mkdir(mode=0o700)
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        for path in (root, certs, certs / "k.pem", certs / "c.pem", data):
            os.chown(path, pw.pw_uid, pw.pw_gid)
    monkeypatch.setitem(pg_server.SERVER_SETTINGS, "ssl", "on")
    monkeypatch.setitem(pg_server.SERVER_SETTINGS, "ssl_cert_file", str(certs / "c.pem"))
    monkeypatch.setitem(pg_server.SERVER_SETTINGS, "ssl_key_file", str(certs / "k.pem"))
    server = pg_server.PgServer(bindir, data, pg_server.free_port(), secrets.token_urlsafe(12))
    server.start()
    try:
        base = f"postgresql://deploy@{{}}:{server.port}/postgres?sslmode="
        ca = f"&sslrootcert={certs / 'c.pem'}"
        for url in (base.format("127.0.0.1") + "require", base.format("localhost") + "verify-full" + ca,
                    base.format("127.0.0.1") + "verify-full" + ca):
            with pg_conn.PgConn.connect(pg_conn.conn_params(pg_conn.parse_url(url), server.password)) as conn:
                row = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
                assert row == (True,), url
        with pytest.raises(pg_conn.Lost, match="CERTIFICATE_VERIFY_FAILED"):
            pg_conn.PgConn.connect(pg_conn.conn_params(pg_conn.parse_url(
                base.format("127.0.0.1") + "verify-full&sslrootcert=system"), server.password))
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
