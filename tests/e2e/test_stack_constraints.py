"""Constraints below sglang (issue 48 item 8), through the real CLI: the index moves a dependency sglang 0.5.12.post1
leaves unpinned (`deploy sim index publish kernels 0.19.1`, the build that breaks real `import sglang`); a new stack
without the profile's constraint resolves it, and `up` refuses it naming the failing import before any restart, the
previous release serving; the same change with `constraints: ["kernels<0.15"]` builds a stack that imports and
serves."""

from __future__ import annotations

from simulator.software.index import PUBLISHED_DIR
from tests.e2e.conftest import DeployEnv
from tests.e2e.test_stack_roll import health
from tests.e2e.test_stacks import current, server_python

BROKEN = "0.19.1"


def test_a_stack_that_does_not_import_is_refused_naming_the_import_and_the_constraint_builds_one_that_does(
        converged: DeployEnv) -> None:
    env = converged
    old, old_python = current(env), server_python(env)
    unit = env.ct("sha256sum /etc/systemd/system/sglang.service").stdout
    pub = env.run("--json", "sim", "index", "publish", "kernels", BROKEN, "--root", str(env.root))
    assert pub.rc == 0, pub.text
    try:
        # a stack change (the tracing extra) without the constraint: pip takes kernels 0.19.1
        env.set_profile(sglang_extras=["tracing"], constraints=[])
        bad = env.run("--json", "up", "host", env.host, "--skip-bench", timeout=600)
        assert bad.rc == 2, bad.text[-3000:]
        assert bad.json["error"] == "config-error" and bad.json["step"] == "server_unit", bad.json
        what = bad.json["what"]
        assert " does not import: ValueError: Either a revision or a version must be specified. in kernels.layer " \
               f"(kernels {BROKEN}), imported via sglang → kernels; its server could not start, so nothing was " \
               "restarted" in what, what
        assert f'constraints: ["kernels<{BROKEN}"]' in bad.json["fix"], bad.json["fix"]
        assert bad.json["details"]["import_error"]["distribution"] == "kernels"
        assert current(env) == old and server_python(env) == old_python and health(env) == "200"
        assert env.ct("sha256sum /etc/systemd/system/sglang.service").stdout == unit
        # the same change with the example's constraint: another stack, kernels below 0.15, serving
        env.set_profile(constraints=["kernels<0.15"])
        good = env.run("--json", "up", "host", env.host, "--skip-bench", timeout=600)
        assert good.rc == 0, good.text[-3000:]
        install = next(s for s in good.json["steps"] if s["name"] == "sglang_install")
        sha = install["details"]["stack"]
        assert install["summary"].startswith(f"built stack {sha} "), install
        freeze = env.ct(f"/opt/deploy/stacks/{sha}/bin/python -m pip freeze --disable-pip-version-check").stdout
        assert "kernels==0.14.1" in freeze.split(), freeze
        assert server_python(env) == f"/opt/deploy/stacks/{sha}/bin/python" and health(env) == "200"
    finally:
        for wheel in (env.root / PUBLISHED_DIR).glob("*.whl"):
            wheel.unlink()  # the session's index serves the wheelhouse alone again
