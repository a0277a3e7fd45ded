"""The team store's connection (state/pg.py) over pg8000: URL, TLS, TCP settings, password, errors, statements.

pg8000 (pure Python) and not psycopg 3: its import costs a command about a third of psycopg's (docs/team.md,
tests/perf/state_store_cost.py), and the store needs only a handful of statements. pg8000 does not read a libpq
URL, so this module does, for the settings the store documents (docs/team.md); any other setting in the URL is
refused before anything is sent. The socket is made here (pg8000 takes a connected `sock`): TCP keepalives and
TCP_USER_TIMEOUT set on it, TLS negotiated as libpq's sslmode says.
"""

from __future__ import annotations

import getpass
import os
import socket
import stat
import struct
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pg8000.native

from orchestrator.errors import ConfigError, RemoteError
from orchestrator.store.base import StoreSettings

#: Client-side settings for a dead server (libpq's names); a URL that sets one keeps its own.
CLIENT_DEFAULTS: dict[str, str] = {"connect_timeout": "5", "keepalives": "1", "keepalives_idle": "10",
                                   "keepalives_interval": "5", "keepalives_count": "2", "tcp_user_timeout": "15000",
                                   "application_name": "deploy"}
#: The URL query settings honoured (libpq's names); any other is refused.
URL_SETTINGS = frozenset({*CLIENT_DEFAULTS, "sslmode", "sslrootcert", "sslcert", "sslkey", "options", "host", "port",
                          "user", "dbname"})
SSLMODES = ("disable", "prefer", "require", "verify-ca", "verify-full")
_SSL_REQUEST = struct.pack("!ii", 8, 80877103)


class DbError(Exception):
    """A statement the server refused; `code` is its SQLSTATE."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class Lost(DbError):
    """The connection is gone (network, server shut down, or it could not be made)."""


class UniqueViolation(DbError):
    pass


class UndefinedTable(DbError):
    pass


def _mapped(exc: Exception) -> DbError:
    """pg8000's errors as the store's: a server error by its SQLSTATE, anything else a lost connection."""
    info = exc.args[0] if exc.args else None
    if isinstance(exc, pg8000.native.DatabaseError) and isinstance(info, dict):
        code, msg = str(info.get("C", "")), str(info.get("M", ""))
        cls: type[DbError] = {"23505": UniqueViolation, "42P01": UndefinedTable}.get(code, DbError)
        if code[:2] in ("08", "57"):  # connection exception, operator intervention (server shut down)
            cls = Lost
        return cls(msg or code, code)
    why = str(info) if info is not None else type(exc).__name__
    cause = exc.__cause__
    return Lost(f"{why}: {cause}" if cause is not None and str(cause) else why)


# -- the URL ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Url:
    """A postgresql:// URL's parts (libpq's URL form; no key=value form)."""

    host: str | None
    port: int | None
    user: str | None
    dbname: str | None
    password: str | None
    query: dict[str, str] = field(default_factory=dict)


def parse_url(url: str) -> Url:
    """The URL's parts; ValueError for what is not a postgresql:// URL with one host."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError("not a postgresql:// URL")
    if "," in parts.netloc:
        raise ValueError("several hosts are not supported")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    host = unquote(parts.hostname) if parts.hostname else query.get("host") or None
    port = parts.port if parts.port is not None else (int(query["port"]) if query.get("port") else None)
    user = unquote(parts.username) if parts.username else query.get("user") or None
    dbname = unquote(parts.path.lstrip("/")) or query.get("dbname") or None
    password = unquote(parts.password) if parts.password else query.get("password") or None
    return Url(host, port, user, dbname, password, query)


def _pgpass(path: Path, host: str, port: int, dbname: str, user: str) -> str | None:
    """libpq's password file (PGPASSFILE, ~/.pgpass): the first matching line; ignored unless 0600 (as libpq)."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            return None
        lines = path.read_text().splitlines()
    except OSError:
        return None
    want = (host, str(port), dbname, user)
    for line in lines:
        if not line.strip() or line.startswith("#"):
            continue
        fields: list[str] = []
        cur, esc = "", False
        for c in line:
            if esc:
                cur, esc = cur + c, False
            elif c == "\\":
                esc = True
            elif c == ":" and len(fields) < 4:
                fields.append(cur)
                cur = ""
            else:
                cur += c
        fields.append(cur)
        if len(fields) == 5 and all(f in ("*", w) for f, w in zip(fields[:4], want, strict=True)):
            return fields[4]
    return None


@dataclass(frozen=True)
class ConnParams:
    """What a connection is made from: the URL's settings over this tool's defaults, and the password."""

    host: str
    port: int
    user: str
    dbname: str
    password: str | None
    settings: dict[str, str]


def conn_params(url: Url, password: str | None) -> ConnParams:
    """The URL's settings, libpq's environment defaults (PGHOST, PGPORT, PGUSER, PGDATABASE, PGSSLMODE,
    PGPASSWORD, PGPASSFILE) and this tool's client defaults; ConfigError for a setting it cannot honour."""
    unknown = sorted(set(url.query) - URL_SETTINGS - {"password"})
    if unknown:
        raise ConfigError(f"the state store URL sets {', '.join(unknown)}, which this tool does not support",
                          fix=f"remove it; supported: {', '.join(sorted(URL_SETTINGS))} (docs/team.md)")
    settings = {**CLIENT_DEFAULTS, **url.query}
    settings.setdefault("sslmode", os.environ.get("PGSSLMODE", "prefer"))
    if settings["sslmode"] not in SSLMODES:
        raise ConfigError(f"the state store URL's sslmode={settings['sslmode']} is not supported",
                          fix=f"use one of {', '.join(SSLMODES)} (verify-full for a store across a network)")
    for key in ("connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
                "tcp_user_timeout"):
        if not settings[key].isdigit():
            raise ConfigError(f"the state store URL's {key}={settings[key]} is not a whole number",
                              fix="give it in seconds (tcp_user_timeout in milliseconds)")
    host = url.host or os.environ.get("PGHOST") or "localhost"
    port = url.port or int(os.environ.get("PGPORT") or 5432)
    user = url.user or os.environ.get("PGUSER") or getpass.getuser()
    dbname = url.dbname or os.environ.get("PGDATABASE") or user
    if password is None:
        password = os.environ.get("PGPASSWORD") or _pgpass(
            Path(os.environ.get("PGPASSFILE") or Path.home() / ".pgpass"), host, port, dbname, user)
    return ConnParams(host, port, user, dbname, password, settings)


# -- the socket ---------------------------------------------------------------------------------------------
def _socket(p: ConnParams) -> socket.socket:
    timeout = float(p.settings["connect_timeout"]) or None
    if p.host.startswith("/"):  # a Unix socket directory, as libpq
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(f"{p.host}/.s.PGSQL.{p.port}")
        except OSError:
            sock.close()
            raise
        return sock
    sock = socket.create_connection((p.host, p.port), timeout)
    if p.settings["keepalives"] != "0":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for opt, key in ((socket.TCP_KEEPIDLE, "keepalives_idle"), (socket.TCP_KEEPINTVL, "keepalives_interval"),
                         (socket.TCP_KEEPCNT, "keepalives_count")):
            if int(p.settings[key]):
                sock.setsockopt(socket.IPPROTO_TCP, opt, int(p.settings[key]))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(p.settings["tcp_user_timeout"]))
    return sock


def _tls(sock: socket.socket, p: ConnParams) -> socket.socket:
    """TLS as libpq's sslmode says (prefer: TLS when the server offers it, unverified; require: TLS, verified
    against sslrootcert when that file exists; verify-ca: the chain; verify-full: the chain and the host name)."""
    mode = p.settings["sslmode"]
    if mode == "disable" or sock.family == socket.AF_UNIX:
        return sock
    import ssl

    home = Path.home() / ".postgresql"
    root = p.settings.get("sslrootcert") or str(home / "root.crt")
    verify = mode.startswith("verify") or (mode == "require" and (root == "system" or Path(root).exists()))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if verify:
        if root == "system":
            ctx.load_default_certs()
        elif not Path(root).exists():
            raise ConfigError(f"sslmode={mode} needs the server's CA certificate: {root} does not exist",
                              fix="name it with sslrootcert=PATH in the state store URL")
        else:
            ctx.load_verify_locations(root)
        ctx.check_hostname = mode == "verify-full"
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    cert = p.settings.get("sslcert") or str(home / "postgresql.crt")
    if "sslcert" in p.settings or Path(cert).exists():
        ctx.load_cert_chain(cert, p.settings.get("sslkey") or str(home / "postgresql.key"))
    sock.sendall(_SSL_REQUEST)
    if sock.recv(1) == b"S":
        return ctx.wrap_socket(sock, server_hostname=p.host)
    if mode != "prefer":
        raise Lost(f"the server does not offer TLS (sslmode={mode})")
    return sock


# -- the connection -----------------------------------------------------------------------------------------
@dataclass
class Result:
    rows: list[tuple[Any, ...]]
    rowcount: int
    names: tuple[str, ...]

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.rows)


class PgConn:
    """One autocommit connection, `%s` parameters, shared by the command and its heartbeat thread (one
    statement at a time: pg8000's connection is not thread-safe)."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._lock = threading.RLock()
        self._closed = False
        self.broken = False

    @classmethod
    def connect(cls, p: ConnParams) -> PgConn:
        """Connect and log in; Lost when the server cannot be reached or refuses the login, ConfigError for a
        TLS file that cannot be read."""
        try:
            sock = _socket(p)
        except OSError as exc:
            raise Lost(f"cannot connect to {p.host} port {p.port}: {exc.strerror or exc}") from None
        try:
            sock = _tls(sock, p)
            opts = p.settings.get("options")
            raw = pg8000.native.Connection(p.user, host=p.host, database=p.dbname, port=p.port, password=p.password,
                                           sock=sock, ssl_context=False, tcp_keepalive=False,
                                           application_name=p.settings["application_name"],
                                           startup_params={"options": opts} if opts else None)
            sock.settimeout(None)  # connect_timeout bounds the connection only, as libpq's
        except OSError as exc:
            sock.close()
            if exc.__class__.__name__.startswith("SSL") or isinstance(exc, FileNotFoundError | PermissionError):
                raise Lost(f"TLS: {exc}") from None
            raise Lost(str(exc) or type(exc).__name__) from None
        except pg8000.native.Error as exc:
            sock.close()
            raise _mapped(exc) from None
        except BaseException:
            sock.close()
            raise
        return cls(raw)

    def __enter__(self) -> PgConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed or self.broken

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Result:
        parts = sql.split("%s")
        if len(parts) - 1 != len(args):
            raise ValueError(f"{len(parts) - 1} placeholders, {len(args)} arguments")
        params = {f"p{i}": a for i, a in enumerate(args)}
        if args:
            sql = "".join(part + (f":p{i}" if i < len(args) else "") for i, part in enumerate(parts))
        with self._lock:
            if self.closed:
                raise Lost("the connection is closed")
            try:
                rows = self._raw.run(sql, **params)
                count, cols = self._raw.row_count, self._raw.columns
            except (pg8000.native.Error, OSError) as exc:  # pg8000 lets a socket error of its first read through
                err = _mapped(exc) if isinstance(exc, pg8000.native.Error) else Lost(str(exc) or type(exc).__name__)
                if isinstance(err, Lost):
                    self.broken = True
                raise err from None
        names = tuple(str(c["name"]) for c in cols or ())
        return Result([tuple(r) for r in rows or ()], -1 if count is None else int(count), names)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction; the heartbeat waits for it (it holds the connection's lock throughout)."""
        with self._lock:
            self.execute("START TRANSACTION")
            try:
                yield
            except BaseException:
                with suppress(DbError):
                    self.execute("ROLLBACK")
                raise
            self.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with suppress(pg8000.native.Error, OSError):
                self._raw.close()


def unavailable(settings: StoreSettings, exc: BaseException) -> RemoteError:
    why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return RemoteError(f"the team state store {safe_url(settings.url)} ({settings.origin}) cannot be reached: {why}",
                       fix="nothing was planned or changed. Check that the server is up and this machine reaches it, "
                           "the URL, and the password (state_password_file / DEPLOY_STATE_PASSWORD_FILE, or "
                           "PGPASSFILE); `deploy state status` tries it. Read-only commands (status, plan, doctor) "
                           "still work from the hosts", step="state store")


def safe_url(url: str) -> str:
    """The URL as it may be printed: user, host, port and database only."""
    try:
        d = parse_url(url)
    except ValueError:
        return "(an unreadable URL)"
    who = f"{d.user}@" if d.user else ""
    port = f":{d.port}" if d.port else ""
    return f"postgresql://{who}{d.host or ''}{port}/{d.dbname or ''}"
