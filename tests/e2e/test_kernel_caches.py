"""Kernel caches as managed artifacts (issue 35; orchestrator/caches.py, docs/stacks.md "Kernel caches"): each stack
and server shape starts on its own cache directory, kept on the PVE host (a bind mount), so a restart, a rollback
and a rebuilt container start warm; another stack starts cold on a fresh one; a cache that fails its check is set
aside, never deleted, and the start rebuilds it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import DeployEnv
from tests.e2e.test_stack_roll import NEXT, add_next_profile
from tests.e2e.test_stacks import current

HOST_CACHE = "/var/lib/deploy/kernel-cache/120"


def status(env: DeployEnv) -> dict[str, Any]:
    res = env.run("--json", "status", "host", env.host)
    assert res.rc == 0, res.text[-2000:]
    return res.json


def last_start(env: DeployEnv) -> tuple[dict[str, Any], str]:
    """The last start's ledger entry and the current release's cache directory (in the container)."""
    st = status(env)
    assert st["boot"] is not None and st["kernel_cache"] is not None, st
    return st["boot"], st["kernel_cache"]["dir"]


def on_host(env: DeployEnv, command: str) -> str:
    res = env.ssh(command)
    assert res.rc == 0, (command, res.text)
    return res.stdout


def phases(boot: dict[str, Any]) -> list[str]:
    return [p["name"] for p in boot["phases"]]


def capture_s(boot: dict[str, Any]) -> float:
    return sum(p["seconds"] or 0 for p in boot["phases"] if p["name"] in ("capture", "piecewise"))


def test_each_stack_has_its_cache_a_restart_and_a_rollback_start_warm(converged: DeployEnv) -> None:
    env = converged
    boot, d0 = last_start(env)
    assert boot["cold"] and boot["kernel_cache"]["state"] == "fresh", boot  # the first start: a new cache
    key0 = d0.rsplit("/", 1)[1]
    assert d0 == f"/var/cache/deploy/kernels/{key0}"
    # on the host side, owned by the container's root
    assert "deploy-cache.json" in on_host(env, f"ls -a {HOST_CACHE}/{key0}")
    assert on_host(env, f"ls {HOST_CACHE}/{key0}/.cache/flashinfer").startswith("compiled-")  # the JIT's results
    env.ct_faults(cold_start_s=40.0)  # JIT on an empty cache: 40 model s (10 s at time scale 4)
    roll = env.run("--json", "roll", "host", env.host, "--set", "num-continuous-decode-steps=4", "--skip-bench")
    assert roll.rc == 0, roll.text[-3000:]
    boot, d1 = last_start(env)
    assert d1 == d0 and not boot["cold"] and boot["kernel_cache"]["state"] == "warm", boot
    assert "jit" not in phases(boot) and capture_s(boot) < 8, boot
    warm_s = boot["total_s"]

    add_next_profile(env)  # another sglang pin: another stack
    res = env.run("--json", "roll", "host", env.host, "--profile", NEXT, "--skip-bench")
    assert res.rc == 0, res.text[-3000:]
    boot, d2 = last_start(env)
    assert d2 != d0 and boot["cold"] and boot["kernel_cache"]["state"] == "fresh", boot
    assert capture_s(boot) >= 8, boot  # the compile inside capture, as a real server's JIT (no line of its own)
    # the 10 s compile, measured by the ledger in whole seconds (8 s seen on a loaded machine: a margin)
    assert boot["total_s"] >= warm_s + 5, (boot["total_s"], warm_s)
    listing = on_host(env, f"ls {HOST_CACHE}").split()
    assert key0 in listing and d2.rsplit("/", 1)[1] in listing, listing

    back = env.run("--json", "rollback", "host", env.host)
    assert back.rc == 0, back.text[-3000:]
    assert "pip install" not in back.text and "sglang_install" not in [s["name"] for s in back.json["steps"]]
    boot, d3 = last_start(env)
    assert d3 == d0 and not boot["cold"] and boot["kernel_cache"]["state"] == "warm", boot
    assert current(env) == roll.json["release"]


def test_a_cache_that_fails_its_check_is_set_aside_and_rebuilt(converged: DeployEnv) -> None:
    env = converged
    _, d0 = last_start(env)
    key = d0.rsplit("/", 1)[1]
    cut = f"{d0}/flashinfer/autotune/0.6.3/sm120/0123456789abcdef/rank_tp0_pp0_dp0.json"
    assert env.ct(f"mkdir -p $(dirname {cut}) && printf '{{\"tactics\": ' > {cut}").rc == 0
    assert status(env)["kernel_cache"]["state"] == "failing"  # status looks, and changes nothing
    text = env.run("status", "host", env.host)
    assert "fails its check (unreadable autotune file flashinfer/autotune/" in text.stdout, text.text

    res = env.run("roll", "host", env.host, "--set", "num-continuous-decode-steps=4", "--skip-bench")
    assert res.rc == 0, res.text[-3000:]
    assert (f"kernel cache {d0} failed its check (unreadable autotune file flashinfer/autotune/0.6.3/sm120/"
            "0123456789abcdef/rank_tp0_pp0_dp0.json): set aside as ") in res.stdout, res.text[-3000:]
    aside = [n for n in on_host(env, f"ls {HOST_CACHE}").split() if n.startswith(f"{key}.set-aside-")]
    assert len(aside) == 1, aside
    assert on_host(env, f"cat {HOST_CACHE}/{aside[0]}/flashinfer/autotune/0.6.3/sm120/0123456789abcdef/"
                        "rank_tp0_pp0_dp0.json") == '{"tactics": '  # renamed, not deleted
    st = status(env)
    assert st["health"] == "200" and st["kernel_cache"]["state"] == "warm" and st["boot"]["cold"], st["boot"]

    # a foreign manifest (another stack's results copied in) fails the same way; --json carries the line
    assert env.ct(f"printf '{{\"key\": \"{key}\", \"stack\": \"0123456789ab\"}}' > {d0}/deploy-cache.json").rc == 0
    back = env.run("--json", "rollback", "host", env.host)
    assert back.rc == 0, back.text[-3000:]
    # the step that waited for the start (rollback_release) carries what the check before it did
    check = next(s["details"]["kernel_cache"] for s in back.json["steps"] if "kernel_cache" in s["details"])
    assert check["state"] == "set-aside" and "its manifest names stack 0123456789ab" in check["reason"], check
    assert check["line"].startswith(f"kernel cache {d0} failed its check (its manifest names stack 0123456789ab")
    aside = [n for n in on_host(env, f"ls {HOST_CACHE}").split() if n.startswith(f"{key}.set-aside-")]
    assert len(aside) == 2, aside


@pytest.mark.timeout(1800)
def test_a_rebuilt_container_starts_warm_on_the_cache_its_host_kept(converged: DeployEnv) -> None:
    env = converged
    _, d0 = last_start(env)
    assert env.ssh("pct stop 120 && pct destroy 120", timeout=180).rc == 0
    assert d0.rsplit("/", 1)[1] in on_host(env, f"ls {HOST_CACHE}")  # a destroy leaves the host's directory
    res = env.run("--json", "up", "host", env.host, "--skip-bench", timeout=900)
    assert res.rc == 0, res.text[-3000:]
    steps = {s["name"]: s for s in res.json["steps"]}
    assert "create CT 120" in steps["container"]["summary"], steps["container"]
    boot, d1 = last_start(env)
    assert d1 == d0 and not boot["cold"] and boot["kernel_cache"]["state"] == "warm", boot
