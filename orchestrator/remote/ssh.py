"""The SSH adapter: the only module that talks to paramiko.

Strict host key checking is the default: an unknown or changed host key is refused with the fingerprint and the
fix. `tofu=True` (the user's explicit `--tofu`) accepts and records a first-seen key. Every remote command goes
through `run`, which counts one round trip; scripts travel on stdin to `bash -s`, so their content (including
any secret) never appears in a process argument list.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from orchestrator.errors import RemoteError
from orchestrator.inventory.models import Host
from orchestrator.remote.batch import CommandOutput, batch_failure, build_batch_script, split_batch_output
from orchestrator.remote.channel import ChannelTimeout, LatestLine, read_channel
from orchestrator.remote.paramiko_import import paramiko
from orchestrator.runlog import Metrics

# paramiko's transport thread logs a failed handshake at ERROR with its traceback ("Exception (client): Error
# reading SSH protocol banner") before the caller gets the same exception; with no handler configured, Python's
# last-resort handler printed those ~20 lines to stderr around deploy's own error. A NullHandler keeps them off
# the terminal (an application that configures logging still receives them); the error itself is raised here.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


@dataclass(frozen=True)
class RemoteResult:
    rc: int
    stdout: str
    stderr: str
    duration_s: float

    def said(self, limit: int) -> str:
        """What the command said, for an error message: its stderr, else its stdout, stripped, at most the last
        `limit` characters (where a failing program says why)."""
        return self.output.said(limit)

    @property
    def output(self) -> CommandOutput:
        """The result as a fact's parser reads it (a fact's command run again on its own)."""
        return CommandOutput(self.rc, self.stdout, self.stderr)

    @property
    def both(self) -> str:
        """Everything it printed, stdout then stderr: what a parser that looks in either stream reads (pip's hash
        errors, hf's download lines, `pct`'s "not running")."""
        return f"{self.stdout}\n{self.stderr}"

    @property
    def last_line(self) -> str:
        """The last line it printed ("" for none): a probe's one JSON result, `systemctl`'s final verdict."""
        lines = self.stdout.strip().splitlines()
        return lines[-1] if lines else ""


#: Reads the script from stdin, then runs it with stdin detached.
LOADER = """bash -c 's=$(cat); exec </dev/null; eval "$s"'"""


class CommandGuard(Protocol):
    """Rides along with every remote command (the host lock's lease check): `wrap` prefixes the command with a
    host-side check in the same round trip, `check` reads its verdict and may raise (lock held or lost)."""

    def wrap(self, command: str) -> str: ...

    def check(self, result: RemoteResult, sent_at: float) -> RemoteResult: ...

    def before_change(self) -> None:
        """Called before a change that does not travel over SSH (a PVE API call over HTTPS)."""


@dataclass
class KnownHosts:
    """An OpenSSH known_hosts file as deploy reads it: never rewritten, only appended to (TOFU)."""

    path: Path
    revoked: list[paramiko.PKey]  # `@revoked` keys: never accepted, whatever else the file says
    skipped: int  # `@cert-authority` lines (paramiko cannot check host certificates) and unreadable lines


def load_known_hosts(path: Path, into: paramiko.HostKeys) -> KnownHosts:
    """Add the usable entries of `path` to `into`. paramiko's own loader raises InvalidHostKey on a marker line
    (`@cert-authority`, `@revoked`), and its save rewrites the whole file, dropping comments and every line it
    could not parse; this reader skips what it cannot use and keeps `@revoked` keys to refuse them."""
    revoked: list[paramiko.PKey] = []
    entries: list[paramiko.hostkeys.HostKeyEntry] = []
    skipped = 0
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        marker = ""
        if line.startswith("@"):
            marker, _, line = line.replace("\t", " ").partition(" ")
            line = line.strip()
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line)
        except Exception:  # InvalidHostKey, an unknown key type, a malformed key blob
            entry = None
        if entry is None or entry.key is None or marker not in ("", "@revoked"):
            skipped += 1
        elif marker == "@revoked":
            revoked.append(entry.key)
        else:
            entries.append(entry)
    for entry in entries:
        if not any(entry.key.asbytes() == r.asbytes() for r in revoked):
            for name in entry.hostnames:
                into.add(name, entry.key.get_name(), entry.key)
    return KnownHosts(path, revoked, skipped)


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """A key not in known_hosts: refused (strict), or with `tofu` appended as one new line; a revoked key never."""

    def __init__(self, known: KnownHosts, *, tofu: bool) -> None:
        self.known = known
        self.tofu = tofu

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if any(key.asbytes() == r.asbytes() for r in self.known.revoked):
            raise paramiko.SSHException(f"revoked host key {key.get_name()} {key.fingerprint}")
        if not self.tofu:
            raise paramiko.SSHException(f"unknown host key {key.get_name()} {key.fingerprint}")
        path = self.known.path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        before = path.read_bytes() if path.exists() else b""
        with open(path, "a", encoding="utf-8", opener=lambda p, f: os.open(p, f, 0o600)) as fh:
            if before and not before.endswith(b"\n"):
                fh.write("\n")
            fh.write(paramiko.hostkeys.HostKeyEntry([hostname], key).to_line())
        client.get_host_keys().add(hostname, key.get_name(), key)


def open_tcp(address: str, port: int, timeout_s: float) -> socket.socket:
    """The TCP connection under the SSH session, with TCP_NODELAY.

    An SSH exchange is a few small packets each way (key exchange, auth, then per command: channel open, exec,
    EOF, close). With Nagle's algorithm on, a packet written while the previous one is still unacknowledged waits
    for the peer's delayed ACK, 40 ms on Linux: measured on a simulated host, ~45 ms per connect and ~40 ms per
    back-to-back command (tests/perf/ssh_session_cost.py). paramiko leaves Nagle on; OpenSSH's client turns it off.
    """
    sock = socket.create_connection((address, port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _is_active(client: paramiko.SSHClient) -> bool:
    transport = client.get_transport()
    return transport is not None and transport.is_active()


def unreachable(exc: OSError, address: str, port: int, timeout_s: float) -> tuple[str, str, str]:
    """(cause, reason, fix) of a TCP connect that failed.

    paramiko folds "refused" and "no route" into NoValidConnectionsError, whose own text is "[Errno None] Unable
    to connect"; the per-address errors it carries hold the real reason.
    """
    causes: list[OSError] = list(getattr(exc, "errors", {}).values()) or [exc]
    first = causes[0]
    code = first.errno
    if isinstance(first, socket.gaierror):
        return ("no-such-name", f"the name does not resolve ({first.strerror or first})",
                "check the host's address in the inventory, or this machine's DNS")
    if isinstance(first, TimeoutError) or code == errno.ETIMEDOUT:
        return ("timeout", f"no answer within {timeout_s:g} s (connection timed out)",
                f"the host is down, or a firewall drops packets to port {port}: check that it is up "
                f"(`ping {address}`) and that port {port} is open to this machine; raise ssh.connect_timeout_s "
                "for a slow link")
    if code == errno.ECONNREFUSED:
        return ("refused", f"connection refused: nothing listens on port {port} (or a firewall rejects it)",
                "start sshd on the host (`systemctl start ssh`), or set ssh.port in the inventory to the port "
                "sshd listens on")
    if code == errno.EHOSTUNREACH:
        return ("no-route", "no route to host: the host did not answer on its network",
                f"check that {address} is the right address and that the host is up and on a network this "
                "machine reaches (cabling, VLAN, routes)")
    if code == errno.ENETUNREACH:
        return ("network-unreachable", "network is unreachable from this machine",
                f"this machine has no route to {address}'s network: check its network configuration or VPN")
    reasons = {str(c.strerror or c) for c in causes}
    return ("os-error", "; ".join(sorted(reasons)), "check the address, the port and the network path to the host")


class SshHost:
    """One verified SSH connection to a PVE node, reused for the whole command run."""

    def __init__(self, host: Host, *, metrics: Metrics | None = None, tofu: bool = False) -> None:
        self.host = host
        self.metrics = metrics or Metrics()
        self.tofu = tofu
        self._conn: paramiko.SSHClient | None = None
        #: Set by the host lock: every command then proves in its own round trip that the run holds the lock,
        #: which is what makes a reconnect safe (a new connection has no lock of its own to lose).
        self.guard: CommandGuard | None = None
        #: Counts connections opened; a change means the previous one dropped and we reconnected.
        self.generation = 0
        self._connect_lock = threading.Lock()

    # -- connection ---------------------------------------------------------------------------------------
    def _known_hosts(self) -> Path:
        path = self.host.ssh.known_hosts or Path("~/.ssh/known_hosts")
        return path.expanduser()

    def connect(self) -> paramiko.SSHClient:
        with self._connect_lock:  # the lock's keep-alive thread may reconnect at the same time as the run
            return self._connect()

    def _connect(self) -> paramiko.SSHClient:
        if self._conn is not None and _is_active(self._conn):
            return self._conn
        self.host.require_configured()
        ssh = self.host.ssh
        connect_kwargs: dict[str, object] = {"look_for_keys": ssh.key_file is None, "allow_agent": True,
                                             "banner_timeout": ssh.connect_timeout_s,
                                             "auth_timeout": ssh.connect_timeout_s}
        if ssh.key_file is not None:
            connect_kwargs["key_filename"] = str(ssh.key_file.expanduser())
        client = paramiko.SSHClient()
        known = self._known_hosts()
        hosts = load_known_hosts(known, client.get_host_keys())
        client.set_missing_host_key_policy(_HostKeyPolicy(hosts, tofu=self.tofu))
        try:
            self._open(client, connect_kwargs)
        except paramiko.BadHostKeyException as exc:
            raise RemoteError(
                f"host key of {self.host.address}:{ssh.port} CHANGED: got {exc.key.get_name()} "
                f"{exc.key.fingerprint}, {known} has {exc.expected_key.fingerprint}",
                fix=f"if the host was reinstalled, verify the new key out of band, then remove the old line: "
                    f"ssh-keygen -f {known} -R '[{self.host.address}]:{ssh.port}'",
                host=self.host.name, step="connect") from exc
        except paramiko.AuthenticationException as exc:
            raise RemoteError(
                f"SSH to {ssh.user}@{self.host.address}:{ssh.port} was refused: authentication failed ({exc})",
                fix=f"check ssh.user and ssh.key_file in the inventory: the key's public half must be in "
                    f"{ssh.user}'s ~/.ssh/authorized_keys on the host (try `ssh -p {ssh.port} "
                    f"{ssh.user}@{self.host.address}` by hand)",
                host=self.host.name, step="connect", details={"cause": "authentication"}) from exc
        except paramiko.SSHException as exc:
            msg = str(exc)
            if "protocol banner" in msg or "No existing session" in msg:  # the handshake never completed
                raise RemoteError(
                    f"{self.host.address}:{ssh.port} accepted the connection but completed no SSH handshake within "
                    f"{ssh.connect_timeout_s:g} s ({msg})",
                    fix=f"check that port {ssh.port} is sshd's and not another service's, and that the host is "
                        "not overloaded; raise ssh.connect_timeout_s for a slow link",
                    host=self.host.name, step="connect", details={"cause": "no-banner"}) from exc
            if "revoked host key" in msg:
                raise RemoteError(
                    f"host key of {self.host.address}:{ssh.port} is marked @revoked in {known} ({msg}); refused",
                    fix="the key was revoked on purpose: verify the host out of band; never --tofu past it",
                    host=self.host.name, step="connect", details={"cause": "revoked-host-key"}) from exc
            if "unknown host key" in msg:
                skipped = (f"; {hosts.skipped} line(s) of it skipped: @cert-authority (host certificates are not "
                           "supported) or unreadable" if hosts.skipped else "")
                raise RemoteError(
                    f"{self.host.address}:{ssh.port} is not in {known} ({msg}{skipped}); strict host key checking "
                    "refused it",
                    fix=f"verify the fingerprint out of band and add it to {known} "
                        f"(ssh-keyscan -p {ssh.port} {self.host.address}), or pass --tofu to trust it on first use",
                    host=self.host.name, step="connect") from exc
            raise RemoteError(f"SSH to {ssh.user}@{self.host.address}:{ssh.port} failed: {msg}",
                              fix="check the key file, user and that sshd runs on the host",
                              host=self.host.name, step="connect") from exc
        except OSError as exc:  # TimeoutError, socket.gaierror and paramiko's NoValidConnectionsError too
            cause, reason, fix = unreachable(exc, self.host.address, ssh.port, ssh.connect_timeout_s)
            raise RemoteError(f"cannot reach {self.host.address}:{ssh.port}: {reason}", fix=fix,
                              host=self.host.name, step="connect", details={"cause": cause}) from exc
        self.metrics.ssh_connects += 1
        self.generation += 1
        self._conn = client
        return client

    def _open(self, client: paramiko.SSHClient, connect_kwargs: dict[str, object]) -> None:
        """Handshake over our own TCP_NODELAY socket (open_tcp); a failed handshake closes it. paramiko's client
        itself, not a wrapper that would read ssh_config and config files first (fabric did, for nothing)."""
        ssh = self.host.ssh
        sock = open_tcp(self.host.address, ssh.port, ssh.connect_timeout_s)
        try:
            client.connect(self.host.address, port=ssh.port, username=ssh.user, timeout=ssh.connect_timeout_s,
                           sock=sock, **connect_kwargs)
        except BaseException:
            client.close()
            sock.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> SshHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- commands -----------------------------------------------------------------------------------------
    def run(self, command: str, *, stdin: str | None = None, timeout: float | None = None,
            check: bool = True, what: str = "", progress: Callable[[str], None] | None = None,
            progress_every_s: float = 2.0, each_line: Callable[[str], None] | None = None) -> RemoteResult:
        """One round trip on its own channel. `command` must already be quoted; prefer `script`.

        The channel is read by remote/channel.py; here is what the result means: the run guard wraps the
        command and checks its answer, a timeout, a dropped connection and a failed exit code (with `check`)
        become RemoteErrors that say what ran.
        """
        client = self.connect()
        self.metrics.round_trip()
        start = time.monotonic()
        label = what or "remote command"
        guard = self.guard
        if guard is not None:
            command = guard.wrap(command)
        transport = client.get_transport()
        try:
            if transport is None or not transport.is_active():
                raise paramiko.SSHException("transport is not active")
            chan = transport.open_session(timeout=self.host.ssh.connect_timeout_s)
            chan.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self._conn = None
            raise self._dropped(label, exc) from exc
        try:
            got = read_channel(chan, transport, stdin=stdin.encode() if stdin is not None else None,
                               deadline=None if timeout is None else start + timeout,
                               on_output=LatestLine(progress, progress_every_s, each_line=each_line))
        except ChannelTimeout:
            raise RemoteError(f"{label} timed out after {timeout:.0f} s",
                              fix="the host or container is slow or hung; check it and re-run",
                              host=self.host.name) from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self._conn = None
            raise self._dropped(label, exc) from exc
        result = RemoteResult(got.rc, got.stdout.decode(errors="replace"), got.stderr.decode(errors="replace"),
                              time.monotonic() - start)
        if result.rc == -1:
            self._conn = None
            raise self._dropped(label, None)
        if guard is not None:
            result = guard.check(result, start)
        if check and result.rc != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
            raise RemoteError(f"{label} failed with exit code {result.rc}: " + " | ".join(tail),
                              fix="see the message above", host=self.host.name,
                              details={"stdout": result.stdout[-2000:], "stderr": result.stderr[-2000:]})
        return result

    def _dropped(self, what: str, exc: BaseException | None) -> RemoteError:
        detail = f": {exc}" if exc is not None and str(exc) else ""
        return RemoteError(f"SSH connection to {self.host.address} dropped during {what}{detail}",
                           fix="re-run the command; every step is idempotent and resumes where it stopped",
                           host=self.host.name)

    def script(self, body: str, *, timeout: float | None = None, check: bool = True,
               what: str = "") -> RemoteResult:
        """Run a bash script in one round trip; the body travels on stdin, never in argv or on disk.

        The whole body is read first and then evaluated with stdin on /dev/null, so no command inside it (a
        command run in the container forwards its stdin there) can swallow the rest of the script.
        """
        return self.run(LOADER, stdin=body, timeout=timeout, check=check, what=what)

    def batch(self, commands: Mapping[str, str], *, timeout: float | None = None,
              what: str = "fact gathering") -> dict[str, CommandOutput]:
        """Many read-only commands in ONE round trip; each gets its own rc/stdout/stderr."""
        if not commands:
            return {}
        nonce = secrets.token_hex(8)
        res = self.script(build_batch_script(commands, nonce), timeout=timeout, check=False, what=what)
        failure = batch_failure(res.rc, res.stderr)
        if failure is not None:
            raise RemoteError(f"{what}: the node could not run the batch: {failure}",
                              fix="free space in the node's /tmp (`df -h /tmp`), then run again",
                              host=self.host.name)
        try:
            return split_batch_output(res.stdout, nonce)
        except ValueError as exc:
            raise RemoteError(f"{what}: output was cut short ({exc}); the connection may have dropped",
                              fix="re-run the command", host=self.host.name) from exc
