"""sglang_install with `patches:` (in-process, a fake node): a patched stack is built beside the profile's venv (never
adopted from it), its patches applied in one round trip after pip, the patched files' sha256 in its record; a patch
that does not apply is exit 2 naming the file and hunk, and the stack's record is never written."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.errors import ConfigError
from orchestrator.inventory.example import AUTOTUNE_PATCH
from orchestrator.resources import example_inventory_dir
from orchestrator.stacks.patches import FAILED_MARK, NOT_APPLIED_RC, PATCH_MARK, PATCHED_MARK, parse_patch
from orchestrator.stacks.stack import Stack
from tests.unit.steps.conftest import out
from tests.unit.steps.test_provision_steps import with_profile
from tests.unit.steps.test_software_steps import BARE_SHA, CONSTRAINTS, pip_succeeds

TARGET = "sglang/srt/model_executor/model_runner.py"
TEXT = (example_inventory_dir() / AUTOTUNE_PATCH).read_text()
PATCHED_SHA = Stack("sglang==0.5.12.post1", "0.5.12.post1", patches=(parse_patch(TEXT, AUTOTUNE_PATCH),),
                    constraints=CONSTRAINTS).sha
FILE_SHA = "5" * 64


def patched_run(make_run: Any) -> Any:
    """The shipped host, its profile's venv holding the pin with no record yet, the profile patched."""
    run = make_run({}, {"sglang_version": "0.5.12.post1\n", "stacks": out("", 0)})
    with_profile(run, patches=[AUTOTUNE_PATCH], patch_texts={AUTOTUNE_PATCH: TEXT})
    pip_succeeds(run, "0.5.12.post1")
    return run


def test_a_patched_stack_is_built_beside_the_profiles_venv_and_records_the_patched_files(make_run) -> None:
    run = patched_run(make_run)
    said = f"{PATCH_MARK}\t0\nchecking file {TARGET}\n{PATCHED_MARK}\t{TARGET}\t{FILE_SHA}\n"
    run.node.answer("deploy-patches", said)
    rec = run.step("sglang_install")
    assert rec.status == "changed"
    assert rec.summary == (f"built stack {PATCHED_SHA} (sglang 0.5.12.post1) in /opt/deploy/stacks/{PATCHED_SHA}, "
                           f"patched with {AUTOTUNE_PATCH}")
    adopt, patch, record = run.node.commands("script")
    assert f"/opt/deploy/stacks/{BARE_SHA}.json" in adopt  # the venv pip filled without the patch: the bare stack
    assert "patch --dry-run -p1 --forward --batch --fuzz=0" in patch
    assert patch.index("--dry-run") < patch.index("patch --no-backup-if-mismatch")
    assert f'"patched": {{"{TARGET}": "{FILE_SHA}"}}' in record and f"/opt/deploy/stacks/{PATCHED_SHA}.json" in record
    assert run.ctx.state.stack is not None and run.ctx.state.stack.patched == {TARGET: FILE_SHA}
    assert not run.node.sent("systemctl")


def test_a_patch_that_does_not_apply_is_exit_2_and_the_stack_is_never_recorded(make_run) -> None:
    run = patched_run(make_run)
    said = (f"{PATCH_MARK}\t0\nchecking file {TARGET}\nHunk #1 FAILED at 2537.\n1 out of 1 hunk FAILED\n"
            f"{FAILED_MARK}\t0\n")
    run.node.answer("deploy-patches", said, rc=NOT_APPLIED_RC)
    with pytest.raises(ConfigError) as err:
        run.step("sglang_install")
    assert err.value.exit_code == 2
    assert f"patch {AUTOTUNE_PATCH} does not apply to sglang 0.5.12.post1 (stack {PATCHED_SHA})" in err.value.what
    assert f"{TARGET}: hunk #1 (@@ -2537,4 +2537,4 @@) does not apply" in err.value.what
    assert not any(f"{PATCHED_SHA}.json" in c for c in run.node.commands("script"))
    assert f"rm -rf /opt/deploy/stacks/{PATCHED_SHA}; exit {NOT_APPLIED_RC}" in run.node.commands("script")[-1]
