"""The host's stand-in server: `pct`, `pvesh`, `nvidia-smi` … with their modules imported once, forked per call.

    python -S -m simulator.host.standin_server HOST_DIR      # exec'd by the host view's holder (simulator.host.shell)

It runs as the process that holds the host view (same pid, namespaces and cwd), started through the view's own
interpreter launcher, so its module paths are the ones a direct run has. Each call (simulator.host.standin_client) is
one SOCK_SEQPACKET message with the caller's argv, environment, cwd, umask and stdin/stdout/stderr descriptors; the
server forks, the child takes all of that over, runs the tool's `main` and exits with its status, which the server
sends back after a `run` message (so a client whose connection closes before `run`, queued while the server
stopped listening, knows nothing ran and runs the tool directly). Bytes from the client after the request are
signals to pass on; the client gone (killed) kills the command, as it would have died with it.

A call costs the fork and the command's own work, not the ~0.1 s of imports of a direct run. The server must not
change what a command does: each child starts from the state right after the imports (no command ever runs in the
server), reseeds `random`, and rebuilds its standard streams on the caller's descriptors. Code edited since the
server loaded it is not served stale: the server answers `stale` (the client runs the tool directly), lets its
running calls end, and execs itself again. Anything failing at start-up leaves a plain holder (`sleep`), so the
view and every session work, only through direct runs.
"""

from __future__ import annotations

import gc
import os
import selectors
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass

from simulator import layout
from simulator.host.standin_client import ENTRIES, SOCKET_NAME

#: The modules the tools import, lazily or not: imported once here so that no call pays for them.
PRELOAD = ("simulator.pve.cli", "simulator.pve.api", "simulator.pve.schema", "simulator.pve.acl",
           "simulator.pve.hardware", "simulator.pve.textout", "simulator.pve.lxc", "simulator.pve.vzdump",
           "simulator.lxc.runtime", "simulator.lxc.attach", "simulator.gpu.smi", "simulator.host.units", "random")
MAX_REQUEST = 1 << 20


@dataclass
class Request:
    """One call, as the client sent it."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    umask: int
    fd_mask: int


def decode_request(data: bytes) -> Request:
    """The inverse of standin_client.encode_request."""
    fields = data.split(b"\0")
    fd_mask, umask, argc = (int(x) for x in fields[0].split())
    argv = [os.fsdecode(a) for a in fields[1:1 + argc]]
    cwd = os.fsdecode(fields[1 + argc])
    env: dict[str, str] = {}
    for entry in fields[2 + argc:]:
        key, sep, value = entry.partition(b"=")
        if sep and key:
            env[os.fsdecode(key)] = os.fsdecode(value)
    return Request(argv=argv, env=env, cwd=cwd, umask=umask, fd_mask=fd_mask)


def _entry(tool: str) -> Callable[[list[str]], int]:
    module_name, named = ENTRIES[tool]
    module = sys.modules.get(module_name) or __import__(module_name, fromlist=["main"])
    main = module.main
    return (lambda args: main([tool, *args])) if named else (lambda args: main(args))


def _set_comm(name: str) -> None:
    """The process's name as `ps`/`pgrep` show it: the tool's, as for a real `pct` (a script named pct)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def _reopen_stdio(env: dict[str, str]) -> None:
    """Standard streams on the caller's descriptors, buffered as a fresh interpreter would buffer them."""
    import io

    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "rb", closefd=False)), encoding="utf-8",
                             errors="surrogateescape")
    out_raw = io.FileIO(1, "wb", closefd=False)
    stdout = io.TextIOWrapper(io.BufferedWriter(out_raw), encoding="utf-8", errors="surrogateescape",
                              line_buffering=out_raw.isatty(), write_through=unbuffered)
    stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "wb", closefd=False)), encoding="utf-8",
                              errors="backslashreplace", line_buffering=True)
    sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
    for name, stream in (("__stdin__", stdin), ("__stdout__", stdout), ("__stderr__", stderr)):
        setattr(sys, name, stream)


def run_child(request: Request, fds: list[int]) -> None:
    """In the forked child: become the caller's command, run it, exit with its status. Never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        passed = iter(fds)
        for fd in (0, 1, 2):
            if request.fd_mask & (1 << fd):
                os.dup2(next(passed), fd)
            else:
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, fd)
        os.closerange(3, 65536)  # the server's listener, its other calls, the received copies
        os.umask(request.umask)
        os.environ.clear()
        os.environ.update(request.env)
        try:
            os.chdir(request.cwd)
        except OSError:
            os.chdir("/")
        _reopen_stdio(request.env)
        sys.modules["random"].seed()  # never the server's sequence (MAC addresses)
        tool, args = request.argv[0], request.argv[1:]
        _set_comm(tool)
        module_name = ENTRIES[tool][0]
        sys.argv = [getattr(sys.modules.get(module_name), "__file__", None) or module_name, *args]
        try:
            code = _entry(tool)(args)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except KeyboardInterrupt:
            _flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        _flush()
        os._exit(code if isinstance(code, int) else 1)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _loaded_sources() -> dict[str, float]:
    """mtime of every repo module this server imported: a changed one means the server's code is stale."""
    out: dict[str, float] = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and path.startswith(layout.VIEW_REPO + "/"):
            try:
                out[path] = os.stat(path).st_mtime
            except OSError:
                out[path] = -1.0
    return out


def _stale(sources: dict[str, float]) -> bool:
    for path, mtime in sources.items():
        try:
            if os.stat(path).st_mtime != mtime:
                return True
        except OSError:
            return True
    return False


class Server:
    """The accept loop: a fork per call, the status back to its client, signals passed on."""

    def __init__(self, sock_path: str) -> None:
        self.sock_path = sock_path
        self.sel = selectors.DefaultSelector()
        self.calls: dict[int, socket.socket] = {}  # child pid -> its client's connection
        self.draining = False
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        signal.set_wakeup_fd(self.wake_w.fileno())
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        try:
            os.unlink(sock_path)
        except FileNotFoundError:
            pass
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(sock_path)
        os.chmod(sock_path, 0o600)
        self.listener.listen(256)
        self.sel.register(self.listener, selectors.EVENT_READ, "accept")
        self.sources = _loaded_sources()

    def serve(self) -> None:
        while not (self.draining and not self.calls):
            for key, _ in self.sel.select():
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    self._reap()
                else:
                    self._from_client(key.fileobj, key.data)  # type: ignore[arg-type]

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        try:
            conn.settimeout(5)  # a client stopped between connect and send must not stall every other call
            data, ancdata, _, _ = conn.recvmsg(MAX_REQUEST, socket.CMSG_SPACE(3 * 4))
            conn.settimeout(None)
        except OSError:
            conn.close()
            return
        fds = [int.from_bytes(d[i:i + 4], sys.byteorder) for level, kind, d in ancdata
               if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS for i in range(0, len(d) - 3, 4)]
        try:
            request = decode_request(data)
            if request.argv[0] not in ENTRIES:
                raise ValueError(request.argv[0])
        except (ValueError, IndexError):
            self._close_fds(fds)
            conn.sendall(b"stale")  # not ours to answer: the client runs it directly
            conn.close()
            return
        if _stale(self.sources):
            self._close_fds(fds)
            conn.sendall(b"stale")
            conn.close()
            self._drain()
            return
        pid = os.fork()
        if pid == 0:
            run_child(request, fds)
        self._close_fds(fds)
        try:
            conn.sendall(b"run")  # before the status (sent from this loop too): the client knows the call ran
        except OSError:
            pass  # the client is gone: its command is killed when its connection reads EOF
        self.calls[pid] = conn
        self.sel.register(conn, selectors.EVENT_READ, pid)

    @staticmethod
    def _close_fds(fds: list[int]) -> None:
        for fd in fds:
            os.close(fd)

    def _from_client(self, conn: socket.socket, pid: int) -> None:
        try:
            data = conn.recv(64)
        except OSError:
            data = b""
        if not data:  # the client died: its command dies with it
            self.sel.unregister(conn)
            self._kill(pid, signal.SIGKILL)
            return
        for signum in data:
            self._kill(pid, signum)

    @staticmethod
    def _kill(pid: int, signum: int) -> None:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, ValueError, OSError):
            pass

    def _reap(self) -> None:
        try:
            while self.wake_r.recv(512):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.calls.pop(pid, None)
            if conn is None:
                continue
            if os.WIFSIGNALED(status):
                reply = b"signal %d" % os.WTERMSIG(status)
            else:
                reply = b"exit %d" % os.waitstatus_to_exitcode(status)
            try:
                conn.sendall(reply)
            except OSError:
                pass
            try:
                self.sel.unregister(conn)
            except (KeyError, ValueError):
                pass
            self._read_out(conn)
            conn.close()

    @staticmethod
    def _read_out(conn: socket.socket) -> None:
        """Read what the client sent and this loop has not (a signal byte racing the command's end): a unix socket
        closed with unread data makes the client's recv fail with ECONNRESET, and the reply queued for it is lost."""
        conn.setblocking(False)
        try:
            while conn.recv(64):
                pass
        except OSError:
            pass

    def _drain(self) -> None:
        """Stop taking calls (new clients run directly), let the running ones end, then exec a fresh server."""
        if self.draining:
            return
        self.draining = True
        self.sel.unregister(self.listener)
        self.listener.close()
        try:
            os.unlink(self.sock_path)
        except FileNotFoundError:
            pass


def hold_as_sleeper(host_dir: str) -> None:
    """The plain holder of the view: what the host had before this server, and what is left if it cannot run."""
    os.execv("/bin/sleep", [f"deploy-sim-view {host_dir}", "infinity"])


def main(argv: list[str]) -> None:
    host_dir = argv[1]
    try:
        for name in PRELOAD:
            __import__(name)
        sys.modules["simulator.pve.schema"]._index()  # the parsed API schema, shared
        sock_path = os.path.join(layout.current_host_dir(), "sshd", SOCKET_NAME)
        server = Server(sock_path)
        gc.freeze()  # the imported objects stay out of the children's collections: fewer pages copied per fork
    except BaseException as exc:
        print(f"deploy sim: stand-in server not started ({exc!r}); stand-ins run directly", file=sys.stderr)
        hold_as_sleeper(host_dir)
    try:
        server.serve()
    except BaseException as exc:
        print(f"deploy sim: stand-in server stopped ({exc!r}); stand-ins run directly", file=sys.stderr)
        hold_as_sleeper(host_dir)
    signal.set_wakeup_fd(-1)
    os.execv(sys.executable, [sys.executable, "-S", "-m", "simulator.host.standin_server", host_dir])


if __name__ == "__main__":
    main(sys.argv)
