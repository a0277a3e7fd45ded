"""The host lock's lease logic: the host-side script run by the local bash against a temp dir (its clock and boot
id are files the test sets), the parsing of what it reports, and the run-side verdicts (held, lost, took over).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.errors import LockHeld, LockLost
from orchestrator.inventory.loader import load_inventory
from orchestrator.locks.lease import (
    EXIT_HELD,
    EXIT_IO,
    EXIT_LOST,
    LEASE_FILE,
    MARK,
    HostLease,
    LeaseScript,
    holder_text,
    parse_guard_output,
    takeover_message,
)
from orchestrator.remote.ssh import RemoteResult, SshHost
from tests.shared import EXAMPLE_INVENTORY

REPO = Path(__file__).resolve().parents[3]


class Host:
    """A lock dir with a settable clock (seconds since boot) and boot id, as the script reads them."""

    def __init__(self, tmp: Path) -> None:
        self.dir = tmp / "lockdir"
        self.clock = tmp / "uptime"
        self.boot = tmp / "boot_id"
        self.set(now=1000, boot="boot-a")

    def set(self, *, now: float | None = None, boot: str | None = None) -> None:
        if now is not None:
            self.clock.write_text(f"{now:.2f} 12345.67\n")
        if boot is not None:
            self.boot.write_text(boot + "\n")

    def script(self, run: str, ttl: int = 60, holder: str = "", dead: tuple[str, ...] = ()) -> LeaseScript:
        return LeaseScript(run, holder or f"me@box pid 1 running 'deploy roll' ({run})", ttl, lock_dir=str(self.dir),
                           clock=str(self.clock), boot_id=str(self.boot), dead_runs=dead)

    def run(self, run: str, mode: str, body: str = "", ttl: int = 60, dead: tuple[str, ...] = ()) -> RemoteResult:
        proc = subprocess.run(["bash", "-c", self.script(run, ttl, dead=dead).render(mode) + body],
                              capture_output=True, text=True, timeout=30)
        return RemoteResult(proc.returncode, proc.stdout, proc.stderr, 0.0)

    def lease(self) -> dict[str, str]:
        path = self.dir / LEASE_FILE
        if not path.exists():
            return {}
        return dict(line.split("=", 1) for line in path.read_text().splitlines())


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


def test_acquire_writes_the_lease_with_the_hosts_clock(host: Host) -> None:
    res = host.run("run-a", "acquire", "echo body ran", ttl=60)
    assert res.rc == 0 and res.stdout == "body ran\n", res
    assert MARK not in res.stderr
    lease = host.lease()
    assert lease["run"] == "run-a" and lease["boot"] == "boot-a"
    assert lease["renewed"] == "1000" and lease["expires"] == "1060" and lease["ttl"] == "60"
    assert "running 'deploy roll'" in lease["holder"]


def test_a_live_lease_refuses_another_run_and_its_command_never_runs(host: Host) -> None:
    assert host.run("run-a", "acquire").rc == 0
    host.set(now=1012)
    res = host.run("run-b", "acquire", "echo CHANGED")
    assert res.rc == EXIT_HELD and "CHANGED" not in res.stdout
    info = parse_guard_output(res.stderr).events["held"]
    assert info.run == "run-a" and "(run-a)" in info.holder
    assert info.expires_in_s == 48 and info.renewed_ago_s == 12
    assert host.lease()["run"] == "run-a"  # untouched


def test_a_live_lease_of_a_run_proven_dead_is_taken_over_at_once_and_said(host: Host) -> None:
    assert host.run("run-a", "acquire").rc == 0
    host.set(now=1005)  # 55 s before it expires
    refused = host.run("run-b", "acquire", "echo body ran", dead=("run-x", "run-y"))
    assert refused.rc == EXIT_HELD and "body ran" not in refused.stdout  # another run's death proves nothing
    res = host.run("run-b", "acquire", "echo body ran", dead=("run-x", "run-a"))
    assert res.rc == 0 and res.stdout == "body ran\n" and host.lease()["run"] == "run-b"
    info = parse_guard_output(res.stderr).events["took-over"]
    assert info.run == "run-a" and info.dead and "process on this machine is gone" in takeover_message(info)


def test_every_command_renews_and_an_expired_lease_is_taken_over(host: Host) -> None:
    assert host.run("run-a", "acquire").rc == 0
    host.set(now=1050)
    assert host.run("run-a", "renew", "true").rc == 0
    assert host.lease()["expires"] == "1110"  # the heartbeat moved the expiry
    host.set(now=1122)  # run A died: no renewal for 72 s
    res = host.run("run-b", "acquire", "echo B runs")
    assert res.rc == 0 and res.stdout == "B runs\n"
    info = parse_guard_output(res.stderr).events["took-over"]
    assert info.run == "run-a" and info.expires_in_s == -12
    assert takeover_message(info).startswith("took over the lock of run run-a (")
    assert takeover_message(info).endswith("(expired 12 s ago)")
    assert host.lease()["run"] == "run-b" and host.lease()["acquired"] == "1122"


def test_a_run_whose_lease_was_taken_loses_it_and_its_command_never_runs(host: Host) -> None:
    assert host.run("run-a", "acquire").rc == 0
    host.set(now=1100)
    assert host.run("run-b", "acquire").rc == 0
    res = host.run("run-a", "renew", "echo A CHANGED SOMETHING")
    assert res.rc == EXIT_LOST and "CHANGED" not in res.stdout
    info = parse_guard_output(res.stderr).events["lost"]
    assert info.run == "run-b" and info.expires_in_s == 60
    assert host.lease()["run"] == "run-b"
    # A lease that is gone (B finished and released it) is lost too: nothing proves nobody changed the host.
    assert host.run("run-b", "release").rc == 0 and host.lease() == {}
    gone = host.run("run-a", "renew", "echo A CHANGED SOMETHING")
    assert gone.rc == EXIT_LOST and "CHANGED" not in gone.stdout
    assert parse_guard_output(gone.stderr).events["lost"].run == ""


def test_expired_but_untouched_lease_is_renewed_and_said(host: Host) -> None:
    assert host.run("run-a", "acquire").rc == 0
    host.set(now=1075)  # an SSH outage longer than the lease, and no other run came
    res = host.run("run-a", "renew", "echo still mine")
    assert res.rc == 0 and res.stdout == "still mine\n"
    assert parse_guard_output(res.stderr).events["renewed-expired"].expires_in_s == -15
    assert host.lease()["expires"] == "1135" and host.lease()["acquired"] == "1000"


def test_a_lease_from_before_a_reboot_is_not_live(host: Host) -> None:
    assert host.run("run-a", "acquire").rc == 0
    host.set(now=30, boot="boot-b")  # the host rebooted: uptime restarted, expiry numbers mean nothing now
    res = host.run("run-b", "acquire")
    assert res.rc == 0
    info = parse_guard_output(res.stderr).events["took-over"]
    assert not info.same_boot and info.expires_in_s is None
    assert "before the host's last boot" in takeover_message(info)


def test_release_frees_only_our_own_lease(host: Host) -> None:
    assert host.run("run-a", "acquire").rc == 0
    res = host.run("run-b", "release")
    assert res.rc == 0 and parse_guard_output(res.stderr).events["not-ours"].run == "run-a"
    assert host.lease()["run"] == "run-a"
    assert host.run("run-a", "release").rc == 0 and host.lease() == {}
    assert host.run("run-b", "acquire").rc == 0  # free: no takeover
    assert "took-over" not in parse_guard_output(host.run("run-b", "renew").stderr).events


def test_holder_text_with_quotes_and_shell_syntax_stays_literal(host: Host) -> None:
    holder = "me@box pid 7 running 'deploy roll --set x=$(touch /tmp/pwned) \"q\"; `id`' since T"
    proc = subprocess.run(["bash", "-c", host.script("run-q", holder=holder).render("acquire")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert host.lease()["holder"] == holder


def test_parse_keeps_the_commands_own_stderr() -> None:
    text = f"warning: x\n{MARK} held now=5\n{MARK} held run=r1\n{MARK} held expires=9\nlast line\n"
    report = parse_guard_output(text)
    assert report.stderr == "warning: x\nlast line\n"
    assert report.events["held"].run == "r1" and report.events["held"].expires_in_s == 4


def _lease(tmp_path: Path) -> HostLease:
    inv = load_inventory(EXAMPLE_INVENTORY)
    ssh = SshHost(next(iter(inv.hosts.values())))  # never connected: check() reads results only
    return HostLease(ssh, "deploy roll", ttl_s=60, run_id="run-a")


def test_run_side_verdicts(host: Host, tmp_path: Path) -> None:
    lease = _lease(tmp_path)
    lease.script = host.script("run-a")
    lease.arm()
    assert lease.check(host.run("run-a", "acquire"), time.monotonic()).rc == 0
    assert lease.held and lease.took_over is None
    assert lease.ttl_s - 5 < lease.valid_for_s() <= lease.ttl_s  # counted from when the command was sent
    other = host.script("run-b")
    with pytest.raises(LockHeld) as held:
        lease_b = _lease(tmp_path)
        lease_b.script = other
        lease_b.arm()
        lease_b.check(host.run("run-b", "acquire"), 100.0)
    assert held.value.exit_code == 3 and "holds the lock on this host: run run-a (" in held.value.what
    assert "expires in 60 s" in held.value.what
    host.set(now=1200)
    assert host.run("run-b", "acquire").rc == 0
    with pytest.raises(LockLost) as lost:
        lease.check(host.run("run-a", "renew", "echo no"), 200.0)
    assert lost.value.exit_code == 3
    assert "lost the host lock: run run-b (" in lost.value.what and "stopped before changing" in lost.value.what
    assert not lease.held


def test_an_unwritable_lock_dir_is_named(host: Host, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    script = LeaseScript("run-a", "h", 60, lock_dir=str(blocker / "sub"), clock=str(host.clock),
                         boot_id=str(host.boot))
    proc = subprocess.run(["bash", "-c", script.render("acquire") + "echo body"], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == EXIT_IO and "body" not in proc.stdout
    assert "cannot create" in parse_guard_output(proc.stderr).events["io"].what


def test_holder_text_masks_secret_looking_values() -> None:
    text = holder_text("deploy roll host h --set api-key=abc --api-key xyz --set max-running-requests=64")
    assert "abc" not in text and "xyz" not in text and "max-running-requests=64" in text
    assert "\n" not in holder_text("deploy up\nhost h")


def test_the_release_scripts_of_dead_runs_remove_only_a_lease_naming_one_of_them(host: Host) -> None:
    """What free_dead_runs_leases sends: one release per dead run, concatenated into one round trip."""
    assert host.run("run-a", "acquire").rc == 0

    def release_all(*runs: str) -> int:
        script = "".join(host.script(r).render("release") for r in runs)
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30).returncode

    assert release_all("run-x", "run-y") == 0 and host.lease()["run"] == "run-a"  # another run's lease stays
    assert release_all("run-x", "run-a") == 0 and host.lease() == {}


def test_holder_text_names_a_long_command_in_at_most_a_few_hundred_characters() -> None:
    """A roll refused for a 120,000-character --set value once left its lease held: the holder text rides in
    every remote command, and the release (which also carries the metrics) went past the argument limit."""
    text = holder_text("deploy roll host h --set chat-template=" + "x" * 120_000)
    assert len(text) < 600 and "deploy roll host h --set chat-template=xxx" in text and text.count("…") == 1


def test_a_release_broken_by_what_it_carries_still_frees_the_lease(host: Host, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The metrics ride in the release's round trip; when they break it, the lease is freed by a plain release
    and the failure is said, never a lease left held for its whole TTL."""
    lease = _lease(tmp_path)
    lease.script = host.script("run-a")
    lease.arm()
    assert lease.check(host.run("run-a", "acquire"), time.monotonic()).rc == 0
    sent: list[str] = []

    def run_here(command: str, **_: object) -> RemoteResult:
        sent.append(command)
        proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
        return RemoteResult(proc.returncode, proc.stdout, proc.stderr, 0.0)

    monkeypatch.setattr(lease.ssh, "run", run_here)
    lease.on_release = lambda: "exit 7"
    assert lease.release() == "lock released"
    assert len(sent) == 2 and host.lease() == {}
    assert lease.published is not None and "exit 7" in lease.published


def test_a_lease_taken_by_an_acquire_whose_answer_was_cut_off_is_taken_over_by_the_next_run(host: Host,
                                                                                            tmp_path: Path) -> None:
    """Issue 38 (chaos soak, tune-sigint-twice): a Ctrl-C during the lock step's round trip left the lease on the
    host under a run that never learnt it held it; the tune's restore was then refused lock-held for a minute."""
    first = HostLease(_lease(tmp_path).ssh, "deploy tune", ttl_s=60, run_id="run-cut")
    first.script = host.script("run-cut")
    first.arm()
    assert host.run("run-cut", "acquire").rc == 0  # the host took the lease; the answer never reached check()
    assert first.release() == "lock was not held" and host.lease()["run"] == "run-cut"
    nxt = HostLease(first.ssh, "deploy tune (restore)", ttl_s=60, run_id="run-b")
    assert "run-cut" in nxt.dead_runs
    res = host.run("run-b", "acquire", "echo restored", dead=nxt.dead_runs)
    assert res.rc == 0 and res.stdout == "restored\n" and host.lease()["run"] == "run-b"
    assert parse_guard_output(res.stderr).events["took-over"].dead


def test_a_released_lease_leaves_no_dead_mark(host: Host, tmp_path: Path) -> None:
    lease = HostLease(_lease(tmp_path).ssh, "deploy up", ttl_s=60, run_id="run-done")
    lease.script = host.script("run-done")
    lease.arm()
    lease.check(host.run("run-done", "acquire"), time.monotonic())
    lease.mode = None  # as after a release round trip (not run here: the SshHost is never connected)
    lease.release()
    assert "run-done" not in HostLease(lease.ssh, "deploy up", ttl_s=60, run_id="run-c").dead_runs
