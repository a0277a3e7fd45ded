"""Stack patches (issue 35 item 4): `patches:` in a profile builds a new stack beside the running one with the patches
applied (checked with a dry run first), the server runs patched; a patched file edited in the container shows in
`status` and `plan`; a patch that does not apply is exit 2 naming the patch file and hunk, and the previous release
keeps serving."""

from __future__ import annotations

import json
import shutil

from orchestrator.inventory.example import AUTOTUNE_PATCH
from orchestrator.resources import example_inventory_dir
from tests.e2e.conftest import DeployEnv
from tests.e2e.test_stacks import current, server_python

TARGET = "sglang/srt/model_executor/model_runner.py"
BROKEN = "patches/broken.patch"


def health(env: DeployEnv) -> str:
    return env.ct("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/health").stdout


def test_a_patched_profile_builds_a_new_stack_that_runs_patched_and_a_patch_that_does_not_apply_is_refused(
        converged: DeployEnv) -> None:
    env = converged
    unpatched_release, unpatched_python = current(env), server_python(env)
    (env.inventory / "patches").mkdir(exist_ok=True)
    shutil.copy(example_inventory_dir() / AUTOTUNE_PATCH, env.inventory / AUTOTUNE_PATCH)
    env.set_profile(patches=[AUTOTUNE_PATCH])

    # plan says what up would build, and changes nothing
    plan = env.run("--json", "plan", "host", env.host)
    assert plan.rc == 0, plan.text[-2000:]
    planned = next(s for s in plan.json["steps"] if s["name"] == "sglang_install")
    assert planned["status"] == "would-change" and planned["summary"].startswith("build stack "), planned

    up = env.run("--json", "up", "host", env.host, "--skip-bench")
    assert up.rc == 0, up.text[-3000:]
    install = next(s for s in up.json["steps"] if s["name"] == "sglang_install")
    sha = install["details"]["stack"]
    built = f"built stack {sha} (sglang 0.5.12.post1) in /opt/deploy/stacks/{sha}, patched with {AUTOTUNE_PATCH}"
    # a new stack's first start is next: what it lacks is said (no stand-in stack carries nvcc, no simulated
    # container has a CUDA toolkit)
    assert install["summary"] == f"{built}; the first start lacks 1: nvcc", install
    assert [w.split(" (")[0] for w in install["details"]["toolchain_missing"]] == ["nvcc"], install
    venv = f"/opt/deploy/stacks/{sha}"
    assert current(env) != unpatched_release and server_python(env) == f"{venv}/bin/python" != unpatched_python
    # the running stack's file is patched, its sha256 recorded; the profile's old venv is untouched
    site = env.ct(f"ls -d {venv}/lib/python3*/site-packages").stdout.strip()
    patched_sha = env.ct(f"sha256sum {site}/{TARGET}").stdout.split()[0]
    record = json.loads(env.ct(f"cat /opt/deploy/stacks/{sha}.json").stdout)
    assert record["patches"] == [AUTOTUNE_PATCH] and record["patched"] == {TARGET: patched_sha}
    assert '        "flashinfer_cutlass",' in env.ct(f"cat {site}/{TARGET}").stdout
    assert '# "flashinfer_cutlass"' in env.ct(f"cat /root/ml-env/lib/python3*/site-packages/{TARGET}").stdout
    meta = json.loads(env.ct(f"cat /var/lib/deploy/releases/{current(env)}/meta.json").stdout)
    assert meta["stack"]["sha"] == sha and meta["stack"]["patches"] == [AUTOTUNE_PATCH]
    # the server read the patched module: flashinfer_cutlass autotuned on every rank, cache keyed as upstream
    journal = env.ct("journalctl -u sglang --no-pager -o cat").stdout
    tuned = [ln for ln in journal.splitlines() if "Running FlashInfer autotune with cache: " in ln]
    # under the release's managed kernel cache (orchestrator/caches.py), keyed on the installed flashinfer
    assert len(tuned) >= 8 and "/flashinfer/autotune/0.6.11.post1/sm120/" in tuned[-1], journal[-3000:]
    assert "with cache: /var/cache/deploy/kernels/" in tuned[-1], tuned[-1]
    assert tuned[-1].endswith("/rank_tp7_pp0_dp0.json")

    status = env.run("--json", "status", "host", env.host)
    assert status.rc == 0 and status.json["patch_drift"] == [] and status.json["stack"]["patches"] == [AUTOTUNE_PATCH]

    # a patched file edited in the container, behind the tool's back: status and plan name it
    assert env.ct(f"echo '# edited by hand' >> {site}/{TARGET}").rc == 0
    drift = env.run("--json", "status", "host", env.host).json["patch_drift"]
    assert len(drift) == 1 and drift[0].startswith(f"{TARGET} changed behind the tool's back (sha256 "
                                                   f"{patched_sha[:12]}"), drift
    text = env.run("status", "host", env.host)
    assert f"patched file changed: {TARGET} changed behind the tool's back" in text.stdout, text.stdout
    plan = env.run("--json", "plan", "host", env.host)
    planned = next(s for s in plan.json["steps"] if s["name"] == "sglang_install")
    assert planned["details"]["patch_drift"] == drift, planned
    assert f"PATCHED FILE CHANGED behind the tool's back: {TARGET}" in env.run("plan", "host", env.host).stdout
    assert env.ct(f"sed -i '$ d' {site}/{TARGET}").rc == 0  # put it back
    assert env.run("--json", "status", "host", env.host).json["patch_drift"] == []

    # a patch that does not apply: exit 2 naming the file and hunk, nothing changed, the patched release serves on
    serving, unit = current(env), env.ct("sha256sum /etc/systemd/system/sglang.service").stdout
    stacks_before = env.ct("ls /opt/deploy/stacks").stdout
    text = (example_inventory_dir() / AUTOTUNE_PATCH).read_text()
    (env.inventory / BROKEN).write_text(text.replace('"flashinfer_cutedsl",', '"flashinfer_cutedsl_v2",'))
    env.set_profile(patches=[AUTOTUNE_PATCH, BROKEN])
    refused = env.run("--json", "up", "host", env.host, "--skip-bench")
    assert refused.rc == 2, refused.text[-3000:]
    what = refused.json["what"]
    assert what.startswith(f"patch {BROKEN} does not apply to sglang 0.5.12.post1 (stack "), what
    assert f"{TARGET}: hunk #1 (@@ -" in what and "the server was not touched" in what, what
    assert refused.json["error"] == "config-error" and refused.json["step"] == "sglang_install"
    assert refused.json["details"]["file"] == TARGET and refused.json["details"]["hunk"] == 1
    assert current(env) == serving and env.ct("sha256sum /etc/systemd/system/sglang.service").stdout == unit
    assert server_python(env) == f"{venv}/bin/python" and health(env) == "200"
    assert env.ct("ls /opt/deploy/stacks").stdout == stacks_before  # the half-built stack is gone, unrecorded
