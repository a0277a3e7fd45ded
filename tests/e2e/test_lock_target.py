"""Locks per Python (issue 48 item 7), through the real CLI: `deploy lock` records the interpreter and platform pip
resolved for (the container's own python3) and the profile's constraints; a lock that names another Python is
refused before anything is built, naming both and the fix, the server untouched. The other Python is written into
the lock's header (a Debian 12 container is cp311; a lock made on a Debian 13 one says cp313)."""

from __future__ import annotations

from tests.e2e.conftest import DeployEnv
from tests.e2e.test_stack_roll import health
from tests.e2e.test_stacks import current

PROFILE = "glm5-nvfp4"


def test_a_lock_records_its_python_and_one_of_another_python_is_refused_before_any_build(
        converged: DeployEnv) -> None:
    env = converged
    locked = env.run("--json", "lock", PROFILE, "--host", env.host)
    assert locked.rc == 0, locked.text[-2000:]
    path = env.inventory / "locks" / f"{PROFILE}.txt"
    text = path.read_text()
    assert "\n# resolved for cp311 (cpython 3.11, linux x86_64)\n" in text, text[:600]
    assert "\n# constraints: kernels<0.15\n" in text and "\nkernels==0.14.1 --hash=sha256:" in text, text[:600]
    release, unit = current(env), env.ct("sha256sum /etc/systemd/system/sglang.service").stdout
    stacks = env.ct("ls /opt/deploy/stacks").stdout
    path.write_text(text.replace("# resolved for cp311 (cpython 3.11, linux x86_64)",
                                 "# resolved for cp313 (cpython 3.13, linux x86_64)"))
    plan = env.run("--json", "plan", "host", env.host)
    assert plan.rc == 2 and plan.json["step"] == "sglang_install", plan.text[-2000:]
    refused = env.run("--json", "up", "host", env.host, "--skip-bench")
    assert refused.rc == 2, refused.text[-2000:]
    assert refused.json["error"] == "config-error" and refused.json["step"] == "sglang_install", refused.json
    assert (f"{path} was resolved for cp313 (cpython 3.13, linux x86_64), but CT 120's python3 is cp311 (cpython "
            "3.11, linux x86_64): the locked wheels are not the ones this Python installs; nothing was built"
            ) == refused.json["what"], refused.json["what"]
    assert f"deploy lock {PROFILE} --host H` on a host of cp311" in refused.json["fix"]
    assert env.ct("ls /opt/deploy/stacks").stdout == stacks  # nothing built
    assert current(env) == release and env.ct("sha256sum /etc/systemd/system/sglang.service").stdout == unit
    assert health(env) == "200"
    path.write_text(text)  # the lock of this Python: built and served
    good = env.run("--json", "up", "host", env.host, "--skip-bench", timeout=600)
    assert good.rc == 0, good.text[-3000:]
    install = next(s for s in good.json["steps"] if s["name"] == "sglang_install")
    assert install["summary"].startswith("built stack "), install
