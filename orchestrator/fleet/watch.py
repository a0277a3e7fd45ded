"""`deploy watch group G`: GPU hardware faults acted on without an operator command (issue 39: cordon, remedy,
verify, return).

Why a loop on the operator machine (meant to run under systemd, or once from a timer with `--once`): it is where
the router and every host are reachable, and a fault must take a host out of the router before clients see its
errors. Each cycle reads every host's sensors with the status playbook (one round trip a host: the same facts
`deploy status` reads) and acts on the worst fault's catalog action under the operator's `health:` policy
(hardware/policy.py):
- **cordon**: a host whose fault needs acting on, listed by the router, is drained out of it like `deploy router
  remove` (never the last serving worker: that is said, and retried next cycle);
- **remedy**: the remedy the policy allows runs on the drained host (restart sglang; reboot the node, never while
  another host of the fleet is out), then is verified (device nodes, the container's GPUs, health, smoke, the
  correctness gate) and the kernel-log cursor is moved past the Xids it answered; one remedy per cordon: a host
  still faulty after it, or whose remedy failed, stays out with one line saying why and what to do;
- **return**: a host this watch cordoned, whose sensors read clean again and whose server answers /health, is added
  back with every add-back check (`deploy router add`) — at once after its remedy, or once the operator fixed it
  (a host whose remedy failed passes the remedy's verification first, P2P under load included).
Each action holds the host's and the router's claim only while it runs (a fleet roll in progress makes it wait a
cycle), is said on one line, recorded in the watch's state file (which hosts it cordoned, since when, why, the
remedy tried), in the host's events (`deploy history`), and posted to the inventory's `notify:` webhook.
"""


from __future__ import annotations

import fcntl
import json
import os
import shlex
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator.errors import ConfigError, DeployError, LockHeld, RemoteError
from orchestrator.hardware.policy import Remedy, RemedyPlan, plan_remedy
from orchestrator.hardware.state import HardwareState
from orchestrator.inventory.models import Inventory
from orchestrator.local.files import open_no_follow, private_state_dir, read_private_file, write_file
from orchestrator.locks.claims import claim_fleet
from orchestrator.monitoring.events import Event
from orchestrator.monitoring.notify import Notifier, deliver
from orchestrator.remote.http import Transport
from orchestrator.router.session import RouterSession
from orchestrator.store.store import team_records

#: Hosts a cycle reads at once.
READ_PARALLEL = 8

Decision = Literal["cordon", "remedy", "verify", "return", "hold", "none"]
#: Runs a remedy on a drained host: (host, "restart" | "reboot", the kernel-log cursor of the reading it answers)
#: -> what it verified; raises DeployError when the remedy or its verification failed.
RemedyFn = Callable[[str, Remedy, str | None], str]
#: Runs a remedy's verification alone (no remedy) on a drained host -> what it verified; raises DeployError.
VerifyFn = Callable[[str], str]
#: Records one of a host's events (host, kind, detail): the ledger that `deploy history` reads.
RecordFn = Callable[[str, str, str], None]


@dataclass(frozen=True)
class Reading:
    """One host's health at one cycle: its GPUs' state (None: unreadable) and whether its server answers."""

    host: str
    hardware: HardwareState | None
    serving: bool
    error: str | None = None

    @property
    def fatal(self) -> bool:
        return self.hardware is not None and self.hardware.fatal

    def why(self) -> str:
        if self.hardware is None:
            return self.error or "sensors unreadable"
        worst = [f"{g.name}: {f.kind}{f' {f.code}' if f.code is not None else ''} ({f.action.value})"
                 for g in self.hardware.faulty for f in g.faults if f.severity == "fail"]
        if not worst:
            worst = [f"{g.name}: {f.kind}{f' {f.code}' if f.code is not None else ''} ({f.action.value})"
                     for g in self.hardware.faulty for f in g.faults if f.action.rank > 0]
        return "; ".join(worst) or "no fatal fault"

    def gpu(self) -> str:
        """The worst GPU's name, for the policy's lines."""
        if self.hardware is None or not self.hardware.faulty:
            return "the faulty GPU"
        return max(self.hardware.faulty, key=lambda g: g.action.rank).name


def decide(r: Reading, listed: bool, cordoned: bool, plan: RemedyPlan | None = None, tried: bool = False,
           failed: bool = False) -> Decision:
    """Pure: what the watch does with a host this cycle (`plan`: the policy's answer for its worst fault; None:
    drain on a fatal fault only; `tried`: a remedy already ran since it was cordoned; `failed`: that remedy or its
    verification failed). A host whose remedy failed and that now reads clean and serves is verified again before
    it returns: a failure only a load shows (a PCIe link below its capability under the copy matrix) reads clean
    while the host idles out of the router."""
    drains = plan.drains if plan is not None else r.fatal
    if drains and listed:
        return "cordon"
    if cordoned and not listed:
        if r.hardware is not None and not drains and r.serving:
            return "verify" if failed else "return"
        if plan is not None and plan.runs and not tried:
            return "remedy"
    return "hold" if cordoned else "none"


class WatchState:
    """The hosts this watch took out of the router (a 0600 JSON file per group): only those it puts back.

    Written before each action, not after it (issue 50): a cordon is recorded before the drain and a remedy before
    it runs, so a watch killed at any point leaves a record the next cycle acts on. The file also keeps the hosts
    the router listed at the last cycle and when that cycle ran: a listed-then-missing host with an open fault is
    the watch's own, and `deploy status group` tells a watch that stopped from one between cycles. The earlier
    format (the cordoned hosts alone) still reads."""

    def __init__(self, group: str, root: Path | None = None) -> None:
        self.path = (root or private_state_dir() / "watch") / f"{group}.json"
        self.lock_path = self.path.with_suffix(".lock")
        self.group, self.team = group, (None if root is not None else team_records())  # state/store.py

    def _document(self) -> dict[str, object]:
        # with a team store, a copy left here by a save the store missed is newer than the store's
        if self.team is not None and not self.path.exists():
            text = self.team.get("watch", self.group)
        else:
            text = read_private_file(self.path, "watch state file")
        if text is None:
            return {}
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise self._broken(f"not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise self._broken(f"a JSON {type(data).__name__}, not an object")
        return data

    def _broken(self, why: str) -> ConfigError:
        return ConfigError(f"watch state file {self.path}: {why}",
                           fix=f"fix or remove it (rm {shlex.quote(str(self.path))}); without it the watch owns only "
                               "hosts the router lists now, and a host it had cordoned is put back with "
                               "`deploy router add`")

    def load(self) -> dict[str, dict[str, str | float]]:
        data = self._document()
        entries = data.get("cordoned", {}) if "format" in data else data
        if not isinstance(entries, dict):
            raise self._broken(f"its cordoned hosts are a JSON {type(entries).__name__}, not an object")
        for host, entry in entries.items():
            if not isinstance(entry, dict):
                raise self._broken(f"the entry for {host} is a JSON {type(entry).__name__}, not an object")
        return entries

    def listed(self) -> set[str]:
        """The hosts the router listed at the last cycle."""
        found = self._document().get("listed", [])
        return {h for h in found if isinstance(h, str)} if isinstance(found, list) else set()

    def last_cycle(self) -> tuple[float, float, bool] | None:
        """(when the last cycle ended, the watch's interval, whether it loops: not `--once`), None when no cycle
        recorded it."""
        data = self._document()
        at, interval = data.get("at"), data.get("interval_s")
        if isinstance(at, int | float) and isinstance(interval, int | float):
            return float(at), float(interval), data.get("loop") is True
        return None

    def save(self, cordoned: dict[str, dict[str, str | float]], listed: set[str] | None = None,
             interval_s: float | None = None, loop: bool = False) -> None:
        doc: dict[str, object] = {"format": 2, "cordoned": cordoned, "at": time.time(), "loop": loop}
        if listed is None or interval_s is None:
            try:
                old = self._document()
            except DeployError:  # a broken file, or a team store lost mid-cycle: the put below says so
                old = {}
            listed = listed if listed is not None else self.listed() if old else set()
            interval_s = interval_s if interval_s is not None else old.get("interval_s")  # type: ignore[assignment]
        doc["listed"] = sorted(listed)
        if interval_s is not None:
            doc["interval_s"] = interval_s
        text = json.dumps(doc, indent=1, sort_keys=True)
        if self.team is not None:
            try:
                self.team.put("watch", self.group, text)
            except DeployError as err:  # the store was lost mid-cycle: the router already holds these hosts out
                self._write(text)
                hosts = ", ".join(sorted(cordoned)) or "none"
                raise RemoteError(f"the watch's record of the hosts it cordoned ({hosts}) could not be saved in the "
                                  f"team store: {err.what}",
                                  fix=f"those hosts stay out of the router; the record is kept in {self.path} on this "
                                      "machine and the watch's next start here reads it and saves it to the store "
                                      "once the store is back (docs/team.md)", step="watch") from None
            self.path.unlink(missing_ok=True)
            return
        self._write(text)

    def _write(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_file(self.path, text, mode=0o600)

    def hold_live(self) -> int:
        """Mark this watch as running (an exclusive flock, dropped by the kernel when the process dies, however it
        dies); LockHeld when another watch of the group runs. Returns the descriptor to keep open."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = open_no_follow(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600, what="watch lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LockHeld(f"another deploy watch of this group runs on this machine ({self.lock_path} is locked)",
                           fix="stop it first (systemctl stop, or Ctrl-C where it runs); one watch per group") from None
        return fd

    def running(self) -> bool:
        """Whether a watch of this group holds its live mark now."""
        try:
            fd = os.open(self.lock_path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)
        return False


@dataclass(frozen=True)
class Orphan:
    """A host a watch took out of the router while no watch of its group runs any more: nobody will put it back."""

    host: str
    since: str
    why: str
    last_cycle: str

    def text(self, group: str) -> str:
        return (f"{self.host} is out of the router, cordoned by a deploy watch of group {group} that is not running "
                f"(cordoned {self.since}: {self.why}; its last cycle {self.last_cycle}): start `deploy watch group "
                f"{group}` (its next cycle puts the host back or remedies it), or `deploy router add host "
                f"{self.host}` once it is fixed")


def orphaned(group: str, now: float | None = None) -> list[Orphan]:
    """The hosts of the group's watch record that no running watch owns: its watch looped and is gone (its live
    mark is free: killed, stopped or crashed). A watch run from a timer (`--once`) is not running between its
    cycles: its record is orphaned only past two of its intervals (at least 2 min)."""
    try:
        state = WatchState(group)
        cordoned = state.load()
    except DeployError:  # a broken record, or a team store out of reach: status still reads the hosts
        return []
    if not cordoned or state.running():
        return []
    last = state.last_cycle()
    now = time.time() if now is None else now
    # a watch of a team store may loop on another machine, whose live mark this machine cannot see: its record is
    # orphaned only past two of its intervals, as a timer's is
    by_time = last is not None and (not last[2] or state.team is not None)
    if by_time and last is not None and now - last[0] < max(2 * last[1], 120.0):
        return []
    when = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(last[0])) if last is not None else "unknown"
    return [Orphan(h, str(e.get("since", "?")), str(e.get("why", "?")), when) for h, e in sorted(cordoned.items())]


@dataclass
class Watch:
    inventory: Inventory
    hosts: list[str]
    read: Callable[[str], Reading]
    say: Callable[[str], None]
    state: WatchState
    drain_timeout_s: float = 120.0
    remedy: RemedyFn | None = None  # None: no remedy runs (the policy's remedies are held as manual)
    record: RecordFn | None = None
    verify: VerifyFn | None = None  # None: a host whose remedy failed returns once it reads clean and serves
    #: Posts the notify: webhook's events off the cycle's thread (None: posted in line, bounded in time).
    notifier: Notifier | None = None
    interval_s: float | None = None  # recorded with each cycle: `deploy status group` tells a stopped watch
    loop: bool = False  # run_watch's, not `--once`: recorded too
    #: How the router, its workers and the webhook are reached (None: real HTTP; a handler in unit tests).
    http: Transport | None = None
    _listed: set[str] = field(default_factory=set)

    def _save(self, cordoned: dict[str, dict[str, str | float]]) -> None:
        """Record the cordoned hosts now, before the action that needs the record (OSError: not recorded)."""
        self.state.save(cordoned, self._listed, self.interval_s, self.loop)

    def plan(self, host: str, r: Reading, others_out: list[str]) -> RemedyPlan:
        if r.hardware is None:
            return RemedyPlan("none")
        return plan_remedy(r.hardware.action, self.inventory.health, host=host, others_out=others_out, gpu=r.gpu())

    def cycle(self) -> dict[str, Decision]:
        """Read every host, act where the readings say; returns each host's decision. The hosts are read at once
        (one status round trip each, in parallel as a fleet status does): a cycle's reads of N hosts cost about one
        read, not N, before the first action (a watch restarted after a kill acts that much sooner)."""
        with ThreadPoolExecutor(max_workers=max(1, min(READ_PARALLEL, len(self.hosts))),
                                thread_name_prefix="watch-read") as pool:
            readings = dict(zip(self.hosts, pool.map(self.read, self.hosts), strict=True))
        side = RouterSession(self.inventory, self.drain_timeout_s, http=self.http)
        cordoned = self.state.load()
        was_listed = self.state.listed()
        listed: set[str] = set()
        if side.base is not None:
            with side.client(metrics=False) as client:
                listed = {w.url for w in client.list_workers()}
        self._listed = {h for h, u in side.urls.items() if u in listed}
        done: dict[str, Decision] = {}
        for host, r in readings.items():
            url = side.urls.get(host)
            out = sorted(h for h, u in side.urls.items() if h != host and u not in listed)
            plan = self.plan(host, r, out)
            is_listed = url is not None and url in listed
            self._own(host, r, plan, url, is_listed, host in was_listed, cordoned)
            entry = cordoned.get(host, {})
            interrupted = bool(entry.get("remedying"))  # a watch stopped during the remedy: it did not finish
            decision = decide(r, is_listed, host in cordoned, plan, bool(entry.get("remedy")) and not interrupted,
                              bool(entry.get("failed")) or interrupted)
            done[host] = decision
            if decision == "cordon" and url is not None:
                if self._act(host, url, side, cordoned, r, out=True) and plan.runs:
                    listed.discard(url)
                    done[host] = self._remedy(host, url, side, cordoned, r, plan)
                elif host in cordoned and plan.why:
                    self.say(f"{host}: {plan.why}")
            elif decision == "remedy" and url is not None:
                done[host] = self._remedy(host, url, side, cordoned, r, plan)
            elif decision == "verify" and url is not None:
                done[host] = self._verify(host, url, side, cordoned, r)
            elif decision == "return" and url is not None:
                self._act(host, url, side, cordoned, r, out=False)
            elif decision == "hold":
                self.say(f"{host}: still out of the router (cordoned {entry.get('since', '?')}: "
                         f"{entry.get('why', '?')}); now: {self._now(r, plan, entry)}")
            elif r.fatal:
                self.say(f"{host}: fatal GPU fault ({r.why()}), not a listed router worker: nothing to drain")
        self._save(cordoned)
        return done

    def _own(self, host: str, r: Reading, plan: RemedyPlan, url: str | None, is_listed: bool, was_listed: bool,
             cordoned: dict[str, dict[str, str | float]]) -> None:
        """Reconcile the record with the router before deciding: a host the router listed at the last cycle and
        that is missing now, with an open fault, is this watch's own (a watch stopped between its drain and its
        record, or anyone's drain of a faulty host); a recorded host the router lists again with nothing to drain
        was put back by another hand, and its record is closed."""
        if host not in cordoned and not is_listed and was_listed and url is not None and plan.drains:
            cordoned[host] = {"since": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "why": r.why(), "url": url,
                              "adopted": "listed at the last cycle, out of the router now with an open fault"}
            self._save(cordoned)
            self.say(f"{host}: out of the router since the last cycle with an open fault ({r.why()}): the watch "
                     "owns it now (remedy, verify, return)")
            self._event(host, "cordoned", f"{r.why()}: found out of the router, owned by the watch")
        elif host in cordoned and is_listed and not plan.drains:
            cordoned.pop(host)
            self._save(cordoned)
            self.say(f"{host}: back in the router and reads clean: the watch's cordon record is closed")

    @staticmethod
    def _now(r: Reading, plan: RemedyPlan, entry: dict[str, str | float]) -> str:
        if entry.get("failed"):
            return f"{r.why()}; the {entry.get('remedy')} remedy failed: {entry['failed']}"
        if entry.get("remedy") and plan.drains:
            return f"{r.why()}; still faulty after its {entry['remedy']} remedy: it needs hardware service"
        if plan.drains:
            return f"{r.why()}; {plan.why}" if plan.why else r.why()
        return "clean, not serving"

    def _event(self, host: str, kind: str, detail: str) -> None:
        if self.record is not None:
            try:
                self.record(host, kind, detail)
            except DeployError as err:  # the event is also said and posted: a full disk must not stop the watch
                self.say(f"{host}: event not recorded in the ledger: {err.what}")

    def _remedy(self, host: str, url: str, side: RouterSession, cordoned: dict[str, dict[str, str | float]],
                r: Reading, plan: RemedyPlan) -> Decision:
        """Run the allowed remedy on a host this watch drained, then return it at once when it reads clean."""
        entry = cordoned[host]
        if self.remedy is None:
            self.say(f"{host}: no remedy runner: remedy it yourself (docs/hardware.md)")
            return "hold"
        began = time.monotonic()
        self.say(f"{host}: remedy: {plan.remedy} ({r.why()})")
        self._event(host, "remedy", f"{plan.remedy}: {r.why()}")
        try:
            with claim_fleet([host], f"deploy watch (remedy {host})", router=False):
                entry["remedy"] = plan.remedy
                entry["remedying"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")  # recorded before it runs
                entry.pop("failed", None)
                self._save(cordoned)
                verified = self.remedy(host, plan.remedy, r.hardware.cursor if r.hardware is not None else None)
        except LockHeld as err:
            entry.pop("remedy", None)
            entry.pop("remedying", None)
            self.say(f"{host}: remedy waits for the next cycle: {err.what}")
            return "hold"
        except OSError as err:  # the record could not be written: the remedy did not run
            entry.pop("remedy", None)
            entry.pop("remedying", None)
            self.say(f"{host}: remedy NOT run: the watch state file cannot be written ({err.strerror})")
            return "hold"
        except DeployError as err:
            entry.pop("remedying", None)
            entry["failed"] = err.what
            self._save(cordoned)
            line = (f"{host}: remedy FAILED ({plan.remedy}): {err.what}; the host stays out of the router: "
                    f"{err.fix or 'see deploy doctor host ' + host}; the watch returns it once its sensors read "
                    "clean and it serves")
            self.say(line)
            self._event(host, "remedy-failed", f"{plan.remedy}: {err.what}")
            return "hold"
        took = time.monotonic() - began
        entry.pop("remedying", None)
        entry["remedied"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self._save(cordoned)
        self.say(f"{host}: remedied ({plan.remedy}) in {took:.1f} s: {verified}")
        self._event(host, "remedied", f"{plan.remedy} in {took:.1f} s: {verified}")
        again = self.read(host)
        after = self.plan(host, again, [])
        if decide(again, False, True, after, True) == "return":
            self._act(host, url, side, cordoned, again, out=False)
            return "return"
        self.say(f"{host}: still out of the router after its remedy: {self._now(again, after, entry)}")
        return "hold"

    def _verify(self, host: str, url: str, side: RouterSession, cordoned: dict[str, dict[str, str | float]],
                r: Reading) -> Decision:
        """A host whose remedy failed reads clean and serves: run the remedy's verification (P2P under load
        included) before it goes back; it stays out, said each cycle, while that fails."""
        entry = cordoned[host]
        if self.verify is not None:
            try:
                with claim_fleet([host], f"deploy watch (verify {host})", router=False):
                    verified = self.verify(host)
            except LockHeld as err:
                self.say(f"{host}: verification waits for the next cycle: {err.what}")
                return "hold"
            except DeployError as err:
                self.say(f"{host}: still out of the router: it reads clean and serves, but the verification its "
                         f"failed {entry.get('remedy')} remedy needs fails: {err.what}; "
                         f"{err.fix or 'see deploy doctor host ' + host}")
                return "hold"
            entry.pop("failed", None)
            entry.pop("remedying", None)
            self._save(cordoned)
            self.say(f"{host}: verified: {verified}")
            self._event(host, "verified", verified)
        self._act(host, url, side, cordoned, r, out=False)
        return "return"

    def _act(self, host: str, url: str, side: RouterSession, cordoned: dict[str, dict[str, str | float]],
             r: Reading, *, out: bool) -> bool:
        """Cordon (`out`) or return one host; False when it did not happen (said)."""
        verb = "cordon" if out else "return"
        before = dict(cordoned[host]) if host in cordoned else None
        try:
            # metrics=False: the watch's drain waits on the server's own gauges, not on smg's count (as before).
            with claim_fleet([host], f"deploy watch ({verb} {host})", router=True), \
                    side.client(metrics=False) as client:
                # Recorded before the router is touched: a watch stopped mid-drain leaves a host its next cycle owns.
                cordoned[host] = ({"since": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "why": r.why(), "url": url,
                                   "phase": "cordoning"} if out else {**cordoned.get(host, {}), "phase": "returning"})
                self._save(cordoned)
                drainer = side.drain_with(self.say, client=client)
                if out:
                    note = drainer.drain(url).note
                else:
                    took = drainer.restore(url, side.worker_keys.get(host))
                    note = f"added back, healthy after {took:.1f} s"
        except LockHeld as err:
            self.say(f"{host}: {verb} waits for the next cycle: {err.what}")
            return False
        except OSError as err:
            self._put(cordoned, host, before)
            self.say(f"{host}: NOT {'cordoned' if out else 'returned'}: the watch state file cannot be written "
                     f"({err.strerror}), and the watch records a host before it acts on it")
            return False
        except DeployError as err:
            # Removed, and only the wait for its requests failed: the host is out, and the watch's own.
            if out and host in cordoned and not self._still_listed(side, url):
                cordoned[host].pop("phase", None)
                self._save(cordoned)
                self.say(f"{host}: out of the router, its drain did not finish: {err.what}")
                return True
            self._put(cordoned, host, before)
            self._save(cordoned)
            self.say(f"{host}: NOT {'cordoned' if out else 'returned'}: {err.what}")
            return False
        now = time.time()
        if out:
            cordoned[host].pop("phase", None)
            self._listed.discard(host)
            self._save(cordoned)
            summary = f"{host} cordoned: out of the router ({r.why()})"
            self.say(f"{host}: cordoned ({r.why()}): {note}")
            self._event(host, "cordoned", f"{r.why()}: {note}")
        else:
            cordoned.pop(host, None)
            self._listed.add(host)
            self._save(cordoned)
            summary = f"{host} returned to the router: its GPUs read clean and it serves"
            self.say(f"{host}: returned: {note}")
            self._event(host, "returned", note)
        events = [Event("gpu_fault", host, None, now, summary=summary, description=summary,
                        diagnose=f"deploy doctor host {host}", severity="critical", resolved=not out)]
        if self.notifier is not None:
            self.notifier.submit(self.inventory.notify, events)
        else:
            deliver(self.inventory.notify, events, self.say, http=self.http)
        return True

    @staticmethod
    def _put(cordoned: dict[str, dict[str, str | float]], host: str, entry: dict[str, str | float] | None) -> None:
        if entry is None:
            cordoned.pop(host, None)
        else:
            cordoned[host] = entry

    @staticmethod
    def _still_listed(side: RouterSession, url: str) -> bool:
        """Whether the router lists `url` now (True when it cannot say: the record is not kept on a guess)."""
        try:
            with side.client(metrics=False) as client:
                return url in {w.url for w in client.list_workers()}
        except DeployError:
            return True


def run_watch(watch: Watch, *, once: bool, interval_s: float, for_s: float | None,
              stop: threading.Event | None = None) -> int:
    """Cycle until `for_s` passed (or forever), `interval_s` apart; 1 when the last cycle left a fatal fault."""
    stop = stop or threading.Event()
    began = time.monotonic()
    watch.interval_s, watch.loop = interval_s, not once
    live = watch.state.hold_live()  # one watch per group; `deploy status group` sees this one running
    try:
        while True:
            decisions = watch.cycle()
            if once or stop.is_set() or (for_s is not None and time.monotonic() - began + interval_s > for_s):
                return 1 if any(d in ("cordon", "hold") for d in decisions.values()) else 0
            stop.wait(interval_s)
    finally:
        os.close(live)
