"""`roll --profile P` with a stack change (issue 35, "stack changes roll like flags"): P's stack (another sglang pin)
is built beside the running server, the flags are validated by its parser, the release runs on it through every
gate; a failure puts the previous release back with its own stack."""

from __future__ import annotations

import yaml

from tests.e2e.conftest import DeployEnv
from tests.e2e.test_stacks import OLD_VENV, RENAMED, current, server_python

NEXT = "glm5-next"


def add_next_profile(env: DeployEnv) -> None:
    """A second profile: the host's own at sglang 0.5.23 with the renamed flags (`nsa-*` → `dsa-*`)."""
    path = env.inventory / "profiles.yaml"
    data = yaml.safe_load(path.read_text())
    prof = dict(data["profiles"]["glm5-nvfp4"])
    flags = dict(prof["flags"])
    for key, value in RENAMED.items():
        if value is None:
            flags.pop(key, None)
        else:
            flags[key] = value
    data["profiles"][NEXT] = {**prof, "sglang_version": "0.5.23", "flags": flags}
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def health(env: DeployEnv) -> str:
    return env.ct("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/health").stdout


def test_roll_profile_builds_the_new_stack_beside_the_server_and_rolls_onto_it(converged: DeployEnv) -> None:
    """Before: `roll --profile` canonicalized the 0.5.23 profile's flags with the running 0.5.12.post1 parser and
    refused `--dsa-*`; the stack never changed."""
    env = converged
    old = current(env)
    add_next_profile(env)
    before = env.ct("ls /opt/deploy/stacks 2>/dev/null").stdout
    plan = env.run("--json", "roll", "host", env.host, "--profile", NEXT, "--dry-run")
    assert plan.rc == 0, plan.text[-2000:]
    assert env.ct("ls /opt/deploy/stacks 2>/dev/null").stdout == before  # a plan builds nothing
    assert any(s["name"] == "roll_stack" and s["status"] == "would-change" for s in plan.json["steps"]), plan.json
    res = env.run("--json", "roll", "host", env.host, "--profile", NEXT, "--skip-bench")
    assert res.rc == 0, res.text[-3000:]
    steps = {s["name"]: s for s in res.json["steps"]}
    built = steps["roll_stack"]
    assert built["status"] == "changed" and built["summary"].startswith("built stack "), built
    sha = built["details"]["stack"]
    assert current(env) != old and server_python(env) == f"/opt/deploy/stacks/{sha}/bin/python"
    assert "sglang 0.5.23" in steps["validate_flags"]["summary"], steps["validate_flags"]
    meta = env.ct(f"cat /var/lib/deploy/releases/{current(env)}/meta.json").stdout
    assert f'"sha": "{sha}"' in meta and health(env) == "200"
    # and back, flags and stack together, with no pip run
    back = env.run("--json", "rollback", "host", env.host, "--to", old)
    assert back.rc == 0 and current(env) == old and server_python(env) == f"{OLD_VENV}/bin/python", back.text


def test_a_failing_stack_roll_puts_the_previous_release_back_on_its_own_stack(converged: DeployEnv) -> None:
    env = converged
    old = current(env)
    add_next_profile(env)
    env.ct_faults(fatal="unsupported-arch", match="dsa-decode")
    try:
        res = env.run("--json", "roll", "host", env.host, "--profile", NEXT, "--skip-bench")
        assert res.rc != 0, res.text[-3000:]
        assert current(env) == old and server_python(env) == f"{OLD_VENV}/bin/python", res.text[-3000:]
        assert health(env) == "200"
        assert "Unsupported architecture" in res.text and f"rolled back to {old}" in res.json["what"], res.json
        built = next(s for s in res.json["steps"] if s["name"] == "roll_stack")
        assert built["summary"].startswith("built stack "), built
    finally:
        env.ct_faults(fatal=None, match=None)
