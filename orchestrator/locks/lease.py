"""The host lock: a lease on the PVE host that belongs to the RUN, not to one SSH channel.

Why a lease: a lock held by an SSH channel vanishes when the connection drops, and a run that reconnects would go
on changing the host without it. The lease is a small file on the host (run id, holder, expiry) that
- is created, checked and renewed atomically on the host, under `flock` for the few milliseconds of the check;
- is renewed by every remote command of the run: each command carries the check in front of it (same round trip),
  so a command after a reconnect runs only if the lease still names this run; a background keep-alive renews
  it during long waits;
- expires by itself when its run died (SIGKILL, lost machine): at most `ttl_s` after its last renewal;
- uses only the host's clock for both writing and checking expiry, and a clock that cannot jump: seconds since
  boot (`/proc/uptime`) plus the boot id, so client clock skew and wall-clock steps on the host do not matter.

A run whose lease names another run (or is gone) has lost the lock: its command does not run and the run stops
with `LockLost`. A lease that expired while still naming this run was taken by nobody in between (taking it
rewrites the run id), so renewing it is safe; the run says so.
"""

from __future__ import annotations

import getpass
import os
import re
import secrets
import shlex
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from orchestrator.errors import DeployError, LockHeld, LockLost, RemoteError
from orchestrator.inventory.models import Host
from orchestrator.local import signals
from orchestrator.locks import claims, local_runs
from orchestrator.monitoring.publish import FAILED as PUBLISH_FAILED
from orchestrator.remote.container import Node
from orchestrator.remote.ssh import RemoteResult, SshHost

LOCK_DIR = "/var/lib/deploy"
LEASE_FILE = "deploy.lease"
#: Held only for the check-and-write of the lease (an older deploy held it for the whole run).
MUTEX_FILE = "deploy.lock"
MARK = "##deploy-lease##"
DEFAULT_TTL_S = 60
TTL_ENV = "DEPLOY_LOCK_TTL_S"
MUTEX_WAIT_S = 15

EXIT_HELD = 75
EXIT_LOST = 76
EXIT_BUSY = 77
EXIT_IO = 78


def lock_ttl_s() -> int:
    """The lease lifetime: DEPLOY_LOCK_TTL_S or 60 s. Short enough to recover from a dead run, long enough to
    ride out an SSH outage of most of a minute."""
    raw = os.environ.get(TTL_ENV, "")
    try:
        ttl = int(raw) if raw else DEFAULT_TTL_S
    except ValueError:
        ttl = DEFAULT_TTL_S
    return max(3, ttl)


def boot_clock() -> float:
    """Seconds on a clock that keeps counting while this machine is suspended (a suspended run's lease runs out)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic()


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(4)


#: How much of the command the lease names: enough to recognise the run, small enough that the holder text, which
#: travels in every remote command line of the run, never pushes one past the kernel's 128 KiB argument limit.
HOLDER_COMMAND_CHARS = 400
_SECRET_ARG = re.compile(r"((?:api[-_]?key|token|secret|passw\w*)[\w-]*(?:=|\s+))\S+", re.IGNORECASE)


def holder_text(command: str) -> str:
    """Who holds the lock, for the lease file and for the runs it refuses. Values of secret-looking arguments
    are masked: the text travels in every remote command line of the run and sits in a file on the host."""
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    command = " ".join(_SECRET_ARG.sub(r"\1***", command).split())
    if len(command) > HOLDER_COMMAND_CHARS:  # a 120,000-character --set value would ride in every command line
        command = command[:HOLDER_COMMAND_CHARS - 1] + "…"
    text = f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()} running '{command}' since {since}"
    return " ".join(text.split())  # one line: the lease file is line-based


# ------------------------------------------------------------------------------------------- host-side script
_SCRIPT = r"""(
d=__DIR__; f="$d/__LEASE__"
io() { echo "__MARK__ io what=$1" >&2; exit __EXIT_IO__; }
command -v flock >/dev/null 2>&1 || io "flock (util-linux) is not installed"
[ -d "$d" ] || mkdir -p "$d" || io "cannot create $d"
exec 9>>"$d/__MUTEX__" || io "cannot open $d/__MUTEX__"
flock -w __WAIT__ 9 || { echo "__MARK__ busy now=?" >&2; exit __EXIT_BUSY__; }
read -r now _ < __CLOCK__; now=${now%%.*}
read -r boot < __BOOT__
l_run= l_boot= l_exp=0 l_acq=$now
if [ -f "$f" ]; then
  while IFS='=' read -r k v; do
    case $k in run) l_run=$v;; boot) l_boot=$v;; expires) l_exp=$v;; acquired) l_acq=$v;; esac
  done < "$f"
fi
case $l_exp in ''|*[!0-9]*) l_exp=0;; esac
case $l_acq in ''|*[!0-9]*) l_acq=$now;; esac
live=0
if [ -n "$l_run" ] && [ "$l_boot" = "$boot" ] && [ "$now" -lt "$l_exp" ]; then live=1; fi
dead=0
__DEAD_CASE__
show() { { echo "__MARK__ $1 now=$now"; echo "__MARK__ $1 sameboot=$([ "$l_boot" = "$boot" ] && echo 1 || echo 0)"
  while IFS= read -r line; do echo "__MARK__ $1 $line"; done < "$f"; } >&2; }
case __MODE__ in
  acquire)
    if [ "$l_run" != __RUN__ ] && [ $live = 1 ] && [ $dead = 0 ]; then show held; exit __EXIT_HELD__; fi
    if [ -n "$l_run" ] && [ "$l_run" != __RUN__ ]; then
      show took-over; [ $dead = 0 ] || echo "__MARK__ took-over dead=1" >&2
    fi
    l_acq=$now;;
  renew)
    if [ "$l_run" != __RUN__ ]; then
      if [ -f "$f" ]; then show lost; else echo "__MARK__ lost now=$now" >&2; fi
      exit __EXIT_LOST__
    fi
    if [ $live = 0 ]; then show renewed-expired; fi;;
  release)
    if [ "$l_run" = __RUN__ ]; then __ON_RELEASE__rm -f "$f"; elif [ -f "$f" ]; then show not-ours; fi
    exit 0;;
esac
{ printf 'run=%s\n' __RUN__; printf 'holder=%s\n' __HOLDER__; printf 'boot=%s\n' "$boot"
  printf 'acquired=%s\n' "$l_acq"; printf 'renewed=%s\n' "$now"; printf 'expires=%s\n' "$((now + __TTL__))"
  printf 'ttl=%s\n' __TTL__; } > "$f.tmp" && mv -f "$f.tmp" "$f" || io "cannot write $f"
) </dev/null || exit $?
"""


@dataclass(frozen=True)
class LeaseScript:
    """Renders the host-side lease check; paths are parameters so tests can run it against a temp dir."""

    run_id: str
    holder: str
    ttl_s: int
    lock_dir: str = LOCK_DIR
    clock: str = "/proc/uptime"
    boot_id: str = "/proc/sys/kernel/random/boot_id"
    #: Runs this machine proves dead (locks/local_runs.py): a lease naming one is taken over before it expires.
    dead_runs: tuple[str, ...] = ()

    def render(self, mode: str, on_release: str = "") -> str:
        """The check for `mode`; `on_release`: shell lines run in a release while the lease is still ours, under
        its mutex, before the lease file goes (the metrics' publish: the release's round trip carries them)."""
        if mode not in ("acquire", "renew", "release"):
            raise ValueError(f"unknown lease mode {mode!r}")
        values = {"__DIR__": shlex.quote(self.lock_dir), "__LEASE__": LEASE_FILE, "__MUTEX__": MUTEX_FILE,
                  "__WAIT__": str(MUTEX_WAIT_S), "__MARK__": MARK, "__CLOCK__": shlex.quote(self.clock),
                  "__BOOT__": shlex.quote(self.boot_id), "__MODE__": mode, "__RUN__": shlex.quote(self.run_id),
                  "__HOLDER__": shlex.quote(self.holder), "__TTL__": str(int(self.ttl_s)),
                  "__EXIT_HELD__": str(EXIT_HELD), "__EXIT_LOST__": str(EXIT_LOST),
                  "__EXIT_BUSY__": str(EXIT_BUSY), "__EXIT_IO__": str(EXIT_IO)}
        dead = "|".join(shlex.quote(r) for r in self.dead_runs)
        values["__DEAD_CASE__"] = f'case $l_run in {dead}) dead=1;; esac' if dead else ":"
        text = _SCRIPT
        for key, value in values.items():
            text = text.replace(key, value)
        return text.replace("__ON_RELEASE__", on_release + "\n" if on_release else "")


# --------------------------------------------------------------------------------------- pure: parse, describe
@dataclass(frozen=True)
class LeaseInfo:
    """A lease as the host reported it, with the host's clock at that moment (seconds since its boot)."""

    run: str = ""
    holder: str = ""
    now: int | None = None
    renewed: int | None = None
    expires: int | None = None
    ttl: int | None = None
    same_boot: bool = True
    what: str = ""  # for an `io` event: what failed
    dead: bool = False  # taken over because this machine proved its run dead (not because it expired)

    @property
    def taken_before_expiry(self) -> bool:
        """Taken over while still live, because this machine proved its run dead."""
        left = self.expires_in_s
        return self.dead and (left is None or left > 0)

    @property
    def expires_in_s(self) -> int | None:
        """Positive: still valid for that long; negative: expired that long ago (host clock, same boot)."""
        if self.now is None or self.expires is None or not self.same_boot:
            return None
        return self.expires - self.now

    @property
    def renewed_ago_s(self) -> int | None:
        if self.now is None or self.renewed is None or not self.same_boot:
            return None
        return self.now - self.renewed

    def who(self) -> str:
        return f"run {self.run or '?'} ({self.holder or 'holder unknown'})"

    def timing(self) -> str:
        left = self.expires_in_s
        if not self.same_boot:
            return "its lease dates from before the host's last boot"
        if left is None:
            return "lease times unknown"
        ago = self.renewed_ago_s
        renewed = f"renewed {ago} s ago, " if ago is not None else ""
        return f"{renewed}expires in {left} s" if left > 0 else f"{renewed}expired {-left} s ago"


@dataclass
class GuardReport:
    """What the host-side check said: events (held, lost, took-over, …) with the lease they saw."""

    events: dict[str, LeaseInfo] = field(default_factory=dict)
    stderr: str = ""  # the command's own stderr, without our lines


def _to_int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def parse_guard_output(stderr: str) -> GuardReport:
    """Split our marker lines (`MARK event key=value`) from the command's stderr; one LeaseInfo per event."""
    raw: dict[str, dict[str, str]] = {}
    rest: list[str] = []
    for line in stderr.splitlines(keepends=True):
        if not line.startswith(MARK + " "):
            rest.append(line)
            continue
        event, _, pair = line[len(MARK) + 1:].rstrip("\n").partition(" ")
        key, _, value = pair.partition("=")
        raw.setdefault(event, {})[key] = value
    events = {ev: LeaseInfo(run=kv.get("run", ""), holder=kv.get("holder", ""), now=_to_int(kv.get("now")),
                            renewed=_to_int(kv.get("renewed")), expires=_to_int(kv.get("expires")),
                            ttl=_to_int(kv.get("ttl")), same_boot=kv.get("sameboot", "1") != "0",
                            what=kv.get("what", ""), dead=kv.get("dead") == "1")
              for ev, kv in raw.items()}
    return GuardReport(events, "".join(rest))


def held_message(info: LeaseInfo) -> str:
    return f"another deploy run holds the lock on this host: {info.who()}; {info.timing()}"


def held_fix(info: LeaseInfo) -> str:
    ttl = info.ttl if info.ttl is not None else DEFAULT_TTL_S
    return (f"wait for it to finish (deploy status shows the host meanwhile); if that run died, its lock frees "
            f"itself at most {ttl} s after its last renewal")


def takeover_message(info: LeaseInfo) -> str:
    left = info.expires_in_s
    if info.taken_before_expiry:
        why = "its process on this machine is gone; the lease had not expired yet"
    elif left is None:
        why = "from before the host's last boot" if not info.same_boot else "expired"
    else:
        why = f"expired {-left} s ago"
    return f"took over the lock of {info.who()} ({why})"


def lost_message(info: LeaseInfo | None) -> str:
    if info is None or not info.run:
        return ("this run lost the host lock: its lease is gone from the host (another run took it after it "
                "expired and has finished, or it was removed by hand)")
    return f"this run lost the host lock: {info.who()} holds it now ({info.timing()})"


# ------------------------------------------------------------------------------------------------- the lease
def _exit_on_signal(signum: int, _frame: object) -> None:
    """End the run; in a command that is already stopping (signals.one_stop: a tune unwinding into its restore)
    the signal is held instead, so it cannot cut short the cleanup that frees this lease."""
    signals.stop_or_hold(signum, lambda: SystemExit(128 + signum))


class HostLease:
    """This run's lease on one host. Installed as the SshHost's command guard once acquired.

    `acquire()` arms the guard in acquire mode: the next remote command (normally the fact gathering) takes the
    lease in the same round trip. After that every command renews it, and a keep-alive thread renews it when
    no command did for a third of its lifetime.
    """

    def __init__(self, ssh: Node, command: str, *, ttl_s: int | None = None, run_id: str | None = None,
                 say: Callable[[str], None] | None = None) -> None:
        self.ssh = ssh
        self.run_id = run_id or new_run_id()
        self.ttl_s = ttl_s or lock_ttl_s()
        self.dead_runs = local_runs.dead_runs(ssh.host.name)
        self.script = LeaseScript(self.run_id, holder_text(command), self.ttl_s, dead_runs=self.dead_runs)
        self.local: local_runs.LocalRun | None = None
        self.say = say or (lambda _m: None)
        self.mode: str | None = None  # None: not armed; "acquire" until the first command ran; then "renew"
        self.took_over: LeaseInfo | None = None
        self.notes: list[str] = []
        self.keepalives = 0
        self._state = threading.Lock()
        self._last_sent = 0.0  # local monotonic clock: send time of the last renewal
        self._last_sent_boot = 0.0  # the same on the boot clock (counts suspended time)
        self._generation = 0  # the SSH connection the last renewal ran on
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._old_handlers: dict[int, Any] = {}
        #: Shell lines for the release's round trip (steps/session.py: the metrics' publish), built at release time.
        self.on_release: Callable[[], str] | None = None
        self.published: str | None = None  # what the release said about those lines ("published", or the failure)

    # -- guard protocol (called by SshHost.run) -------------------------------------------------------------
    def wrap(self, command: str) -> str:
        claims.ensure_held()  # a claim lost with the team store stops the run here (locks/claims.py)
        mode = self.mode or "renew"
        return self.script.render(mode) + command

    def check(self, result: RemoteResult, sent_at: float) -> RemoteResult:
        """Raise if the host-side check refused the command; otherwise note the renewal and strip our lines."""
        report = parse_guard_output(result.stderr)
        host = self.ssh.host.name
        clean = RemoteResult(result.rc, result.stdout, report.stderr, result.duration_s)
        ev = report.events
        if "held" in ev and result.rc == EXIT_HELD:
            info = ev["held"]
            raise LockHeld(held_message(info), fix=held_fix(info), host=host, step="lock",
                           details={"holder": info.holder, "run": info.run, "expires_in_s": info.expires_in_s})
        if "lost" in ev and result.rc == EXIT_LOST:
            info = ev["lost"]
            self.mode = None
            self._stop.set()
            raise LockLost(lost_message(info if info.run else None) + "; stopped before changing anything more",
                           fix="this run changed nothing after it lost the lock; check the host with `deploy "
                               "status` and `deploy history` (the other run may be changing it), then re-run",
                           host=host, details={"holder": info.holder, "run": info.run})
        if "busy" in ev and result.rc == EXIT_BUSY:
            raise RemoteError(f"the host lock's mutex {LOCK_DIR}/{MUTEX_FILE} stayed busy for {MUTEX_WAIT_S} s",
                              fix="another deploy (an older version holds it for its whole run) is running: "
                                  "wait for it, then re-run", host=host, step="lock")
        if "io" in ev and result.rc == EXIT_IO:
            raise RemoteError(f"cannot keep the host lock in {LOCK_DIR}: {ev['io'].what}",
                              fix=f"check that {LOCK_DIR} is writable by the SSH user, that its file system has "
                                  f"free space (`df -h {LOCK_DIR}`: a full disk fails this write first), and that "
                                  "flock (util-linux) is installed on the host", host=host, step="lock")
        with self._state:
            if "took-over" in ev:
                self.took_over = ev["took-over"]
                self._note(takeover_message(ev["took-over"]))
            if "renewed-expired" in ev:
                ago = ev["renewed-expired"].expires_in_s
                self._note(f"this run's lease had expired{f' {-ago} s ago' if ago is not None else ''} but no "
                           "other run took it: renewed")
            if self.mode is not None and self._generation and self._generation != self.ssh.generation:
                self._note(f"SSH reconnected; the host confirmed run {self.run_id} still holds the lock")
            if self.mode == "acquire" and self.dead_runs:
                local_runs.forget(self.ssh.host.name, self.dead_runs)  # the lease names this run now
            if self.mode is not None:
                self.mode = "renew"
                self._generation = self.ssh.generation
                self._last_sent = max(self._last_sent, sent_at)
                self._last_sent_boot = max(self._last_sent_boot, boot_clock() - (time.monotonic() - sent_at))
        return clean

    def _note(self, message: str) -> None:
        self.notes.append(message)
        if threading.current_thread() is threading.main_thread():
            self.say(message)

    # -- lifecycle ----------------------------------------------------------------------------------------
    def arm(self) -> None:
        """The next remote command takes the lease (same round trip); from then on every command renews it."""
        self.mode = "acquire"
        self.ssh.guard = self
        if self.local is None:
            self.local = local_runs.start_run(self.ssh.host.name, self.run_id, self.script.holder)

    def acquire(self) -> None:
        """Take the lease now in a round trip of its own (when no command follows to carry it)."""
        self.arm()
        self.ssh.run(":", what="take the host lock")

    @property
    def held(self) -> bool:
        return self.mode == "renew"

    def valid_for_s(self) -> float:
        """How long the lease is certainly valid, by the local clock (conservative: from the send time)."""
        return self._last_sent_boot + self.ttl_s - boot_clock()

    def before_change(self) -> None:
        """Before a change made outside SSH (PVE API over HTTPS): prove the lease unless it was renewed on this
        connection within the last third of its lifetime, so it outlives the call."""
        if self.mode != "renew":
            return
        if self.valid_for_s() < self.ttl_s * 2 / 3 or self._generation != self.ssh.generation:
            self.ssh.run(":", what="re-check the host lock")

    def start_keepalive(self) -> None:
        """Renew during long waits; and let SIGTERM/SIGHUP unwind the run so that its lock is released."""
        self._trap_signals()
        if self._thread is None:
            self._thread = threading.Thread(target=self._keepalive, name="deploy-lock-keepalive", daemon=True)
            self._thread.start()

    def _keepalive(self) -> None:
        period = max(1.0, self.ttl_s / 3)
        while not self._stop.wait(min(period, 1.0)):
            if self.mode != "renew":
                return
            if time.monotonic() - self._last_sent < period:
                continue
            try:
                self.ssh.run(":", what="lock keep-alive", timeout=period)
                self.keepalives += 1
            except (LockLost, LockHeld):
                return  # the main thread's next command stops the run
            except DeployError:
                continue  # connection trouble: try again; the main thread reports it

    def _trap_signals(self) -> None:
        """`kill`, `timeout`, a closed terminal: end the run through its cleanups (which free the lock) instead of
        leaving the lease to expire. SIGKILL cannot be caught; then the lease expires by itself. Inside a cleanup
        that holds signals (orchestrator/signals.py: a tune's restore) they are left to it: the run must end."""
        if threading.current_thread() is not threading.main_thread() or signals.holding():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self._old_handlers[sig] = signal.signal(sig, _exit_on_signal)
            except (ValueError, OSError):
                pass

    def _restore_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()

    def release(self) -> str:
        """Free the lease if it is still ours. Returns what happened, for the unlock step."""
        # Armed but never confirmed: the acquire may have reached the host and its answer been cut off (a signal,
        # a dropped connection). Its lease would then be live for a minute under a run nobody renews; the run's
        # mark is left dead instead, so this machine's next run takes that lease over at once.
        unconfirmed = self.mode == "acquire"
        try:
            return self._release()
        finally:
            if self.local is not None:  # after the remote release: until then this run may still hold the lease
                if unconfirmed:
                    self.local.abandon()
                else:
                    self.local.end()
                self.local = None

    def _release(self) -> str:
        self._restore_signals()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.ssh.host.ssh.connect_timeout_s + 5)
            self._thread = None
        if self.ssh.guard is self:
            self.ssh.guard = None
        if self.mode != "renew":
            self.mode = None
            return "lock was not held"
        self.mode = None
        extra = ""
        if self.on_release is not None:
            try:
                extra = self.on_release()
            except Exception as exc:  # the release must happen; a bug in what it carries is reported, not raised
                self.published = f"not published: {type(exc).__name__}: {exc}"
                self.notes.append(f"metrics {self.published}")
        res = self.ssh.run(self.script.render("release", extra), check=False, what="release the host lock")
        if res.rc != 0 and extra:  # what it carried broke the release: free the lease without it
            self.published = f"not published: the release with the metrics failed (exit {res.rc})"
            self.notes.append(f"metrics {self.published}")
            extra = ""
            res = self.ssh.run(self.script.render("release"), check=False, what="release the host lock")
        if res.rc != 0:
            return (f"lock NOT released (exit {res.rc}: {_last_line(res.stderr)}); it frees itself at most "
                    f"{self.ttl_s} s after its last renewal")
        report = parse_guard_output(res.stderr)
        if extra:
            failed = [line for line in report.stderr.splitlines() if line.startswith(PUBLISH_FAILED)]
            self.published = "; ".join(failed) if failed else "published"
            if failed:
                self.notes.extend(failed)
        other = report.events.get("not-ours")
        if other is not None:
            return f"lock released (it was no longer ours: {other.who()} holds it)"
        return "lock released"


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def free_dead_runs_leases(host: Host, *, tofu: bool) -> tuple[str, ...]:
    """Remove the leases that this machine's dead runs (locks/local_runs.py) left on `host`, each only while it
    still names that run, and forget those runs. For hosts a command does not otherwise lock, such as the hosts a
    resumed fleet roll had already rolled before it was killed; every other command takes such a lease over anyway.
    Returns the runs whose leases were looked for (none: no connection made)."""
    dead = local_runs.dead_runs(host.name)
    if not dead:
        return ()
    script = "".join(LeaseScript(run, "", DEFAULT_TTL_S).render("release") for run in dead)
    with SshHost(host, tofu=tofu) as ssh:
        ssh.run(script, check=False, what="free the leases of dead runs")
    local_runs.forget(host.name, dead)
    return dead

