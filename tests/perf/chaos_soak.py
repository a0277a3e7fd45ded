"""Chaos soak: random faults during fleet rolls behind the managed router, each followed by the recovery an operator
would use, with the fleet's invariants checked over SSH (never through deploy's own report) after every step.

    python tests/perf/chaos_soak.py [--hosts 4] [--faults 10] [--seed 1 [--seed 2 ...]] [--first 60] [--clients 2]
                                    [--minutes M] [--fault NAME ...] [--keep] [--router smg|sglang-router]

Starts `--hosts` simulated hosts (a site template, so the first `up` is short), converges them as group `prod` with
the router managed by `deploy up` on the first host, starts `--clients` streaming clients through the router, then,
for each `--seed` in turn on that same site (a site costs minutes on a small machine: the faults are what is
measured), `--faults` times: picks a fault (seeded), injects it around a fleet roll, a single-host roll or a tune on
one host (`deploy tune`, the soak's small preset: one rolled point, two concurrencies), runs the recovery an operator
would (nothing when every command of the step exited 0; else `tune --resume` for an unfinished tune, then `roll
group --resume`, else `up group`), and checks:

- every host serves (`/health` 200 from the container itself);
- each server's command line is exactly the unit of the release the host's `current` link names, and that release
  is the one `deploy status` reports;
- the router lists exactly the hosts that serve;
- no lease is left on any host, and no bench process;
- no secret (the fleet's API key) in any output deploy printed or in a world-readable file under /etc/sglang;
- a router change (`router-kill-PHASE`: 0.3.2 → smg, or an smg flag) killed as a phase of its staging path began
  is completed or undone by the recovery's `up group` (the router invariant above holds after it);
- a `deploy watch` killed mid-cordon or mid-remedy (SIGKILL), or posting to a webhook that never answers: the
  next watch (or the same one) puts the faulty host back in the router or remedies it within one interval plus the
  remedy (plus a minute for the cycle's reads and the add-back's health wait); said as a violation otherwise;
- every tune's record and report match the host: a tune that said "restored" left the host on its original release
  (read back right after it exited, before any recovery); a finished tune's record names the release the host
  runs; no command other than the tune succeeded on its host while the tune ran.

Prints each fault with its seed, its recovery, the seconds until every host served again and the step's own
seconds, every invariant violation, and every failed client request with its explanation: the event of its step it
fell in (tests/perf/soak_explain.py: an operator's router restart, a container rebooted without a drain), or
"unexplained". Then per seed and in all: faults, violations, failed requests by fault and cause. Bounded: `--faults`
faults per seed, each roll with its own timeout; `--minutes M` starts no new fault after M minutes from the first
fault, each seed its equal share (the summary is still printed). The temporary folder (the site, its logs and
releases) is removed at the end unless `--keep`. Exit 1 when any invariant was violated or a failed request is
unexplained. Run as root. A measurement, not a test; a violation it finds becomes a regression test.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from fleet_canary_roll import Clients, Phase  # noqa: E402  (this directory: the script's own)
from hardware_faults import UnitProcess, wait  # noqa: E402
from soak_explain import UNEXPLAINED, Window, explain  # noqa: E402

from simulator.manager.lifecycle import sim_down, sim_up  # noqa: E402
from tests.e2e import site_template  # noqa: E402
from tests.e2e.conftest import DeployEnv, Result, make_fleet_env  # noqa: E402

GROUP = "prod"
ROLL_TIMEOUT_S = 900
SERVE_TIMEOUT_S = 240.0
#: The flag every roll changes; each roll takes the next value, so every roll is a real change.
KNOB = "num-continuous-decode-steps"
VALUES = (2, 4, 16)  # not 8: the profile's own value, which would make the first roll a no-op
#: The soak's tune: one rolled point (KNOB=4) beside the current flags, two concurrencies, one confirmation run:
#: about six bench runs of the small preset below and two rolls, so a tune fault costs about what a fleet roll does.
TUNE_PRESET = "soak-tune"
TUNE_ARGS = ("--slo", "ttft_p99<=2.5s,tpot_p99<=200ms", "--over", f"{KNOB}=4", "--range", "16:32:16",
             "--preset", TUNE_PRESET, "--confirm", "1")
PRESET = {"dataset_name": "random-ids", "random_input_len": 32, "random_output_len": 96, "random_range_ratio": 1.0,
          "num_prompts": 16, "request_rate": "inf"}


@dataclass
class Step:
    fault: str
    host: str | None
    detail: str
    recovery: list[str] = field(default_factory=list)
    serving_after_s: float | None = None
    violations: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)  # each "what the client saw -> why"
    unexplained: int = 0
    took_s: float = 0.0
    #: the fault itself changed the fleet as an operator would (a host taken out of the router on purpose): the
    #: recovery runs even when every command exited 0
    operator_changed: bool = False


@dataclass
class Tune:
    info: Any
    proc: subprocess.Popen[str]
    before: set[Path]  # the tune records that existed before it started: its own is the new one
    tune_id: str | None = None
    rc: int | None = None
    text: str = ""


@dataclass
class Soak:
    env: DeployEnv
    infos: list[Any]
    rng: random.Random
    api_key: str
    outputs: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    value_index: int = 0
    tunes: list[Tune] = field(default_factory=list)  # the tunes this step started (recovered and checked after it)
    router_index: int = 0  # router changes made so far (router_change_killed)
    router_package: str = "sglang-router"  # what the inventory's router section names now
    early: list[str] = field(default_factory=list)  # violations seen during the step, before its recovery
    router_url: str = ""
    windows: list[Window] = field(default_factory=list)  # this step's events that may fail a client request
    exits: list[int] = field(default_factory=list)  # every deploy process of this step, its exit status

    def window(self, cause: str) -> Window:
        """An event of this step that may fail client requests (an operator's router restart, the router's CT
        rebooted): a failure during it, or within SETTLE_S after it, is explained by it."""
        w = Window(cause, time.monotonic())
        self.windows.append(w)
        return w

    # -------------------------------------------------------------------------------- the tool, as operators run it
    def write_router(self, package: str, flags: dict[str, Any] | None = None) -> None:
        """The inventory's router section: managed on the first host, the group's hosts its workers."""
        text = f"router:\n  package: {package}\n  runs_on: {self.infos[0].name}\n  workers: {GROUP}\n"
        if flags:
            text += "  flags:\n" + "".join(f"    {k}: {v}\n" for k, v in flags.items())
        (self.env.inventory / "router.yaml").write_text(text)

    def deploy(self, *args: str, timeout: float = ROLL_TIMEOUT_S) -> Result:
        res = self.env.run(*args, timeout=timeout)
        self.outputs.append(res.text)
        self.exits.append(res.rc)
        return res

    def roll_argv(self) -> list[str]:
        self.value_index += 1
        value = VALUES[self.value_index % len(VALUES)]
        return ["roll", "group", GROUP, "--set", f"{KNOB}={value}", "--canary", "1", "--max-unavailable", "1",
                "--skip-bench"]

    def start_roll(self) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "orchestrator", *self.roll_argv()]
        return subprocess.Popen(argv, env=self.env.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

    def finish(self, proc: subprocess.Popen[str], timeout: float = ROLL_TIMEOUT_S) -> int:
        out, _ = proc.communicate(timeout=timeout)
        self.outputs.append(out or "")
        self.exits.append(proc.returncode)
        return proc.returncode

    def start(self, *args: str) -> subprocess.Popen[str]:
        """`deploy ARGS` in the background as its own process group (so a signal reaches it as Ctrl-C would)."""
        return subprocess.Popen([sys.executable, "-m", "orchestrator", *args], env=self.env.env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def host_roll_argv(self, host: str) -> list[str]:
        argv = self.roll_argv()
        return ["roll", "host", host, *argv[3:5], "--skip-bench"]

    # ----------------------------------------------------------------------------------------------- tunes
    def tunes_dir(self) -> Path:
        return Path(self.env.env["DEPLOY_STATE_DIR"]) / "tunes"

    def start_tune(self, info: Any) -> Tune:
        before = set(self.tunes_dir().glob("t-*.json")) if self.tunes_dir().is_dir() else set()
        proc = self.start("--json", "tune", "host", info.name, *TUNE_ARGS)
        tune = Tune(info, proc, before)
        self.tunes.append(tune)
        return tune

    def record(self, tune: Tune) -> dict[str, Any] | None:
        """The tune's record on this machine (found as the file it created), or None before it wrote one."""
        if tune.tune_id is None and self.tunes_dir().is_dir():
            new = sorted(set(self.tunes_dir().glob("t-*.json")) - tune.before)
            if new:
                tune.tune_id = new[0].stem
        if tune.tune_id is None:
            return None
        try:
            return dict(json.loads((self.tunes_dir() / f"{tune.tune_id}.json").read_text()))
        except (OSError, json.JSONDecodeError):
            return None

    def current_release(self, info: Any) -> str:
        return self.in_ct(info, "basename $(readlink -f /var/lib/deploy/current)").stdout.strip()

    def end_tune(self, tune: Tune, timeout: float = ROLL_TIMEOUT_S) -> int:
        """Wait for the tune, then check at once what it said against the host (before any recovery runs)."""
        rc = self.finish(tune.proc, timeout)
        tune.rc, tune.text = rc, self.outputs[-1]
        rec = self.record(tune) or {}
        now = self.current_release(tune.info)
        original = rec.get("original_release")
        if "was restored" in tune.text and original and now != original:
            self.early.append(f"{tune.info.name}: tune {tune.tune_id} said the original release {original} was "
                              f"restored, the host runs {now}")
        if rc == 0:
            try:
                final = json.loads(tune.text[tune.text.index("{"):]).get("final_release")
            except (ValueError, AttributeError):
                final = None
                self.early.append(f"{tune.info.name}: tune {tune.tune_id} exited 0 and printed no JSON")
            if final and final != now:
                self.early.append(f"{tune.info.name}: tune {tune.tune_id} reported release {final}, the host runs "
                                  f"{now}")
        return rc

    def recover_tunes(self, step: Step) -> None:
        """An unfinished tune is resumed, as its error's fix says."""
        for tune in self.tunes:
            rec = self.record(tune)
            if rec is None or rec.get("phase") == "done":
                continue
            res = self.deploy("--json", "tune", "host", tune.info.name, "--resume", str(tune.tune_id))
            step.recovery.append(f"tune --resume {tune.tune_id}: exit {res.rc}")

    def tune_invariants(self) -> list[str]:
        problems, self.early = list(self.early), []
        for tune in self.tunes:
            rec = self.record(tune)
            if rec is None:
                continue
            if rec.get("phase") != "done":
                problems.append(f"{tune.info.name}: tune {tune.tune_id} is still {rec.get('phase')} after its "
                                f"--resume")
                continue
            now = self.current_release(tune.info)
            if rec.get("final_release") not in (None, now) and tune is self.last_tune_on(tune.info):
                problems.append(f"{tune.info.name}: tune {tune.tune_id}'s record says release "
                                f"{rec.get('final_release')}, the host runs {now}")
        self.tunes = []
        return problems

    def last_tune_on(self, info: Any) -> Tune | None:
        return next((t for t in reversed(self.tunes) if t.info is info), None)

    def fault(self, host: str, *knobs: str, ct: bool = False) -> None:
        args = ["sim", "fault", host, *(["--ct", "120"] if ct else []), *knobs]
        res = self.deploy(*args, timeout=60)
        if res.rc != 0:
            raise RuntimeError(f"deploy {' '.join(args)}: {res.text[-500:]}")

    # ------------------------------------------------------------------------------------- the hosts, over SSH
    def ssh(self, info: Any, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        argv = ["ssh", "-i", str(info.key_file), "-p", str(info.ssh_port), "-o", "BatchMode=yes",
                "-o", f"UserKnownHostsFile={info.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                f"root@{info.address}", command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def in_ct(self, info: Any, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.ssh(info, f"pct exec 120 -- bash -c {shlex.quote(command)}", timeout=timeout)

    def serves(self, info: Any) -> bool:
        res = self.in_ct(info, "curl -s -o /dev/null -w '%{http_code}' -m 5 "
                               "http://$(hostname -I | awk '{print $1}'):8000/health || "
                               "curl -s -o /dev/null -w '%{http_code}' -m 5 http://127.0.0.1:8000/health")
        return res.stdout.strip().endswith("200")

    def wait_serving(self, since: float) -> float | None:
        deadline = time.monotonic() + SERVE_TIMEOUT_S
        while time.monotonic() < deadline:
            if all(self.serves(i) for i in self.infos):
                return time.monotonic() - since
            time.sleep(2)
        return None

    # ---------------------------------------------------------------------------------------------- invariants
    def invariants(self) -> list[str]:
        problems: list[str] = []
        status = self.deploy("--json", "status", "group", GROUP, timeout=300)
        reported: dict[str, str | None] = {}
        try:
            for h in json.loads(status.stdout).get("hosts", []):
                reported[h["host"]] = (h.get("report") or h).get("release")
        except (json.JSONDecodeError, AttributeError):
            problems.append(f"deploy status group {GROUP} printed no JSON: {status.text[-300:]}")
        serving: list[str] = []
        for info in self.infos:
            if not self.serves(info):
                problems.append(f"{info.name}: /health is not 200")
                continue
            serving.append(info.name)
            check = self.in_ct(info, (
                "rid=$(basename $(readlink -f /var/lib/deploy/current)); echo \"release $rid\"; "
                "pid=$(systemctl show -p MainPID --value sglang); "
                "tr '\\0' '\\n' < /proc/$pid/cmdline | base64 -w0; echo; "
                "base64 -w0 /var/lib/deploy/current/sglang.service; echo; "
                "find /etc/sglang /var/lib/deploy/current -perm -o+r -type f -exec cat {} + 2>/dev/null "
                f"| grep -c -F {shlex.quote(self.api_key)} || true"))
            lines = check.stdout.splitlines()
            if len(lines) < 4:
                problems.append(f"{info.name}: could not read the running server: {check.stderr[-200:]}")
                continue
            release = lines[0].removeprefix("release ")
            running = [a for a in b64(lines[1]).split("\n") if a]
            unit, leaks = exec_start(b64(lines[2])), lines[-1].strip()
            if running != unit:
                problems.append(f"{info.name}: the server runs `{shlex.join(running)}`, release {release}'s unit "
                                f"says `{shlex.join(unit)}`")
            if reported.get(info.name) not in (None, release):
                problems.append(f"{info.name}: deploy status says release {reported.get(info.name)}, the host's "
                                f"current link names {release}")
            if leaks not in ("", "0"):
                problems.append(f"{info.name}: the API key is in {leaks} world-readable file(s)")
            lease = self.ssh(info, "cat /var/lib/deploy/deploy.lease 2>/dev/null; "
                                   "pct exec 120 -- bash -c 'ls /var/lib/deploy/runs 2>/dev/null'")
            if lease.stdout.strip():
                problems.append(f"{info.name}: left behind: {lease.stdout.strip()[:200]}")
        problems += self.router_matches(serving)
        problems += self.tune_invariants()
        for text in self.outputs:
            if self.api_key in text:
                problems.append("the API key appears in deploy's output")
                break
        self.seen = list(self.outputs) if problems else []  # what deploy printed, to read a violation by
        self.outputs.clear()
        return problems

    def router_matches(self, serving: list[str]) -> list[str]:
        res = self.deploy("--json", "router", "status", GROUP, timeout=120)
        try:
            doc = json.loads(res.stdout)
        except json.JSONDecodeError:
            return [f"deploy router status printed no JSON: {res.text[-300:]}"]
        listed = sorted(str(w.get("host")) for w in doc.get("workers", []) if w.get("healthy", w.get("is_healthy")))
        if listed != sorted(serving):
            return [f"the router lists {listed}, the hosts that serve are {sorted(serving)}"]
        return []

    # ------------------------------------------------------------------------------------------ the recoveries
    def recover(self, step: Step) -> None:
        """What an operator does after a fault: nothing when every command of the step exited 0 (the invariants
        then hold the commands themselves to a right fleet); else resume a tune or the roll, else converge the group
        (router included)."""
        if all(rc == 0 for rc in self.exits) and not step.operator_changed:
            step.recovery.append(f"none: all {len(self.exits)} command(s) exited 0")
            return
        self.recover_tunes(step)
        resume = self.deploy("roll", "group", GROUP, "--resume", "--skip-bench")
        step.recovery.append(f"roll --resume: exit {resume.rc}")
        if resume.rc != 0:
            up = self.deploy("up", "group", GROUP, "--skip-bench")
            step.recovery.append(f"up group: exit {up.rc}")


def b64(text: str) -> str:
    return base64.b64decode(text.strip() or b"").decode(errors="replace")


def exec_start(unit: str) -> list[str]:
    """The argv of a unit file's ExecStart= (continuation lines joined, systemd's own quoting rules are shell-like
    for what the renderer writes)."""
    joined = unit.replace("\\\n", " ")
    line = next((ln for ln in joined.splitlines() if ln.startswith("ExecStart=")), "ExecStart=")
    return shlex.split(line.split("=", 1)[1].lstrip("@-:+!"))


# ---------------------------------------------------------------------------------------------------- faults
def signal_mid_roll(sig: signal.Signals) -> Callable[[Soak, Step], None]:
    def inject(soak: Soak, step: Step) -> None:
        proc = soak.start_roll()
        delay = soak.rng.uniform(1.0, 30.0)
        sent = False
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, sig)
            sent = True
        rc = soak.finish(proc)
        step.detail = (f"{sig.name} after {delay:.1f} s: exit {rc}" if sent
                       else f"{sig.name} not sent: the roll ended within {delay:.1f} s (exit {rc})")
    return inject


def host_knob(knob: str, clear: str) -> Callable[[Soak, Step], None]:
    def inject(soak: Soak, step: Step) -> None:
        host = soak.rng.choice(soak.infos).name
        step.host = host
        soak.fault(host, knob)
        try:
            rc = soak.finish(soak.start_roll())
        finally:
            soak.fault(host, clear)
        step.detail = f"{knob} on {host}: roll exit {rc}"
    return inject


def server_knob(*knobs: str) -> Callable[[Soak, Step], None]:
    """A fault of the candidate only (match= the new flag value): the roll must roll that host back."""
    def inject(soak: Soak, step: Step) -> None:
        host = soak.rng.choice(soak.infos).name
        step.host = host
        argv = soak.roll_argv()
        soak.value_index -= 1  # start_roll takes the same value again
        match = f"match=--{KNOB} {argv[4].split('=')[1]}"
        soak.fault(host, *knobs, match, ct=True)
        try:
            rc = soak.finish(soak.start_roll())
        finally:
            soak.fault(host, *(f"{k.split('=')[0]}=none" for k in knobs), ct=True)
        step.detail = f"{' '.join(knobs)} on {host}'s candidate: roll exit {rc}"
    return inject


def container_reboot(soak: Soak, step: Step) -> None:
    info = soak.rng.choice(soak.infos)
    step.host = info.name
    proc = soak.start_roll()
    time.sleep(soak.rng.uniform(1.0, 15.0))
    window = soak.window(f"CT 120 of {info.name} rebooted with no drain ("
                         + ("it runs the router: connections refused until smg listens again)" if info is soak.infos[0]
                            else "a worker: its requests in flight cut, new ones sent to it until the router's "
                                 "health check marks it down)"))
    res = soak.ssh(info, "pct reboot 120 || (pct stop 120 && pct start 120)", timeout=180)
    window.close()
    rc = soak.finish(proc)
    step.detail = f"CT 120 of {info.name} rebooted during a roll (rc {res.returncode}): roll exit {rc}"


def router_restart(soak: Soak, step: Step) -> None:
    info = soak.infos[0]
    step.host = info.name
    proc = soak.start_roll()
    time.sleep(soak.rng.uniform(1.0, 15.0))
    window = soak.window("the operator's `systemctl restart sglang-router` (no handover: streams in flight end "
                         "with smg's graceful stop, new connections are refused until the new smg listens)")
    soak.in_ct(info, "systemctl restart sglang-router")
    window.close()
    rc = soak.finish(proc)
    step.detail = f"router restarted during a roll: roll exit {rc}"


def router_remove_mid_roll(soak: Soak, step: Step) -> None:
    """An operator takes a host out of the router while a fleet roll runs: refused while the roll holds the router
    (one claim for every command that changes it), or, once the roll ended, done; either way the recovery (`up
    group`) must put every serving host back."""
    info = soak.rng.choice(soak.infos)
    step.host = info.name
    proc = soak.start_roll()
    time.sleep(soak.rng.uniform(1.0, 20.0))
    other = soak.deploy("router", "remove", info.name, timeout=300)
    step.operator_changed = other.rc == 0  # out of the router on purpose: `up group` puts it back
    rc = soak.finish(proc)
    step.detail = f"router remove {info.name} during a roll: exit {other.rc}; roll exit {rc}"


def up_group_mid_roll(soak: Soak, step: Step) -> None:
    """`deploy up group` started while a fleet roll runs: refused by the roll's claims (or it converges, once the
    roll ended); the roll itself must finish or roll back as if it were alone."""
    proc = soak.start_roll()
    time.sleep(soak.rng.uniform(1.0, 20.0))
    other = soak.deploy("up", "group", GROUP, "--skip-bench")
    rc = soak.finish(proc)
    step.detail = f"up group during a roll: exit {other.rc}; roll exit {rc}"


def overlapping_rolls(soak: Soak, step: Step) -> None:
    first = soak.start_roll()
    time.sleep(soak.rng.uniform(0.5, 5.0))
    second = soak.start_roll()
    step.detail = f"two rolls at once: exits {soak.finish(first)} and {soak.finish(second)}"


def signal_mid_host_roll(sig: signal.Signals) -> Callable[[Soak, Step], None]:
    """A single-host roll (no router drain: the operator's plain `deploy roll host X`) stopped by a signal."""
    def inject(soak: Soak, step: Step) -> None:
        info = soak.rng.choice(soak.infos)
        step.host = info.name
        proc = soak.start(*soak.host_roll_argv(info.name))
        delay = soak.rng.uniform(1.0, 25.0)
        try:
            proc.wait(timeout=delay)
            sent = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, sig)
            sent = True
        rc = soak.finish(proc)
        step.detail = (f"roll host {info.name}: {sig.name} after {delay:.1f} s: exit {rc}" if sent
                       else f"roll host {info.name} ended within {delay:.1f} s (exit {rc}), no {sig.name}")
    return inject


def signals_mid_tune(*sigs: signal.Signals) -> Callable[[Soak, Step], None]:
    """A tune stopped by one signal, or by a second one soon after the first (Ctrl-C twice, as an impatient
    operator does while the tune restores the original release)."""
    def inject(soak: Soak, step: Step) -> None:
        info = soak.rng.choice(soak.infos)
        step.host = info.name
        tune = soak.start_tune(info)
        delay = soak.rng.uniform(3.0, 60.0)
        sent: list[str] = []
        try:
            tune.proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            for n, sig in enumerate(sigs):
                if n:
                    time.sleep(soak.rng.uniform(0.2, 3.0))
                if tune.proc.poll() is not None:
                    break
                os.killpg(tune.proc.pid, sig)
                sent.append(sig.name)
        rc = soak.end_tune(tune)
        last = (tune.text.strip().splitlines() or [""])[-1][:160]
        step.detail = (f"tune on {info.name}: {'+'.join(sent) or 'no signal'} after {delay:.1f} s: exit {rc} "
                       f"({last})")
    return inject


def command_during_tune(kind: str) -> Callable[[Soak, Step], None]:
    """Another command on a host while a tune owns it: it must be refused and change nothing, and the tune must
    go on measuring its own release."""
    def inject(soak: Soak, step: Step) -> None:
        info = soak.rng.choice(soak.infos)
        step.host = info.name
        tune = soak.start_tune(info)
        time.sleep(soak.rng.uniform(5.0, 40.0))
        if kind == "roll":
            argv = soak.host_roll_argv(info.name)
        elif kind == "up":
            argv = ["up", "host", info.name, "--skip-bench"]
        else:  # a second session of the same tune
            rec = soak.record(tune)
            argv = ["tune", "host", info.name, "--resume", str(tune.tune_id if rec else "t-00000000-000000-0000")]
        running_before = tune.proc.poll() is None
        other = soak.deploy(*argv, timeout=ROLL_TIMEOUT_S)
        running_after = tune.proc.poll() is None
        if running_before and running_after and other.rc == 0:
            soak.early.append(f"{info.name}: `deploy {' '.join(argv)}` succeeded while tune {tune.tune_id} ran")
        rc = soak.end_tune(tune)
        step.detail = (f"`{' '.join(argv[:2])}` on {info.name} during a tune: exit {other.rc} "
                       f"({'tune still running' if running_after else 'tune had ended'}); tune exit {rc}")
    return inject


#: A router change `up` makes through the staging path (router/migrate.py), by phase: the line it prints as the phase
#: begins. The first such fault of a soak on sglang-router migrates it to smg; later ones (or a soak on smg) change
#: a flag of the running smg, which hands over through the same phases.
ROUTER_PHASES = {"stage": "router: migration: stage smg on",
                 "redirect": "router: migration: new connections on",
                 "switch": "router: migration: stopping sglang-router gracefully",
                 "finish": "reach sglang-router again; stopping the staging smg"}
#: The smg flag each router change sets, to its next value (so every change is a real one).
ROUTER_KNOB, ROUTER_VALUES = "queue-timeout-secs", (61, 62)


def router_change_killed(phase: str) -> Callable[[Soak, Step], None]:
    """`up group` making a router change (0.3.2 → smg, or an smg flag) SIGKILLed as the given phase begins: the
    recovery's `up group` finds what it left and completes or undoes it (issue 50, 3); the clients must see no
    failure the resume causes, and the invariants must hold after it."""
    def inject(soak: Soak, step: Step) -> None:
        info = soak.infos[0]
        step.host = info.name
        soak.router_index += 1
        value = ROUTER_VALUES[soak.router_index % len(ROUTER_VALUES)]
        soak.write_router("smg", {ROUTER_KNOB: value})
        proc = soak.start("up", "group", GROUP, "--skip-bench")
        assert proc.stdout is not None
        out: list[str] = []
        killed = False
        for line in proc.stdout:
            out.append(line)
            if ROUTER_PHASES[phase] in line:
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                break
        rest, _ = proc.communicate(timeout=ROLL_TIMEOUT_S)
        soak.outputs.append("".join(out) + (rest or ""))
        soak.exits.append(proc.returncode)
        what = f"migration to smg ({ROUTER_KNOB}={value})" if soak.router_package == "sglang-router" \
            else f"smg flag change ({ROUTER_KNOB}={value})"
        soak.router_package = "smg"
        step.detail = (f"{what}: up group SIGKILLed as its {phase} phase began" if killed
                       else f"{what}: up group ended before its {phase} phase (exit {proc.returncode})")
    return inject


WATCH_INTERVAL_S = 5.0


class WatchProcess:
    """`deploy watch group prod` started as its systemd unit would start it (hardware_faults.UnitProcess: the unit's
    ExecStart with its Environment=), its lines read as they come; what it printed joins the soak's outputs."""

    def __init__(self, soak: Soak) -> None:
        unit = soak.deploy("watch", "group", GROUP, "--unit", "--interval", f"{WATCH_INTERVAL_S:g}", timeout=120)
        self.soak, self.unit = soak, UnitProcess(unit.stdout)
        self.proc, self.lines, self.seen = self.unit.proc, self.unit.lines, self.unit.seen

    def end(self, sig: signal.Signals = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.unit.reader.join(timeout=10)
        self.soak.outputs.append("\n".join(line for _, line in self.lines))
        self.soak.exits.append(rc)
        return rc


def listed_urls(soak: Soak) -> set[str] | None:
    """The URLs the router lists now (None: it does not answer)."""
    from orchestrator.router.client import RouterClient

    try:
        with RouterClient(soak.router_url, soak.api_key, timeout_s=5.0) as client:
            return {w.url for w in client.list_workers()}
    except Exception:  # a router that does not answer lists nobody
        return None


def worker_url_of(soak: Soak, host: str) -> str:
    res = soak.deploy("--json", "router", "status", GROUP, timeout=120)
    rows = {w["host"]: w["url"] for w in json.loads(res.stdout).get("workers", [])}
    return rows[host]


def watch_killed(point: str) -> Callable[[Soak, Step], None]:
    """A restart-class Xid on one host while `deploy watch` runs; the watch is SIGKILLed `point` (mid-cordon: as the
    host leaves the router, during its drain; mid-remedy: as its restart remedy starts). A new watch must then put
    the host back (or remedy it) within one interval plus the remedy (+60 s for the cycle's reads and the
    add-back's health wait): otherwise a violation, before the operator's recovery would hide it."""

    def inject(soak: Soak, step: Step) -> None:
        info = soak.rng.choice(soak.infos)
        step.host = info.name
        url = worker_url_of(soak, info.name)
        watch = WatchProcess(soak)
        time.sleep(WATCH_INTERVAL_S + 3)  # a clean cycle: every host recorded as listed
        soak.fault(info.name, f"xid=13@{soak.rng.randrange(8)}")
        if point == "mid-cordon":
            hit = wait(lambda: url not in (listed_urls(soak) or {url}), 120, 0.1)
        else:
            hit = wait(lambda: watch.seen(f"{info.name}: remedy: restart") is not None, 180)
        watch.end(signal.SIGKILL)
        killed = time.monotonic()
        again = WatchProcess(soak)
        back = wait(lambda: again.seen(f"{info.name}: returned:") is not None, 300, 0.5)
        back_at = again.seen(f"{info.name}: returned:")
        remedied = next((line for _, line in again.lines if line.startswith(f"{info.name}: remedied (restart) in ")),
                        "")
        remedy_s = float(remedied.split(" in ", 1)[1].split(" s", 1)[0]) if remedied else 0.0
        rc = again.end()
        soak.fault(info.name, "xid=none")
        took = (back_at - killed) if back_at is not None else None
        step.detail = (f"watch SIGKILLed {point} ({'at the point' if hit else 'point not reached'}) on "
                       f"{info.name}: next watch returned it {'never' if took is None else f'{took:.1f} s'} after "
                       f"the kill (remedy {remedy_s:.1f} s, interval {WATCH_INTERVAL_S:g} s), exit {rc}")
        if not back or took is None or took > WATCH_INTERVAL_S + remedy_s + 60:
            soak.early.append(f"{info.name}: the watch after a kill {point} did not put it back within one interval "
                              f"plus the remedy: {step.detail}")

    return inject


def webhook_hangs(soak: Soak, step: Step) -> None:
    """The inventory's notify: webhook accepts the connection and never answers (10 retries x 60 s: ~1,700 s a
    post before). A watch cycle on a restart-class Xid must cordon, remedy and return the host as if the receiver
    answered, and the watch must stop within seconds."""
    import socket

    info = soak.rng.choice(soak.infos)
    step.host = info.name
    hang = socket.socket()
    hang.bind(("127.0.0.1", 0))
    hang.listen(64)
    notify = soak.env.inventory / "notify.yaml"
    notify.write_text(f"notify:\n  webhook:\n    url: http://127.0.0.1:{hang.getsockname()[1]}/hook\n"
                      "    format: json\n    retries: 10\n    timeout_s: 60\n")
    try:
        watch = WatchProcess(soak)
        time.sleep(WATCH_INTERVAL_S + 3)
        injected = time.monotonic()
        soak.fault(info.name, f"xid=13@{soak.rng.randrange(8)}")
        back = wait(lambda: watch.seen(f"{info.name}: returned:") is not None, 300, 0.5)
        back_at = watch.seen(f"{info.name}: returned:")
        stopping = time.monotonic()
        rc = watch.end()
        stop_s = time.monotonic() - stopping
    finally:
        notify.unlink(missing_ok=True)
        hang.close()
        soak.fault(info.name, "xid=none")
    took = (back_at - injected) if back_at is not None else None
    step.detail = (f"webhook hangs; Xid 13 on {info.name}: back in the router "
                   f"{'never' if took is None else f'{took:.1f} s'} after the fault, the watch stopped in "
                   f"{stop_s:.1f} s (exit {rc})")
    if not back or stop_s > 30:
        soak.early.append(f"{info.name}: a hanging webhook held up the watch: {step.detail}")


FAULTS: dict[str, Callable[[Soak, Step], None]] = {
    "sigkill": signal_mid_roll(signal.SIGKILL),
    "sigterm": signal_mid_roll(signal.SIGTERM),
    "sigint": signal_mid_roll(signal.SIGINT),
    "ssh-drop": host_knob("ssh_drop_after=6", "ssh_drop_after=none"),
    "task-fail": host_knob("task_fail=true", "task_fail=none"),
    "api-delay": host_knob("api_delay_s=3", "api_delay_s=none"),
    "crash": server_knob("crash_on_start=true"),
    "never-healthy": server_knob("health_never_ok=true"),
    "full-disk": server_knob("full_disk=/etc/sglang"),
    "ct-reboot": container_reboot,
    "router-restart": router_restart,
    "overlap": overlapping_rolls,
    "router-remove": router_remove_mid_roll,
    "up-group": up_group_mid_roll,
    "host-roll-sigint": signal_mid_host_roll(signal.SIGINT),
    "host-roll-sigkill": signal_mid_host_roll(signal.SIGKILL),
    "tune-sigint": signals_mid_tune(signal.SIGINT),
    "tune-sigint-twice": signals_mid_tune(signal.SIGINT, signal.SIGINT),
    "tune-sigkill": signals_mid_tune(signal.SIGKILL),
    "tune-vs-roll": command_during_tune("roll"),
    "tune-vs-up": command_during_tune("up"),
    "tune-vs-resume": command_during_tune("resume"),
    **{f"router-kill-{phase}": router_change_killed(phase) for phase in ROUTER_PHASES},
    "watch-kill-cordon": watch_killed("mid-cordon"),
    "watch-kill-remedy": watch_killed("mid-remedy"),
    "webhook-hang": webhook_hangs,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--faults", type=int, default=10, help="faults per seed")
    ap.add_argument("--seed", type=int, action="append", dest="seeds",
                    help="repeatable: each seed's faults run in turn on the same site (default 1)")
    ap.add_argument("--first", type=int, default=int(os.environ.get("DEPLOY_SIM_FIRST", "60")))
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--minutes", type=float, default=None,
                    help="start no new fault after this long (from the first fault; each seed its equal share)")
    ap.add_argument("--fault", action="append", choices=sorted(FAULTS), help="only these faults (repeatable)")
    ap.add_argument("--keep", action="store_true", help="leave the simulated hosts (and the temporary folder) up")
    ap.add_argument("--router", choices=("sglang-router", "smg"), default="sglang-router",
                    help="the router package the inventory names (the real wheel, in the first host's container)")
    args = ap.parse_args()
    seeds: list[int] = args.seeds or [1]
    os.environ["DEPLOY_TEST_CLI"] = "process"  # every deploy command a real process, as an operator runs it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped soak still takes its hosts down (finally)
    # A soak started in a shell's background inherits SIGINT ignored, and so does every deploy it starts (an ignored
    # signal stays ignored across exec): its SIGINT faults were no faults, the roll ran on to exit 0.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    names = args.fault or sorted(FAULTS)
    print(f"chaos soak: seed(s) {', '.join(map(str, seeds))}, {args.faults} faults each from {', '.join(names)}, "
          f"{args.hosts} hosts, router {args.router}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="deploy-chaos-"))
    root = tmp / "sim"
    try:
        infos = sim_up(root, hosts=args.hosts, first=args.first, time_scale=5.0)
        try:
            return soak_site(args, seeds, names, tmp, root, infos)
        finally:
            if not args.keep:
                sim_down(root)
    finally:
        if not args.keep:  # the site's files, logs and releases: a 6 GB tmpfs filled up with them before
            shutil.rmtree(tmp, ignore_errors=True)


def soak_site(args: argparse.Namespace, seeds: list[int], names: list[str], tmp: Path, root: Path,
              infos: list[Any]) -> int:
    """One site converged once, then every seed's faults on it in turn (a seed's site costs minutes: the faults
    are what is measured)."""
    env_dir = tmp / "env"
    env_dir.mkdir()
    volids = {site_template.install(Path(i.host_dir)) for i in infos}
    env = make_fleet_env(infos, env_dir, {GROUP: [i.name for i in infos]}, ostemplate=volids.pop())
    env.env["DEPLOY_SIM_ROOT"] = str(root)  # `deploy sim fault` acts on this soak's hosts
    key_file = env_dir / "fleet.key"
    api_key = f"chaos-{random.Random(seeds[0]).getrandbits(64):016x}"
    key_file.write_text(api_key)
    key_file.chmod(0o600)
    env.set_profile(api_key={"file": str(key_file)})
    presets = yaml.safe_load((env.inventory / "presets.yaml").read_text())
    presets["presets"][TUNE_PRESET] = PRESET
    (env.inventory / "presets.yaml").write_text(yaml.safe_dump(presets, sort_keys=False))
    soak = Soak(env, infos, random.Random(seeds[0]), api_key)
    soak.write_router(args.router)
    soak.router_package = args.router
    up = soak.deploy("--json", "up", "group", GROUP, "--skip-bench", timeout=3600)
    if up.rc != 0:  # on a loaded machine a first converge can time out: an operator runs it again, once
        print(f"the first up failed (exit {up.rc}): {first_up_failure(up)}; running it again", flush=True)
        up = soak.deploy("--json", "up", "group", GROUP, "--skip-bench", timeout=3600)
    if up.rc != 0:
        print(f"the first up failed again (exit {up.rc}): {first_up_failure(up)}")
        return 1
    router_url = (json.loads(up.stdout).get("router") or {}).get("url")
    if not router_url:
        print("no managed router in the up report")
        return 1
    soak.router_url = router_url
    clients = Clients(router_url, args.clients, api_key=api_key)
    threads = clients.start()
    began_all = time.monotonic()
    stop_at = began_all + args.minutes * 60 if args.minutes else None  # from the first fault: the site's up is apart
    steps: dict[int, list[Step]] = {}
    try:
        for n, seed in enumerate(seeds, 1):
            soak.rng = random.Random(seed)
            # each seed its share of --minutes, so every seed gets faults
            share = began_all + (stop_at - began_all) * n / len(seeds) if stop_at is not None else None
            steps[seed] = run_seed(soak, clients, seed, args.faults, names, share)
    finally:
        clients.stop.set()
        for t in threads:
            t.join(timeout=150)
    return summary(steps, time.monotonic() - began_all)


def first_up_failure(up: Result) -> str:
    """What failed in a first `up`: the router's and each failed host's error, not the tail of a long JSON."""
    try:
        doc = json.loads(up.stdout)
    except json.JSONDecodeError:
        return up.text[-2000:]
    router = doc.get("router") or {}
    failed = [{"host": h.get("host"), "error": h.get("error"),
               "steps": [{k: st.get(k) for k in ("name", "status", "error", "summary")}
                         for st in h.get("steps", []) if isinstance(st, dict) and st.get("status") == "failed"]}
              for h in doc.get("hosts", []) if h.get("result") == "failed"]
    return json.dumps({"router": {"result": router.get("result"), "error": router.get("error")},
                       "hosts": failed})[-3000:]


def run_seed(soak: Soak, clients: Clients, seed: int, faults: int, names: list[str],
             stop_at: float | None) -> list[Step]:
    steps: list[Step] = []
    for n in range(1, faults + 1):
        if stop_at is not None and time.monotonic() > stop_at:
            print(f"seed {seed}: the time limit was reached: no new fault after {n - 1}", flush=True)
            break
        name = soak.rng.choice(names)
        step = Step(name, None, "")
        clients.phase = Phase()
        soak.windows, soak.exits = [], []
        began = time.monotonic()
        try:
            FAULTS[name](soak, step)
        except Exception as exc:  # the soak reports, it does not stop at the first surprise
            step.detail += f" (injection raised {exc!r})"
        soak.recover(step)
        step.serving_after_s = soak.wait_serving(began)
        step.violations = soak.invariants()
        step.took_s = time.monotonic() - began
        phase = clients.phase
        step.failed_requests = [f"{text} -> {explain(name, text, at, soak.windows)}"
                                for text, at in zip(phase.failed, phase.failed_at, strict=True)]
        step.unexplained = sum(1 for f in step.failed_requests if f.endswith(UNEXPLAINED))
        steps.append(step)
        print(f"{time.strftime('%H:%M:%S')} seed {seed} {n:3d} {name:<19} {step.detail}; "
              f"{', '.join(step.recovery)}; serving again after "
              f"{'never' if step.serving_after_s is None else f'{step.serving_after_s:.0f} s'}; "
              f"{len(step.failed_requests)} failed request(s) ({step.unexplained} unexplained); "
              f"{len(step.violations)} violation(s); step {step.took_s:.0f} s", flush=True)
        for v in step.violations:
            print(f"      VIOLATION: {v}", flush=True)
        for f in step.failed_requests:
            print(f"      failed request: {f}", flush=True)
        for text in soak.seen:  # every deploy command of this step, its last lines (secrets masked by deploy)
            tail = "\n".join(text.strip().splitlines()[-15:])
            print("      | " + tail.replace("\n", "\n      | "), flush=True)
    return steps


def summary(steps: dict[int, list[Step]], wall_s: float) -> int:
    """The figures: per seed and in all; exit 1 on any violation or unexplained failed request."""
    every = [s for ss in steps.values() for s in ss]
    violations = sum(len(s.violations) for s in every)
    failed = sum(len(s.failed_requests) for s in every)
    unexplained = sum(s.unexplained for s in every)
    served = [s.serving_after_s for s in every if s.serving_after_s is not None]
    print()
    for seed, ss in steps.items():
        print(f"seed {seed}: {len(ss)} faults ({', '.join(f'{k} {v}' for k, v in sorted(_count(ss).items()))}), "
              f"{sum(len(s.violations) for s in ss)} invariant violation(s), "
              f"{sum(len(s.failed_requests) for s in ss)} failed client request(s)")
    print(f"all: {len(every)} faults over {len(steps)} seed(s) in {wall_s / 60:.1f} min "
          f"(median step {statistics.median([s.took_s for s in every]) if every else 0:.0f} s), {violations} "
          f"invariant violation(s), {failed} failed client request(s), {unexplained} unexplained; worst time from a "
          f"fault to every host serving {max(served, default=0):.0f} s"
          f"{'' if len(served) == len(every) else f', {len(every) - len(served)} never'}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    reasons: dict[str, int] = {}
    for s in every:
        for f in s.failed_requests:
            key = f"{s.fault}: {f.rsplit(' -> ', 1)[1]}"
            reasons[key] = reasons.get(key, 0) + 1
    for key, count in sorted(reasons.items()):
        print(f"  {count:4d} failed during {key}")
    return 1 if violations or unexplained else 0


def _count(steps: list[Step]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in steps:
        out[s.fault] = out.get(s.fault, 0) + 1
    return out


if __name__ == "__main__":
    sys.exit(main())
