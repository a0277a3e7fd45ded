"""Releases under many failures (issue 13 §5): pruning keeps the last good state, every attempt keeps its own
verdict, an interrupted `up` is marked abandoned by the next one, and the unit's header names its release."""

from __future__ import annotations

from tests.e2e.conftest import DeployEnv
from tests.e2e.test_roll import (
    KILLED_LOCK_TTL_S,
    RELEASES,
    UNIT,
    by_id,
    ct_out,
    current,
    health,
    history,
    kill_once_installed,
    main_pid,
    release_ids,
)

KEEP = 3  # the profile's keep_releases in the pruning test (default 10: the same rule, fewer rolls to reach it)


def failing_roll(env: DeployEnv, value: int) -> None:
    res = env.run("--json", "roll", "host", env.host, "--set", f"max-running-requests={value}", "--skip-bench")
    assert res.rc not in (0, 2), res.text
    assert "rolled back" in res.json["what"], res.json


def test_failed_rolls_never_prune_the_verified_release(converged: DeployEnv) -> None:
    env = converged
    env.set_profile(keep_releases=KEEP)
    r0 = current(env)
    good = env.run("--json", "roll", "host", env.host, "--set", "num-continuous-decode-steps=4", "--skip-bench")
    assert good.rc == 0, good.text
    r1 = good.json["release"]
    back = env.run("--json", "rollback", "host", env.host)  # the operator goes back to r0; r1 stays verified
    assert back.rc == 0 and current(env) == r0, back.text

    # KEEP + 2 candidates that crash on start (the fault matches only their command lines: 1000…1004), so that
    # pruning has failed releases to remove and r0 and r1 would be among the oldest.
    env.ct_faults(crash_on_start=True, match="--max-running-requests 10")
    for i in range(KEEP + 2):
        failing_roll(env, 1000 + i)
    assert current(env) == r0 and health(env) == "200"
    ids = release_ids(env)
    # The newest KEEP, plus the current one and the newest verified one, whatever the failed ones' verdicts.
    assert r0 in ids and r1 in ids, ids
    assert len(ids) == KEEP + 2, ids
    rel = by_id(history(env))
    assert rel[r1]["verdict"]["verdict"] == "kept"
    assert sum(1 for r in rel.values() if (r.get("verdict") or {}).get("verdict") == "rolled-back") == KEEP

    fwd = env.run("--json", "rollback", "host", env.host, "--to", r1)
    assert fwd.rc == 0, fwd.text
    assert current(env) == r1 and health(env) == "200"
    assert "--num-continuous-decode-steps 4" in ct_out(env, f"cat {UNIT}")


def test_rerolling_the_same_flags_keeps_both_attempts(converged: DeployEnv) -> None:
    env = converged
    r0 = current(env)
    env.ct_faults(crash_on_start=True, match="--max-running-requests 1024")
    failing_roll(env, 1024)
    env.ct_faults(crash_on_start=False, match=None)
    again = env.run("--json", "roll", "host", env.host, "--set", "max-running-requests=1024", "--skip-bench")
    assert again.rc == 0, again.text
    second = again.json["release"]

    rel = by_id(history(env))
    (first,) = [rid for rid in rel if rid not in (r0, second)]
    assert first != second and first.split("-")[1] == second.split("-")[1]  # same content, two releases
    assert rel[first]["verdict"]["verdict"] == "rolled-back" and rel[second]["verdict"]["verdict"] == "kept"
    assert rel[first]["meta"]["flag_diff"] == rel[second]["meta"]["flag_diff"]

    # The unit's managed header names the release that installed it, as meta.json does.
    header = ct_out(env, f"head -n 3 {UNIT}")
    assert f"# deploy: release {second} body-sha256 " in header, header
    assert f'"id": "{second}"' in ct_out(env, f"cat {RELEASES}/{second}/meta.json")


def test_interrupted_up_is_abandoned_by_the_next_up(converged: DeployEnv) -> None:
    env = converged
    r0 = current(env)
    # A profile change whose server takes 30 s to load: `up` is killed while it waits for health.
    env.set_profile(flags={"num-continuous-decode-steps": 4})
    env.ct_faults(slow_start_s=30, match="--num-continuous-decode-steps 4")
    before = main_pid(env)
    proc = env.popen("up", "host", env.host, "--skip-bench", lock_ttl_s=KILLED_LOCK_TTL_S)
    x, _ = kill_once_installed(env, proc, r0, within_s=120, restarted_from=before)
    assert ct_out(env, f"test -e {RELEASES}/{x}/verdict.json && echo yes || echo no") == "no"
    pid = main_pid(env)

    # The killed run's lease is taken over at once: this machine proves that run dead (tests/e2e/test_lock.py).
    res = env.run("--json", "up", "host", env.host, "--skip-bench")
    assert res.rc == 0, res.text
    now = current(env)
    assert now != x
    rel = by_id(history(env))
    assert rel[x]["verdict"]["verdict"] == "abandoned"
    assert rel[now]["verdict"]["verdict"] == "kept" and rel[now]["meta"]["source"] == "up"
    assert main_pid(env) == pid  # same files: the new release did not restart the server
    assert f"# deploy: release {now} body-sha256 " in ct_out(env, f"head -n 3 {UNIT}")
    assert health(env) == "200"


def test_boot_ledger_records_each_start_cold_then_warm(converged: DeployEnv) -> None:
    """The boot ledger: a start on an empty kernel cache is cold (it compiles inside capture, as a real server does),
    the next start warm; `status`
    shows the last start's phases, `--json` the typed phases, `history` each release's last start."""
    env = converged
    # model seconds (time scale 4): 6 s warm starts, +40 s of JIT compile while the kernel cache is empty
    env.ct_faults(warm_start_s=24.0, cold_start_s=40.0)
    r0 = current(env)
    # another MoE backend: another server shape, so another kernel cache (orchestrator/caches.py), empty
    roll = env.run("--json", "roll", "host", env.host, "--set", "moe-runner-backend=triton", "--skip-bench")
    assert roll.rc == 0, roll.text
    r1 = roll.json["release"]
    st = env.run("--json", "status", "host", env.host)
    assert st.rc == 0, st.text
    boot = st.json["boot"]
    names = [p["name"] for p in boot["phases"]]
    assert boot["complete"] and boot["cold"], boot
    assert names[:3] == ["imports", "startup", "weights"] and "capture" in names and "jit" not in names, names
    assert names[-1] == "warmup" and boot["cold_basis"] == "kernel cache fresh", boot
    capture = sum(p["seconds"] for p in boot["phases"] if p["name"] in ("capture", "piecewise"))
    assert capture >= 8, boot  # 40 model s = 10 s of compile inside capture
    text = env.run("status", "host", env.host)
    assert "last start: cold start" in text.stdout and "longest: capture" in text.stdout, text.text

    back = env.run("--json", "rollback", "host", env.host)  # r0's own kernel cache, warmed by its first start
    assert back.rc == 0 and current(env) == r0, back.text
    st = env.run("--json", "status", "host", env.host)
    details = st.json
    assert not details["boot"]["cold"] and details["boot"]["complete"], details["boot"]
    assert "jit" not in [p["name"] for p in details["boot"]["phases"]]
    assert len(details["boots"]) >= 1
    rel = by_id(history(env))
    assert rel[r1]["boot"]["cold"] and not rel[r0]["boot"]["cold"], (rel[r1]["boot"], rel[r0]["boot"])
    hist = env.run("history", "host", env.host)
    assert "last start" in hist.stdout and "cold" in hist.stdout and "warm" in hist.stdout, hist.text
