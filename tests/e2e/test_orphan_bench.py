"""Drill (issue 13 §3): SIGKILL a roll during its bench, then roll again.

The killed roll's bench_serving keeps running in the container. The next roll must find it and stop it (and say
so), must not take the orphan's result as a baseline (the gate compares with the previous good release's bench),
and must never sit silent while it waits.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest
import yaml

from tests.e2e.conftest import E2E_PRESET, DeployEnv, until
from tests.e2e.test_roll import KILLED_LOCK_TTL_S, RELEASES, by_id, ct_out, current, history

RUNS = "/var/lib/deploy/runs"
# A paced bench (160 model seconds, ~30 s on the 5x simulated clock, whatever the server's speed): long enough
# that the orphan still runs when the next roll starts. Pacing makes the gate's figures depend on the rate more
# than on the flags: roll B accepts regressions; what the test checks is which baseline its gate compared with.
LONG_PRESET = {**E2E_PRESET, "num_prompts": 160, "request_rate": 1}
MAX_SILENCE_S = 25.0  # the heartbeat says something every ~10 s; the old tool was silent for 131 s


def read_lines(proc, lines: list[tuple[float, str]]) -> threading.Thread:  # type: ignore[no-untyped-def]
    """Collect (monotonic time, line) of a running deploy in the background."""
    def pump() -> None:
        for line in proc.stdout:
            lines.append((time.monotonic(), line.rstrip("\n")))

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def bench_files(env: DeployEnv) -> list[str]:
    return ct_out(env, "cd /var/lib/deploy && find releases bench -name '*bench-*' 2>/dev/null | sort").split()


@pytest.mark.timeout(900)
def test_killed_rolls_bench_is_stopped_and_is_no_baseline(deploy_env: DeployEnv) -> None:
    env = deploy_env
    presets = yaml.safe_load((env.inventory / "presets.yaml").read_text())
    presets["presets"]["e2e"] = LONG_PRESET
    (env.inventory / "presets.yaml").write_text(yaml.safe_dump(presets, sort_keys=False))
    # As in test_roll's good change: a server-side cap, so faster decode rounds pass the gate.
    env.set_profile(flags={"num-continuous-decode-steps": 1, "max-running-requests": 64})
    res = env.run("--json", "up", "host", env.host)  # with its bench: the baseline of the base release
    assert res.rc == 0, res.text
    base = current(env)
    base_figures = by_id(history(env))[base]["verdict"]["candidate"]
    assert base_figures["output_throughput"] > 0
    before = bench_files(env)
    assert len(before) == 1 and before[0].startswith(f"releases/{base}/bench-e2e--"), before

    # Roll A: killed one second after its bench started.
    lines_a: list[tuple[float, str]] = []
    proc = env.popen("roll", "host", env.host, "--set", "num-continuous-decode-steps=8",
                     lock_ttl_s=KILLED_LOCK_TTL_S)
    pump = read_lines(proc, lines_a)
    try:
        deadline = time.monotonic() + 240
        while not any("waiting for bench_serving" in line for _, line in lines_a):
            assert proc.poll() is None, "roll A ended before its bench: " + "\n".join(x for _, x in lines_a)
            assert time.monotonic() < deadline, "roll A never started its bench: " + "\n".join(x for _, x in lines_a)
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        pump.join(timeout=10)
    assert proc.returncode == -9
    cand_a = current(env)
    assert cand_a != base
    # The orphan: its process group still runs in the container, registered under runs/ (by the bench itself, once
    # the node-side script that the killed roll started is past its samplers' lead-in: it runs on without its client).
    pidfiles = until(lambda: ct_out(env, f"ls -1 {RUNS}").split(), 60)
    assert len(pidfiles) == 1 and pidfiles[0].startswith("bench-"), pidfiles
    orphan_run = pidfiles[0].removeprefix("bench-").removesuffix(".pid")
    pid = ct_out(env, f"cut -d' ' -f1 {RUNS}/{pidfiles[0]}")
    assert ct_out(env, f"kill -0 -- -{pid} && echo alive || echo gone") == "alive"

    # Roll B: stops the orphan in its first round trip, says so, and is never silent for long.
    # The killed run's lease is taken over at once: this machine proves that run dead (tests/e2e/test_lock.py).
    lines_b: list[tuple[float, str]] = []
    t0 = time.monotonic()
    proc = env.popen("roll", "host", env.host, "--set", "num-continuous-decode-steps=8", "--accept-regression")
    pump = read_lines(proc, lines_b)
    try:
        rc = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        pump.join(timeout=10)
    text = "\n".join(line for _, line in lines_b)
    print(text)  # shown with -s: the output docs/roll.md quotes
    assert rc == 0, text
    assert f"stopped a leftover bench of run {orphan_run}" in text, text
    stamps = [t0] + [t for t, _ in lines_b]
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert max(gaps) < MAX_SILENCE_S, f"silent for {max(gaps):.0f} s:\n{text}"
    assert "waiting for" in text  # the long waits say what they wait for

    # The orphan is gone, and its result exists nowhere: neither as a bench file nor as a temporary one.
    assert ct_out(env, f"kill -0 -- -{pid} 2>/dev/null && echo alive || echo gone") == "gone"
    assert ct_out(env, f"ls -1 {RUNS}") == ""
    files = bench_files(env)
    assert not [f for f in files if orphan_run in f], files
    assert not [f for f in files if f.endswith(".partial")], files

    # Roll B's gate compared with the base release's own bench, not with the orphan's.
    cand_b = current(env)
    rel = by_id(history(env))
    assert cand_b not in (base, cand_a)
    assert rel[cand_a]["verdict"]["verdict"] == "abandoned"
    kept = rel[cand_b]["verdict"]
    assert kept["verdict"] == "kept" and rel[cand_b]["meta"]["previous"] == base
    assert kept["baseline"]["output_throughput"] == pytest.approx(base_figures["output_throughput"])
    assert [f for f in files if f.startswith(f"releases/{cand_b}/")] and len(files) == 2, files
    assert ct_out(env, f"ls {RELEASES}/{cand_a}").count("bench-") == 0
