"""Side-by-side stacks (issue 35 items 1 and 2): an sglang upgrade is a new venv beside the running one, a release
runs its own stack, a rollback restores flags and stack with no pip run, and a failed upgrade puts the previous
release back on its own stack."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import DeployEnv

OLD_VENV = "/root/ml-env"
RENAMED = {"nsa-prefill-backend": None, "nsa-decode-backend": None,
           "dsa-prefill-backend": "trtllm", "dsa-decode-backend": "trtllm"}


def current(env: DeployEnv) -> str:
    return env.ct("readlink /var/lib/deploy/current").stdout.strip().rsplit("/", 1)[-1]


def server_python(env: DeployEnv) -> str:
    """argv[0] of the running sglang: the interpreter of the stack it runs."""
    pid = env.ct("systemctl show -p MainPID --value sglang").stdout.strip()
    return env.ct(f"tr '\\0' '\\n' < /proc/{pid}/cmdline | head -n 1").stdout.strip()


def stacks_listing(env: DeployEnv) -> str:
    return env.ct("ls -l --time-style=+%s /opt/deploy/stacks; cat /opt/deploy/stacks/*.json").stdout


def upgrade(env: DeployEnv) -> dict[str, Any]:
    """The profile moved to 0.5.23 with the renamed flags, and `up`: a new stack built beside the old venv."""
    env.set_profile(sglang_version="0.5.23", flags=RENAMED)
    res = env.run("--json", "up", "host", env.host, "--skip-bench")
    return {"res": res, **{s["name"]: s for s in res.json["steps"]}}


def test_rollback_across_an_sglang_upgrade_restores_the_old_stack_with_no_pip_run(converged: DeployEnv) -> None:
    """Issue 35 item 1: before, `rollback` ran the old flags on the in-place upgraded sglang (`unrecognized
    arguments: --nsa-decode-backend`) and status said `(kept, up)` of a server that was down."""
    env = converged
    old = current(env)
    steps = upgrade(env)
    assert steps["res"].rc == 0, steps["res"].text[-2000:]
    install, upgraded_python, before = steps["sglang_install"], server_python(env), stacks_listing(env)
    old_venv_version = env.ct(f"sed -n 's/^Version: //p' {OLD_VENV}/lib/python3*/site-packages/sglang-*.dist-info/"
                              "METADATA").stdout.strip()

    back = env.run("--json", "rollback", "host", env.host, "--to", old)
    assert back.rc == 0, back.text[-2000:]
    assert current(env) == old and server_python(env) == f"{OLD_VENV}/bin/python"
    assert "--nsa-decode-backend" in env.ct("tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang)"
                                            "/cmdline").stdout
    status = env.run("status", "host", env.host)
    assert status.rc == 0 and f"release {old} (kept, up, " in status.stdout and "/health 200" in status.stdout
    # The upgrade built a stack of its own and ran it; the old venv was adopted, not upgraded in place; the
    # rollback ran no pip and touched no stack.
    assert install["status"] == "changed" and install["summary"].startswith("built stack "), install
    assert upgraded_python == f"/opt/deploy/stacks/{install['details']['stack']}/bin/python"
    assert old_venv_version == "0.5.12.post1"
    assert stacks_listing(env) == before


def test_a_failed_upgrade_puts_the_previous_release_back_on_its_own_stack(converged: DeployEnv) -> None:
    """Issue 35 item 2: before, the new release's server died (`Unsupported architecture`), `up` exited 1 and the
    host served nothing; `rollback` then failed as in item 1."""
    env = converged
    old = current(env)
    env.ct_faults(fatal="unsupported-arch", match="dsa-decode")
    try:
        steps = upgrade(env)
        res = steps["res"]
        assert res.rc != 0, res.text[-2000:]
        assert f"rolled back to {old}" in res.json["what"], res.json
        assert current(env) == old and server_python(env) == f"{OLD_VENV}/bin/python"
        assert env.ct("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/health").stdout == "200"
        failed = res.json["details"]["candidate"]
        verdict = env.ct(f"cat /var/lib/deploy/releases/{failed}/verdict.json").stdout
        assert '"verdict": "rolled-back"' in verdict
    finally:
        env.ct_faults(fatal=None, match=None)
    # The stack built for the failed attempt is kept: the next `up` tries again with no pip run.
    again = env.run("--json", "up", "host", env.host, "--skip-bench")
    assert again.rc == 0, again.text[-2000:]
    install = next(s for s in again.json["steps"] if s["name"] == "sglang_install")
    assert install["status"] == "ok" and install["summary"].startswith(f"stack {install['details']['stack']} ")


def test_a_lock_pins_every_file_and_a_hash_the_index_does_not_serve_is_refused_naming_the_package(
        converged: DeployEnv) -> None:
    """Issue 35 item 3: `deploy lock` resolves the stack in the container; `up` then installs exactly those files
    (--require-hashes); a lock hash the index no longer matches is exit 2 naming the package, the server untouched."""
    env = converged
    locked = env.run("--json", "lock", "glm5-nvfp4", "--host", env.host)
    assert locked.rc == 0, locked.text[-2000:]
    path = env.inventory / "locks" / "glm5-nvfp4.txt"
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    assert locked.json["distributions"] == len(lines) > 5
    assert any(ln.startswith("sglang==0.5.12.post1 --hash=sha256:") for ln in lines), lines
    up = env.run("--json", "up", "host", env.host, "--skip-bench")
    assert up.rc == 0, up.text[-2000:]
    install = next(s for s in up.json["steps"] if s["name"] == "sglang_install")
    assert install["summary"].startswith("built stack "), install
    venv = f"/opt/deploy/stacks/{install['details']['stack']}"
    freeze = env.ct(f"{venv}/bin/python -m pip freeze --all").stdout
    assert "sglang==0.5.12.post1" in freeze
    status = env.run("--json", "status", "host", env.host)
    assert status.json["stack"]["sha"] == install["details"]["stack"] and status.json["stack_drift"] == []
    # A pip run into the stack behind the tool's back shows as drift against the lock, by name.
    assert env.ct(f"{venv}/bin/python -m pip uninstall -y -q hf-xet").rc == 0
    drift = env.run("--json", "status", "host", env.host).json["stack_drift"]
    assert len(drift) == 1 and drift[0].startswith("hf-xet==") and drift[0].endswith(" missing"), drift
    # `plan` shows the same drift, read in its facts round trip (no extra SSH round trip).
    plan = env.run("--json", "plan", "host", env.host)
    assert plan.rc == 0, plan.text[-2000:]
    planned = next(s for s in plan.json["steps"] if s["name"] == "sglang_install")
    assert planned["details"]["stack_drift"] == drift, planned
    assert f"stack drift against the lock: {drift[0]}" in planned["summary"], planned
    text = env.run("plan", "host", env.host)
    assert f"stack drift against the lock: {drift[0]}" in text.stdout, text.stdout[-2000:]
    assert plan.json["totals"]["ssh_round_trips"] == 1, plan.json["totals"]

    release, unit = current(env), env.ct("sha256sum /etc/systemd/system/sglang.service").stdout
    first = next(ln for ln in lines if not ln.startswith("sglang=="))
    name = first.split("==", 1)[0]
    path.write_text(path.read_text().replace(first, first[:-64] + "0" * 64))  # the index serves another build
    refused = env.run("--json", "up", "host", env.host, "--skip-bench")
    assert refused.rc == 2, refused.text[-2000:]
    assert f"the index no longer serves the locked build of {name}==" in refused.json["what"], refused.json
    assert refused.json["details"]["packages"] == [name]
    assert current(env) == release and env.ct("sha256sum /etc/systemd/system/sglang.service").stdout == unit
    assert env.ct("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/health").stdout == "200"


def pip_cache_bytes(env: DeployEnv, path: str) -> int:
    """`du -sb` of a pip cache in the container (0: none)."""
    said = env.ct(f"du -sb {path} 2>/dev/null | cut -f1").stdout.strip()
    return int(said) if said.isdigit() else 0


def venv_bytes(env: DeployEnv, venv: str) -> int:
    return int(env.ct(f"du -sb {venv} | cut -f1").stdout.strip())


def test_a_disk_budget_prunes_the_oldest_stacks_and_refuses_a_stack_that_cannot_fit(converged: DeployEnv) -> None:
    """Issue 35, a disk budget in bytes: with stacks_disk_budget_gb a build also prunes the oldest prunable stacks
    until the kept ones fit; a stack that cannot fit even then is exit 2 before anything changes. Issue 48 item 5:
    every pip run of a stack downloads into one managed pip cache beside the stacks (not root's ~/.cache/pip, which
    nothing counted), which the budget counts and empties before any stack; and on the real sizes, each stand-in venv
    measures its release's real venv under `du -sb` (0.5.12.post1: 9,844,450,267 bytes) once a Python started in it."""
    env = converged
    adopted = venv_bytes(env, OLD_VENV)
    assert adopted > 9_000_000_000, adopted  # the real 0.5.12.post1 venv's bytes, not the stand-in's ~70 MB
    root_cache = pip_cache_bytes(env, "/root/.cache/pip")
    first = upgrade(env)["sglang_install"]  # 0.5.23 beside the adopted venv
    stack = first["details"]["stack"]
    one = venv_bytes(env, f"/opt/deploy/stacks/{stack}")  # after its flag check and server: its real bytes
    assert one > 9_000_000_000, one
    for extras in (["tracing"], ["tracing", "ray"]):  # two more 0.5.23 stacks, the last one current and verified
        env.set_profile(sglang_extras=extras, keep_stacks=5)
        more = env.run("--json", "up", "host", env.host, "--skip-bench")
        assert more.rc == 0, more.text[-2000:]
    # The builds' wheels went to the managed cache, none to root's.
    assert pip_cache_bytes(env, "/opt/deploy/stacks/.pip-cache") > 0
    assert pip_cache_bytes(env, "/root/.cache/pip") == root_cache
    # A budget that holds the adopted venv, the current release's stack and a new one (the build's refusal reserves
    # the largest kept stack's bytes for it), but not the two older 0.5.23 stacks as well: the pip cache is emptied
    # first, then the oldest prunable stack (the first 0.5.23 stack) goes; the current and verified release's stack
    # stays. The new stack counts its stand-in bytes in this prune (its holes come with its first Python start:
    # docs/simulator.md, Real sizes).
    gb = round((adopted + 2.5 * one) / 1e9, 2)
    env.set_profile(sglang_extras=["http2"], stacks_disk_budget_gb=gb)
    caches = env.ct("ls /var/cache/deploy/kernels").stdout.split()
    assert any(c.startswith(f"{stack}-") for c in caches), caches  # the first 0.5.23 stack's server made its own
    third = env.run("--json", "up", "host", env.host, "--skip-bench")
    assert third.rc == 0, third.text[-3000:]
    # What the budget counted, emptied and pruned, typed in `up --json` (the lines it prints: unit-tested).
    install = next(s for s in third.json["steps"] if s["name"] == "sglang_install")
    budget = install["details"]["disk_budget"]
    print("\ndisk_budget:", budget)
    assert abs(budget["budget_bytes"] - gb * 1e9) <= 1 and budget["counted"]["pip_cache_bytes"] > 0, budget
    assert budget["counted"]["total_bytes"] > budget["budget_bytes"] and len(budget["counted"]["stacks"]) == 5, budget
    assert budget["pruned"]["pip_cache_bytes"] == budget["counted"]["pip_cache_bytes"]  # emptied, then one stack
    assert [s["sha"] for s in budget["pruned"]["stacks"]] == [stack] == install["details"]["pruned"], budget
    assert budget["pruned"]["stacks"][0]["bytes"] == one, (budget, one)
    assert budget["kept"]["pip_cache_bytes"] == 0 and len(budget["kept"]["stacks"]) == 4 and not budget["over"]
    assert budget["kept"]["total_bytes"] <= budget["budget_bytes"]
    assert pip_cache_bytes(env, "/opt/deploy/stacks/.pip-cache") == 0
    assert env.ct(f"test -e /opt/deploy/stacks/{stack}").rc != 0
    after = env.ct("ls /var/cache/deploy/kernels").stdout.split()  # its kernel caches went with it, no other
    assert not any(c.startswith(f"{stack}-") for c in after) and set(caches) - set(after) == \
        {c for c in caches if c.startswith(f"{stack}-")}, (caches, after)

    # 0.1 GB cannot hold the adopted venv and the current release's stack, let alone a new one (each ~10 GB):
    # refused, nothing changed, the server still serving.
    release, listing = current(env), stacks_listing(env)
    releases = env.ct("ls /var/lib/deploy/releases").stdout
    env.set_profile(sglang_extras=["tracing", "http2"], stacks_disk_budget_gb=0.1)
    refused = env.run("up", "host", env.host, "--skip-bench")
    assert refused.rc == 2, refused.text[-3000:]
    assert "over stacks_disk_budget_gb 0.1 (100,000,000 bytes) even after pruning every other stack; nothing was " \
           "changed" in refused.stderr, refused.stderr
    assert "(estimated from the largest kept stack, " in refused.stderr, refused.stderr
    assert "raise profiles.glm5-nvfp4.stacks_disk_budget_gb" in refused.stderr, refused.stderr
    assert current(env) == release and stacks_listing(env) == listing
    assert env.ct("ls /var/lib/deploy/releases").stdout == releases
    assert env.ct("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/health").stdout == "200"
