"""A regressed build published while the host runs (issue 35, simulator item): an unlocked stack change resolves it
and the gate catches it, the previous release serving again on its own stack; a lock made before the publish keeps
the locked files and the same change passes. Through the real CLI: `deploy sim index publish … --regression`."""

from __future__ import annotations

from simulator.software.index import PUBLISHED_DIR
from tests.e2e.conftest import DeployEnv
from tests.e2e.test_stack_roll import health
from tests.e2e.test_stacks import OLD_VENV, RENAMED, current, server_python

PROFILE = "glm5-nvfp4"
#: A local build of the flashinfer 0.5.23 pins (==0.7.2): it satisfies the pin and sorts above 0.7.2 (PEP 440).
BAD = "0.7.2+cu130"


def stack_freeze(env: DeployEnv, res_json: dict[str, object]) -> list[str]:
    steps = res_json["steps"]
    assert isinstance(steps, list)
    sha = next(s for s in steps if s["name"] == "roll_stack")["details"]["stack"]
    return env.ct(f"/opt/deploy/stacks/{sha}/bin/python -m pip freeze --disable-pip-version-check").stdout.split()


def test_a_regressed_flashinfer_fails_the_unlocked_roll_and_a_lock_keeps_the_good_build(converged: DeployEnv) -> None:
    env = converged
    old = current(env)
    env.set_profile(sglang_version="0.5.23", flags=RENAMED)  # the stack change: sglang 0.5.23, its kernel pins
    locked = env.run("--json", "lock", PROFILE, "--host", env.host)  # before the publish
    assert locked.rc == 0, locked.text[-2000:]
    lock = env.inventory / "locks" / f"{PROFILE}.txt"
    assert "flashinfer-python==0.7.2 --hash=sha256:" in lock.read_text(), lock.read_text()
    assert "sglang-kernel==0.4.10 --hash=sha256:" in lock.read_text()
    assert "torch==2.14.1 --hash=sha256:" in lock.read_text()
    aside = lock.rename(env.inventory / f"{PROFILE}.lock-aside")  # the unlocked change first
    pub = env.run("--json", "sim", "index", "publish", "flashinfer-python", BAD, "--regression", "nan",
                  "--root", str(env.root))
    assert pub.rc == 0 and pub.json["regression"] == "nan", pub.text
    try:
        # unlocked: pip resolves the bad build; its server answers NaN; the correctness gate puts the old one back
        bad = env.run("--json", "roll", "host", env.host, "--profile", PROFILE, "--skip-bench", timeout=600)
        assert bad.rc == 1, bad.text[-3000:]
        assert bad.json["step"] == "correctness", bad.json
        assert "correctness gate: prompt " in bad.json["what"] and "answers diverged" in bad.json["what"], bad.json
        assert f"rolled back to {old}" in bad.json["what"], bad.json["what"]
        assert current(env) == old and server_python(env) == f"{OLD_VENV}/bin/python" and health(env) == "200"
        assert f"flashinfer-python=={BAD}" in stack_freeze(env, bad.json)
        # locked before the publish: the same change installs the locked files and passes every gate
        aside.rename(lock)
        good = env.run("--json", "roll", "host", env.host, "--profile", PROFILE, "--skip-bench", timeout=600)
        assert good.rc == 0, good.text[-3000:]
        freeze = stack_freeze(env, good.json)
        assert "flashinfer-python==0.7.2" in freeze and "sglang-kernel==0.4.10" in freeze, freeze
        assert current(env) != old and health(env) == "200"
    finally:
        for wheel in (env.root / PUBLISHED_DIR).glob("*.whl"):
            wheel.unlink()  # the session's index serves the wheelhouse alone again


def test_an_unsupported_arch_kernel_build_dies_at_start_and_the_previous_release_serves(converged: DeployEnv) -> None:
    """The knob on another package: a sglang-kernel build whose server dies with the real line; no container fault."""
    env = converged
    old = current(env)
    env.set_profile(sglang_version="0.5.23", flags=RENAMED)
    pub = env.run("sim", "index", "publish", "sglang-kernel", "0.4.10+cu130", "--regression", "unsupported-arch",
                  "--root", str(env.root))
    assert pub.rc == 0, pub.text
    try:
        res = env.run("--json", "roll", "host", env.host, "--profile", PROFILE, "--skip-bench", timeout=600)
        assert res.rc != 0, res.text[-3000:]
        assert "Unsupported architecture" in res.text and f"rolled back to {old}" in res.json["what"], res.json
        assert "sglang-kernel==0.4.10+cu130" in stack_freeze(env, res.json)
        assert current(env) == old and server_python(env) == f"{OLD_VENV}/bin/python" and health(env) == "200"
    finally:
        for wheel in (env.root / PUBLISHED_DIR).glob("*.whl"):
            wheel.unlink()
