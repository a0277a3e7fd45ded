"""Run INSIDE the container by sglang-watchdog.service (a systemd timer): restart sglang when it is alive but not
serving, within a restart budget, with no help from the operator's machine.

One run is one check: sample the server (unit state, the client connections open on its port, /health, a tiny
generation, the token counters of /metrics), decide (`decide`, pure: a sample and the previous check's memory in,
an action out), act, store the memory in the root-only state file that `deploy status` and `deploy history` read.
Standard library only (any python3).
Usage: python3 watchdog.py CONFIG_JSON_PATH
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, replace

#: The live scheduler counter of recent sglang releases (by mode, advances while a request runs), and the per-request
#: counters every release has (they advance when a request finishes). Their sum is "progress".
PROGRESS_COUNTERS = ("sglang:realtime_tokens_total", "sglang:prompt_tokens_total", "sglang:generation_tokens_total")
IN_FLIGHT_GAUGES = ("sglang:num_running_reqs", "sglang:num_queue_reqs")
KEEP_ACTIONS = 20


@dataclass(frozen=True)
class Config:
    """The profile's `watchdog:` settings and where the server listens (written by `deploy up`)."""

    base: str = "http://127.0.0.1:8000"
    unit: str = "sglang"
    env_path: str = "/etc/sglang/sglang.env"
    state_path: str = "/var/lib/deploy/watchdog/state.json"
    stall_s: float = 30.0
    probe_timeout_s: float = 10.0
    health_timeout_s: float = 25.0  # the profile's health_probe_timeout_s (deploy up writes it)
    restart_budget: int = 3
    budget_window_s: float = 3600.0


@dataclass(frozen=True)
class Sample:
    """What one check saw. probe: "ok", "timeout", "error" (5xx, reset), "rejected" (4xx), "skipped"."""

    now: float
    unit: str
    http_up: bool
    health_ok: bool
    probe: str
    progress: float | None = None
    in_flight: int | None = None
    invocation: str = ""  # systemd's InvocationID of the server unit: a new one is a new start
    #: Client connections open on the server's port when the check began (None: not readable). Without token
    #: counters this is the only sign that requests may be queued ahead of the tiny generation.
    clients: int | None = None


@dataclass(frozen=True)
class Action:
    at: float
    action: str  # "restart" or "gave-up"
    reason: str


def _number(value: object) -> float | None:
    """A time or counter of the state file: None stays None, anything else must be a number (ValueError, TypeError)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{value!r} is not a number")
    return float(value)


@dataclass(frozen=True)
class Memory:
    """The state file: the last check, where progress was last seen, and the restarts that count on the budget."""

    state: str = "new"
    reason: str = ""
    last_check: float | None = None
    last_progress: float | None = None
    progress_at: float | None = None
    restarts: tuple[float, ...] = ()
    actions: tuple[Action, ...] = ()
    budget: int = 3
    window_s: float = 3600.0
    invocation: str = ""
    served: bool = False  # this invocation has answered /health at least once

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, data: object) -> Memory:
        """The state file's JSON; TypeError when it is not the object this program writes (`[]`, `"x"`, `3`)."""
        if not isinstance(data, dict):
            raise TypeError(f"the state file holds a JSON {type(data).__name__}, not an object")
        acts = tuple(Action(float(a["at"]), str(a["action"]), str(a["reason"])) for a in data.get("actions") or ())
        return cls(state=str(data.get("state", "new")), reason=str(data.get("reason", "")),
                   last_check=_number(data.get("last_check")), last_progress=_number(data.get("last_progress")),
                   progress_at=_number(data.get("progress_at")),
                   restarts=tuple(float(t) for t in data.get("restarts") or ()), actions=acts,
                   budget=int(data.get("budget", 3)), window_s=float(data.get("window_s", 3600.0)),
                   invocation=str(data.get("invocation", "")), served=bool(data.get("served", False)))


@dataclass(frozen=True)
class Decision:
    action: str  # "none", "restart", "give-up"
    memory: Memory
    say: str = ""  # a line for the journal ("" when nothing changed)


def _gist(reason: str) -> str:
    """A reason without its figures: a new cause is said in the journal once, a changing count is not."""
    return re.sub(r"[0-9.]+", "#", reason)


def decide(s: Sample, mem: Memory, cfg: Config) -> Decision:
    """One check's verdict. Acts only on evidence of a stall (a tiny generation timed out or failed, or /health
    failing while the port answers) when no counter moved for `stall_s`: a long prefill advances the counters, so it
    is never restarted; a server that is starting or down is systemd's and deploy's business, not ours. Starting
    includes the warm-up after the port opens (sglang answers /health 503 then): until this start of the unit
    has once answered /health, a failing check is waiting, never a stall, and what an earlier start left in the
    memory (its counters, when progress was seen) says nothing about this one. Without counters (enable-metrics
    off) a timed-out generation is evidence only on an idle server: while clients are connected it may wait behind
    their queue, so it is waiting, and the stall clock starts only once the port has no client."""
    if s.invocation != mem.invocation:
        mem = replace(mem, invocation=s.invocation, served=False, last_progress=None, progress_at=None)
    recent = tuple(t for t in mem.restarts if s.now - t < cfg.budget_window_s)
    base = replace(mem, last_check=s.now, restarts=recent, budget=cfg.restart_budget, window_s=cfg.budget_window_s,
                   last_progress=s.progress if s.progress is not None else mem.last_progress,
                   served=mem.served or s.health_ok or s.probe == "ok")

    def keep(state: str, reason: str, *, progress: bool) -> Decision:
        new = replace(base, state=state, reason=reason, progress_at=s.now if progress else mem.progress_at)
        changed = state != mem.state or _gist(reason) != _gist(mem.reason)
        return Decision("none", new, f"{state}: {reason}" if changed else "")

    if s.unit != "active":
        return keep("waiting", f"{cfg.unit} is {s.unit} (systemd restarts a crashed server)", progress=True)
    if not s.http_up:
        return keep("waiting", "the server's port does not answer yet (loading)", progress=True)
    if not base.served:
        return keep("waiting", "the server has not answered /health since it started (loading or warming up)",
                    progress=True)
    moved = s.progress is not None and mem.last_progress is not None and s.progress != mem.last_progress
    if s.probe == "ok":
        return keep("ok", "a tiny generation answered", progress=True)
    if moved:
        return keep("ok", "busy: the token counters advance", progress=True)
    if s.probe == "timeout" and s.progress is None and s.clients != 0:
        held = (f"{s.clients} client connection(s) are open" if s.clients is not None
                else "the open client connections cannot be read")
        return keep("waiting", f"the tiny generation timed out while {held} and /metrics has no token counters "
                               "(enable-metrics off): a busy queue cannot be told from a stall", progress=True)
    evidence = s.probe in ("timeout", "error") or (not s.health_ok and s.progress is not None)
    if not evidence:
        why = ("/health fails and /metrics has no token counters (enable-metrics): a long prefill cannot be told "
               "from a stall" if not s.health_ok else f"the tiny generation was {s.probe}")
        return keep("waiting", why, progress=True)
    since = mem.progress_at if mem.progress_at is not None else s.now
    stalled_for = s.now - since
    what = ("the tiny generation " + ("timed out" if s.probe == "timeout" else "failed")
            if s.probe in ("timeout", "error") else "/health fails") + " and no token counter moved"
    if s.in_flight:
        what += f" with {s.in_flight} request(s) in flight"
    elif s.progress is None and s.probe == "timeout":
        what += " with no client connected (no counters: enable-metrics off)"
    if stalled_for < cfg.stall_s:
        new = replace(base, state="suspect", reason=f"{what} for {stalled_for:.0f} s", progress_at=since)
        return Decision("none", new, "")
    reason = f"{what} for {stalled_for:.0f} s (stall_s {cfg.stall_s:.0f})"
    if len(recent) < cfg.restart_budget:
        used = len(recent) + 1
        act = Action(s.now, "restart", f"{reason}; restart {used} of {cfg.restart_budget} per "
                                       f"{cfg.budget_window_s:.0f} s")
        new = replace(base, state="restarted", reason=act.reason, progress_at=s.now, restarts=(*recent, s.now),
                      actions=(*mem.actions, act)[-KEEP_ACTIONS:])
        return Decision("restart", new, f"restarting {cfg.unit}: {act.reason}")
    if mem.state == "exhausted":
        return Decision("none", replace(base, state="exhausted", reason=mem.reason), "")
    act = Action(s.now, "gave-up", f"{reason}; the restart budget ({cfg.restart_budget} per "
                                   f"{cfg.budget_window_s:.0f} s) is spent: not restarting")
    new = replace(base, state="exhausted", reason=act.reason, actions=(*mem.actions, act)[-KEEP_ACTIONS:])
    return Decision("give-up", new, f"giving up: {act.reason}; see `deploy status`, `deploy doctor`")


# ------------------------------------------------------------------------------------------------- sampling (I/O)

def api_key(env_path: str) -> str | None:
    try:
        with open(env_path) as fh:
            for line in fh:
                if line.startswith("SGLANG_API_KEY="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        return None
    return None


def http(url: str, timeout: float, body: dict | None = None, key: str | None = None) -> tuple[int, str]:
    """(status, text); status 0: no answer in time (timeout), -1: no connection (port closed), -2: reset."""
    headers = {"Content-Type": "application/json", **({"Authorization": "Bearer " + key} if key else {})}
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except TimeoutError:
        return 0, ""
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, (TimeoutError, socket.timeout)):
            return 0, ""
        return (-1, "") if isinstance(exc.reason, ConnectionRefusedError) else (-2, "")
    except (ConnectionError, OSError):
        return -2, ""


def metric_sum(text: str, names: tuple[str, ...]) -> float | None:
    total: float | None = None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            try:
                total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
            except (ValueError, IndexError):
                continue
    return total


def port_of(base: str) -> int:
    """The port of the server's base URL (`http://127.0.0.1:8000`)."""
    return int(base.rsplit(":", 1)[1].split("/", 1)[0])


def count_established(tables: list[str], port: int) -> int:
    """Established TCP connections whose local end is `port`, in /proc/net/tcp{,6} text: one per client of the
    server, whichever address it came from (a local bench, the router), its own client end not counted."""
    count = 0
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "01" and fields[1].rsplit(":", 1)[-1].upper() == f"{port:04X}":
                count += 1
    return count


def open_clients(port: int) -> int | None:
    """The server's open client connections, read from this network namespace's TCP tables (None: unreadable)."""
    tables = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as fh:
                tables.append(fh.read())
        except OSError:
            continue
    return count_established(tables, port) if tables else None


def sample(cfg: Config) -> Sample:
    shown = subprocess.run(["systemctl", "show", "-p", "ActiveState", "-p", "InvocationID", cfg.unit],
                           capture_output=True, text=True).stdout
    props = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
    unit, invocation = props.get("ActiveState", "").strip(), props.get("InvocationID", "").strip()
    now = time.time()
    if unit != "active":
        return Sample(now, unit or "unknown", False, False, "skipped", invocation=invocation)
    clients = open_clients(port_of(cfg.base))  # before this check's own requests open connections of their own
    health, _ = http(cfg.base + "/health", cfg.health_timeout_s)
    probe = "skipped"
    if health == 200:
        code, _ = http(cfg.base + "/generate", cfg.probe_timeout_s, key=api_key(cfg.env_path),
                       body={"text": "ping", "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
        probe = ("ok" if code == 200 else "timeout" if code == 0 else "rejected" if 400 <= code < 500
                 else "error")
    mcode, text = http(cfg.base + "/metrics", cfg.probe_timeout_s)  # /metrics never waits for the scheduler
    progress = metric_sum(text, PROGRESS_COUNTERS) if mcode == 200 else None
    flight = metric_sum(text, IN_FLIGHT_GAUGES) if mcode == 200 else None
    up = health not in (-1,) or mcode > 0
    return Sample(time.time(), unit, up, health == 200, probe, progress, None if flight is None else int(flight),
                  invocation, clients)


def load_memory(path: str) -> tuple[Memory, str]:
    """The previous check's memory, and a line for the journal when a state file was there but not readable
    (damaged, or not the JSON object this program writes): it is then no state, and this check writes a good one."""
    try:
        with open(path) as fh:
            text = fh.read()
    except FileNotFoundError:
        return Memory(), ""
    except OSError as exc:
        return Memory(), f"cannot read the state file {path} ({exc.strerror}): starting with no state"
    try:
        return Memory.from_dict(json.loads(text)), ""
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return Memory(), f"the state file {path} is not the watchdog's state ({exc}): starting with no state"


def store_memory(path: str, mem: Memory) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(mem.to_json() + "\n")
    os.replace(tmp, path)


def main() -> int:
    with open(sys.argv[1]) as fh:
        cfg = Config(**json.load(fh))
    mem, damaged = load_memory(cfg.state_path)
    if damaged:
        print(f"sglang-watchdog: {damaged}", flush=True)
    result = decide(sample(cfg), mem, cfg)
    if result.action == "restart":
        # The unit's StartLimitBurst guards against crash loops; these restarts have their own budget, so flush its
        # counter first (reset-failed), or the fourth start within StartLimitIntervalSec would leave sglang failed.
        subprocess.run(["systemctl", "reset-failed", cfg.unit], capture_output=True, text=True)
        done = subprocess.run(["systemctl", "restart", "--no-block", cfg.unit], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"sglang-watchdog: systemctl restart {cfg.unit} failed: {done.stderr.strip()}", flush=True)
    if result.say:
        print(f"sglang-watchdog: {result.say}", flush=True)
    store_memory(cfg.state_path, result.memory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
