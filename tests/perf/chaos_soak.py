"""Chaos soak: random faults during fleet rolls behind the managed router, each followed by the recovery an operator
would use, with the fleet's invariants checked over SSH (never through deploy's own report) after every step.

    python tests/perf/chaos_soak.py [--hosts 4] [--faults 10] [--seed 1] [--first 60] [--clients 2]
                                    [--minutes M] [--fault NAME ...] [--keep]

Starts `--hosts` simulated hosts (a site template, so the first `up` is short), converges them as group `prod` with
the router managed by `deploy up` on the first host, starts `--clients` streaming clients through the router, then
`--faults` times: picks a fault (seeded), injects it around a fleet roll, runs the recovery, and checks:

- every host serves (`/health` 200 from the container itself);
- each server's command line is exactly the unit of the release the host's `current` link names, and that release
  is the one `deploy status` reports;
- the router lists exactly the hosts that serve;
- no lease is left on any host, and no bench process;
- no secret (the fleet's API key) in any output deploy printed or in a world-readable file under /etc/sglang.

Prints the seed, each fault with its recovery and the seconds until every host served again, every invariant
violation, and the failed client requests grouped by the fault they happened in. Bounded: `--faults` faults, each
roll with its own timeout; `--minutes M` starts no new fault after M minutes (the summary is still printed).
Exit 1 when any invariant was violated. Run as root. A measurement, not a test; a violation it finds becomes a
regression test.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from fleet_canary_roll import Clients, Phase  # noqa: E402  (this directory: the script's own)

from simulator.manager import sim_down, sim_up  # noqa: E402
from tests.e2e import site_template  # noqa: E402
from tests.e2e.conftest import DeployEnv, Result, make_fleet_env  # noqa: E402

GROUP = "prod"
ROLL_TIMEOUT_S = 900
SERVE_TIMEOUT_S = 240.0
#: The flag every roll changes; each roll takes the next value, so every roll is a real change.
KNOB = "num-continuous-decode-steps"
VALUES = (2, 4, 16)  # not 8: the profile's own value, which would make the first roll a no-op


@dataclass
class Step:
    fault: str
    host: str | None
    detail: str
    recovery: list[str] = field(default_factory=list)
    serving_after_s: float | None = None
    violations: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)


@dataclass
class Soak:
    env: DeployEnv
    infos: list[Any]
    rng: random.Random
    api_key: str
    outputs: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    value_index: int = 0

    # -------------------------------------------------------------------------------- the tool, as operators run it
    def deploy(self, *args: str, timeout: float = ROLL_TIMEOUT_S) -> Result:
        res = self.env.run(*args, timeout=timeout)
        self.outputs.append(res.text)
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
        return proc.returncode

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
        """What an operator does after a fault: resume the roll, else converge the group (router included)."""
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
    res = soak.ssh(info, "pct reboot 120 || (pct stop 120 && pct start 120)", timeout=180)
    rc = soak.finish(proc)
    step.detail = f"CT 120 of {info.name} rebooted during a roll (rc {res.returncode}): roll exit {rc}"


def router_restart(soak: Soak, step: Step) -> None:
    info = soak.infos[0]
    step.host = info.name
    proc = soak.start_roll()
    time.sleep(soak.rng.uniform(1.0, 15.0))
    soak.in_ct(info, "systemctl restart sglang-router")
    rc = soak.finish(proc)
    step.detail = f"router restarted during a roll: roll exit {rc}"


def overlapping_rolls(soak: Soak, step: Step) -> None:
    first = soak.start_roll()
    time.sleep(soak.rng.uniform(0.5, 5.0))
    second = soak.start_roll()
    step.detail = f"two rolls at once: exits {soak.finish(first)} and {soak.finish(second)}"


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
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--faults", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first", type=int, default=int(os.environ.get("DEPLOY_SIM_FIRST", "60")))
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--minutes", type=float, default=None, help="start no new fault after this long")
    ap.add_argument("--fault", action="append", choices=sorted(FAULTS), help="only these faults (repeatable)")
    ap.add_argument("--keep", action="store_true", help="leave the simulated hosts up at the end")
    args = ap.parse_args()
    os.environ["DEPLOY_TEST_CLI"] = "process"  # every deploy command a real process, as an operator runs it
    rng = random.Random(args.seed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped soak still takes its hosts down (finally)
    # A soak started in a shell's background inherits SIGINT ignored, and so does every deploy it starts (an ignored
    # signal stays ignored across exec): its SIGINT faults were no faults, the roll ran on to exit 0.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    names = args.fault or sorted(FAULTS)
    print(f"chaos soak: seed {args.seed}, {args.faults} faults from {', '.join(names)}, {args.hosts} hosts",
          flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="deploy-chaos-"))
    root = tmp / "sim"
    infos = sim_up(root, hosts=args.hosts, first=args.first, time_scale=5.0)
    steps: list[Step] = []
    try:
        env_dir = tmp / "env"
        env_dir.mkdir()
        volids = {site_template.install(Path(i.host_dir)) for i in infos}
        env = make_fleet_env(infos, env_dir, {GROUP: [i.name for i in infos]}, ostemplate=volids.pop())
        env.env["DEPLOY_SIM_ROOT"] = str(root)  # `deploy sim fault` acts on this soak's hosts
        key_file = env_dir / "fleet.key"
        api_key = f"chaos-{rng.getrandbits(64):016x}"
        key_file.write_text(api_key)
        key_file.chmod(0o600)
        (env.inventory / "router.yaml").write_text(f"router:\n  runs_on: {infos[0].name}\n  workers: {GROUP}\n")
        env.set_profile(api_key={"file": str(key_file)})
        soak = Soak(env, infos, rng, api_key)
        up = soak.deploy("--json", "up", "group", GROUP, "--skip-bench", timeout=3600)
        if up.rc != 0:
            print(up.text[-3000:])
            return 1
        router_url = (json.loads(up.stdout).get("router") or {}).get("url")
        if not router_url:
            print("no managed router in the up report")
            return 1
        clients = Clients(router_url, args.clients, api_key=api_key)
        threads = clients.start()
        worst: float = 0.0
        stop_at = time.monotonic() + args.minutes * 60 if args.minutes else None
        for n in range(1, args.faults + 1):
            if stop_at is not None and time.monotonic() > stop_at:
                print(f"--minutes {args.minutes:g} reached: no new fault after {n - 1}", flush=True)
                break
            name = rng.choice(names)
            step = Step(name, None, "")
            clients.phase = Phase()
            began = time.monotonic()
            try:
                FAULTS[name](soak, step)
            except Exception as exc:  # the soak reports, it does not stop at the first surprise
                step.detail += f" (injection raised {exc!r})"
            soak.recover(step)
            step.serving_after_s = soak.wait_serving(began)
            step.violations = soak.invariants()
            step.failed_requests = list(clients.phase.failed)
            steps.append(step)
            if step.serving_after_s is not None:
                worst = max(worst, step.serving_after_s)
            print(f"{n:3d} {name:<15} {step.detail}; {', '.join(step.recovery)}; serving again after "
                  f"{'never' if step.serving_after_s is None else f'{step.serving_after_s:.0f} s'}; "
                  f"{len(step.failed_requests)} failed request(s); "
                  f"{len(step.violations)} violation(s)", flush=True)
            for v in step.violations:
                print(f"      VIOLATION: {v}", flush=True)
            for text in soak.seen:  # every deploy command of this step, its last lines (secrets masked by deploy)
                tail = "\n".join(text.strip().splitlines()[-15:])
                print("      | " + tail.replace("\n", "\n      | "), flush=True)
        clients.stop.set()
        for t in threads:
            t.join(timeout=150)
        violations = sum(len(s.violations) for s in steps)
        failed = sum(len(s.failed_requests) for s in steps)
        print(f"\nseed {args.seed}: {len(steps)} faults, {violations} invariant violation(s), {failed} failed client "
              f"request(s), worst time from a fault to every host serving {worst:.0f} s; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        for s in steps:
            for f in s.failed_requests[:3]:
                print(f"  failed during {s.fault} ({s.host or 'fleet'}): {f}")
        return 1 if violations else 0
    finally:
        if not args.keep:
            sim_down(root)


if __name__ == "__main__":
    sys.exit(main())
