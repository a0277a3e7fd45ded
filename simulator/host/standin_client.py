"""The client half of the host's stand-in server (simulator.host.standin_server): what `pct`, `pvesh`, `nvidia-smi` …
run on a simulated host.

    $DEPLOY_SIM_PYTHON -S -c 'from simulator.host.standin_client import main; main()' TOOL ARGS…

Why: a stand-in is a Python program that imports the simulated PVE (its API, schema, config models) before it can
answer, ~0.1 s of CPU per call, and a test run makes thousands of calls. The server has imported all of it once and
forks per call, so a call costs this client (interpreter start-up, no module beyond the built-in ones) and the
command's own work. What the command sees is what it would see when run directly: the caller's argv, environment,
working directory, umask and its stdin, stdout and stderr themselves (passed as descriptors, so a pipe, a file or
a terminal stays what it is); the caller gets its exit status, and a signal sent to the caller reaches the command.

When the server cannot take the call (no server: a view started by an older `sim up`, outside a view, the code
changed since it loaded), the client becomes the direct run (`python -S -m MODULE`), so a call never depends on
the server. Built-in modules only (`_socket`, `_signal`, `posix`): `socket`, `signal` and `os` cost more than the
whole client.
"""

import _signal
import _socket
import posix
import sys

#: The tools and the module that implements each (a direct run is `python -S -m MODULE [TOOL] ARGS…`).
ENTRIES = {
    "pct": ("simulator.pve.cli", True), "pvesh": ("simulator.pve.cli", True),
    "pveversion": ("simulator.pve.cli", True), "vzdump": ("simulator.pve.cli", True),
    "lspci": ("simulator.pve.cli", True), "nvidia-modprobe": ("simulator.pve.cli", True),
    "nvidia-persistenced": ("simulator.pve.cli", True),
    "nvidia-smi": ("simulator.gpu.smi", False), "systemctl": ("simulator.host.units", False),
    "journalctl": ("simulator.host.journal", False),
}
SOCKET_NAME = "standin.sock"  # in hosts/<name>/sshd/
FORWARDED = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT, _signal.SIGUSR1, _signal.SIGUSR2)


def encode_request(argv: list[bytes], env: dict[bytes, bytes], cwd: bytes, umask: int, fds: int) -> bytes:
    """One message: `fds-mask umask argc` then argv, cwd and `KEY=VALUE` entries, NUL-separated."""
    fields = [b"%d %d %d" % (fds, umask, len(argv)), *argv, cwd, *(k + b"=" + v for k, v in env.items())]
    return b"\0".join(fields)


def _direct(tool: str, args: list[str]) -> None:
    module, named = ENTRIES[tool]
    argv = [sys.executable, "-S", "-m", module, *([tool] if named else []), *args]
    posix.execv(sys.executable, argv)


def _socket_path(env: dict[bytes, bytes]) -> bytes | None:
    root, host = env.get(b"DEPLOY_SIM_ROOT"), env.get(b"DEPLOY_SIM_HOST")
    if not root or not host:
        return None
    return root + b"/hosts/" + host + b"/sshd/" + SOCKET_NAME.encode()


def _connect(path: bytes) -> "_socket.socket | None":
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def _open_stdio() -> tuple[list[int], int]:
    """The caller's descriptors 0-2 that are open, and their mask (bit N: descriptor N is passed)."""
    fds, mask = [], 0
    for fd in (0, 1, 2):
        try:
            posix.fstat(fd)
        except OSError:
            continue
        fds.append(fd)
        mask |= 1 << fd
    return fds, mask


def call(sock: "_socket.socket", tool: str, args: list[str]) -> int | None:
    """Run TOOL ARGS through the server; its exit status (128+N for signal N), or None when the server did not run
    it (it answered `stale`, or closed the connection before `run`: a call queued while it stopped listening, whose
    recv ends in ECONNRESET rather than EOF, since the request is still unread; every stand-in server of this
    machine drains at once when a stand-in module changes, so a busy test run meets it)."""
    env = posix.environ
    argv = [tool.encode(), *(a.encode("utf-8", "surrogateescape") for a in args)]
    umask = posix.umask(0o022)
    posix.umask(umask)
    fds, mask = _open_stdio()
    request = encode_request(argv, env, posix.getcwd().encode("utf-8", "surrogateescape"), umask, mask)
    fd_bytes = b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds)
    try:
        sock.sendmsg([request], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fd_bytes)])
    except OSError:
        return None  # e.g. EMSGSIZE: an environment too large for one message

    def forward(signum: int, _frame: object) -> None:
        try:
            sock.send(bytes([signum]))
        except OSError:
            pass

    for signum in FORWARDED:
        if _signal.getsignal(signum) != _signal.SIG_IGN:
            _signal.signal(signum, forward)
    try:
        reply = sock.recv(64)
    except OSError:  # ECONNRESET: the server closed the connection with the request unread, nothing ran
        return None
    if reply != b"run":  # b"stale", or a connection the server never took (it stopped listening): nothing ran
        return None
    try:
        reply = sock.recv(64)
    except OSError:
        reply = b""
    if not reply:
        posix.write(2, f"deploy sim: the stand-in server stopped while `{tool}` ran\n".encode())
        return 255
    kind, _, number = reply.partition(b" ")
    if kind == b"signal":
        signum = int(number)
        try:
            _signal.signal(signum, _signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL and SIGSTOP take no handler, and need none reset
        posix.kill(posix.getpid(), signum)  # end as the command did (a killed command reads as killed)
        return 128 + signum
    return int(number)


def main() -> None:
    tool, args = sys.argv[1], sys.argv[2:]
    path = _socket_path(posix.environ)
    sock = _connect(path) if path else None
    if sock is not None:
        status = call(sock, tool, args)
        if status is not None:
            posix._exit(status)
        sock.close()
    _direct(tool, args)
