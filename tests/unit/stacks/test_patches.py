"""Stack patches (orchestrator/patches.py): parsing, identity, GNU patch's dry-run output → the error naming the patch
file and hunk, and the apply script run for real (bash and GNU patch, as in a container) on a site-packages tree.

The dry-run outputs in tests/fixtures/patch/ are GNU patch 2.7.6's, captured with the options the script uses
(`-p1 --dry-run --forward --batch --fuzz=0`) against the released sglang wheels' model_runner.py (copies in
tests/fixtures/sglang/wheels/, provenance in its README.md): the example patch on 0.5.23 (hunk failed) and on an
already patched 0.5.12.post1, and the example as it was before (it named kernel_warmup.py) on 0.5.12.post1."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.inventory.example import AUTOTUNE_PATCH
from orchestrator.inventory.loader import load_inventory
from orchestrator.resources import example_inventory_dir
from orchestrator.stacks.patches import (
    NOT_APPLIED_RC,
    apply_script,
    not_applied_error,
    parse_patch,
    patch_drift,
    read_apply_output,
    read_dry_run,
)
from orchestrator.stacks.stack import Stack, StackRecord, parse_stack_listing, record_for
from tests.shared import EXAMPLE_INVENTORY

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "patch"
TARGET = "sglang/srt/model_executor/model_runner.py"
STANDIN_FILE = REPO / "simulator" / "sglang_standin" / TARGET
#: The released wheels' files (tests/fixtures/sglang/wheels/README.md).
WHEELS = REPO / "tests" / "fixtures" / "sglang" / "wheels"


def example_text() -> str:
    return (example_inventory_dir() / AUTOTUNE_PATCH).read_text()


def test_the_example_patch_names_the_model_runner_file_and_its_one_hunk() -> None:
    p = parse_patch(example_text(), AUTOTUNE_PATCH)
    assert p.strip == 1
    assert p.paths == (TARGET,)
    (hunk,) = p.files[0].hunks
    assert hunk.number == 1 and hunk.header.startswith("@@ -") and hunk.old_start > 0


def test_bare_paths_are_strip_0_and_a_git_diff_is_strip_1() -> None:
    bare = "--- sglang/x.py\n+++ sglang/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    git = "diff --git a/sglang/x.py b/sglang/x.py\nindex 1..2 100644\n--- a/sglang/x.py\n+++ b/sglang/x.py\n" \
          "@@ -1 +1 @@\n-a\n+b\n"
    assert parse_patch(bare, "b.patch").strip == 0 and parse_patch(bare, "b.patch").paths == ("sglang/x.py",)
    assert parse_patch(git, "g.patch").strip == 1 and parse_patch(git, "g.patch").paths == ("sglang/x.py",)


@pytest.mark.parametrize(("text", "said"), [
    ("just some words\n", "is not a unified diff"),
    ("--- a/sglang/x.py\n+++ b/sglang/x.py\nno hunk here\n", "has no hunk"),
    ("--- /dev/null\n+++ b/sglang/new.py\n@@ -0,0 +1 @@\n+x\n", "creates or deletes"),
    ("--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", "outside the venv's site-packages"),
])
def test_a_patch_that_is_not_a_usable_unified_diff_is_refused_naming_it(text: str, said: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_patch(text, "patches/odd.patch")
    assert "patches/odd.patch" in err.value.what and said in err.value.what
    assert err.value.exit_code == 2


def test_the_patches_content_is_part_of_the_stack_identity_and_their_names_are_not() -> None:
    ex = parse_patch(example_text(), AUTOTUNE_PATCH)
    plain = Stack("sglang[srt]==0.5.23", "0.5.23")
    patched = Stack("sglang[srt]==0.5.23", "0.5.23", patches=(ex,))
    renamed = Stack("sglang[srt]==0.5.23", "0.5.23", patches=(parse_patch(ex.text, "patches/other-name.patch"),))
    edited = Stack("sglang[srt]==0.5.23", "0.5.23",
                   patches=(parse_patch(ex.text.replace("SM120 NVFP4", "SM120"), AUTOTUNE_PATCH),))
    other = parse_patch("--- a/sglang/x.py\n+++ b/sglang/x.py\n@@ -1 +1 @@\n-a\n+b\n", "x.patch")
    two = Stack("sglang[srt]==0.5.23", "0.5.23", patches=(ex, other))
    swapped = Stack("sglang[srt]==0.5.23", "0.5.23", patches=(other, ex))
    shas = {plain.sha, patched.sha, edited.sha, two.sha, swapped.sha}
    assert len(shas) == 5  # added, changed, another added, order: each is another stack
    assert renamed.sha == patched.sha


def test_a_failed_hunk_names_the_patch_file_the_file_and_the_hunk() -> None:
    bad = parse_patch(example_text().replace('"flashinfer_cutedsl",', '"flashinfer_cutedsl_v2",'), AUTOTUNE_PATCH)
    failure = read_dry_run(bad, (FIXTURES / "hunk-failed.txt").read_text())
    assert failure.file == TARGET and failure.hunk_number == 1 and failure.at_line == 2537
    assert failure.hunk is not None and failure.hunk.header == bad.files[0].hunks[0].header
    err = not_applied_error(failure, stack="0a1b2c3d4e5f", sglang="0.5.23", host="sim-20")
    assert err.exit_code == 2 and err.host == "sim-20"
    assert f"patch {AUTOTUNE_PATCH} does not apply to sglang 0.5.23 (stack 0a1b2c3d4e5f)" in err.what
    assert f"{TARGET}: hunk #1 ({bad.files[0].hunks[0].header}) does not apply" in err.what
    assert "server was not touched" in err.what and "rebase" in err.fix
    assert err.to_dict()["error"] == "config-error"
    assert err.details["file"] == TARGET and err.details["hunk"] == 1


def test_an_already_applied_patch_and_a_missing_file_say_so() -> None:
    ex = parse_patch(example_text(), AUTOTUNE_PATCH)
    again = read_dry_run(ex, (FIXTURES / "already-applied.txt").read_text())
    assert again.file == TARGET and "already applied" in again.describe()
    moved = parse_patch(example_text().replace("model_executor/model_runner", "model_executor/kernel_warmup"),
                        "m.patch")
    missing = read_dry_run(moved, (FIXTURES / "no-such-file.txt").read_text())
    assert missing.file == "sglang/srt/model_executor/kernel_warmup.py"
    assert "no such file in the venv's site-packages" in missing.describe()


def site_tree(tmp_path: Path, source: Path = STANDIN_FILE) -> tuple[Path, Path]:
    venv = tmp_path / "stacks" / "0a1b2c3d4e5f"
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / TARGET).parent.mkdir(parents=True)
    shutil.copy(source, site / TARGET)
    return venv, site


def run_script(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False)


def test_the_apply_script_checks_applies_and_reports_the_patched_files_sha256(tmp_path: Path) -> None:
    venv, site = site_tree(tmp_path)
    ex = parse_patch(example_text(), AUTOTUNE_PATCH)
    res = run_script(apply_script((ex,), str(venv), remove_on_failure=True))
    assert res.returncode == 0, res.stderr
    out = read_apply_output((ex,), res.stdout)
    assert out.failed is None
    body = (site / TARGET).read_bytes()
    assert out.patched == {TARGET: hashlib.sha256(body).hexdigest()}
    assert b'        "flashinfer_cutlass",\n' in body and b'# "flashinfer_cutlass"' not in body
    assert not list(site.rglob("*.orig")) and not list(site.rglob("*.rej"))


def test_the_example_patch_applies_to_the_released_sglang_0_5_12_post1_as_the_tool_applies_it(tmp_path: Path) -> None:
    """The real wheel's model_runner.py (not a stand-in): the tool's script (dry run with --fuzz=0, then apply) turns
    flashinfer_cutlass on in ModelRunner._should_run_flashinfer_autotune and changes nothing else."""
    real = WHEELS / "0.5.12.post1" / TARGET
    venv, site = site_tree(tmp_path, real)
    ex = parse_patch(example_text(), AUTOTUNE_PATCH)
    res = run_script(apply_script((ex,), str(venv), remove_on_failure=True))
    assert res.returncode == 0, res.stdout + res.stderr
    out = read_apply_output((ex,), res.stdout)
    assert out.failed is None and out.patched == {TARGET: hashlib.sha256((site / TARGET).read_bytes()).hexdigest()}
    before, after = real.read_text().splitlines(), (site / TARGET).read_text().splitlines()
    changed = [(i + 1, a, b) for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert [(n, b.strip()) for n, _, b in changed][-1] == (2539, '"flashinfer_cutlass",')
    assert len(changed) == 2 and "def _should_run_flashinfer_autotune" in "\n".join(before[2500:2520])


@pytest.mark.parametrize("release", ["0.5.12.post1", "0.5.23"])
def test_the_stand_in_applies_or_refuses_the_example_patch_as_the_real_release_does(tmp_path: Path,
                                                                                    release: str) -> None:
    """GNU patch's verdict on the stand-in's wheel equals its verdict on the released wheel: 0.5.12.post1 takes the
    example patch, 0.5.23 (which autotunes flashinfer_cutlass upstream) refuses it at its one hunk."""
    from simulator.software.wheels import sglang_spec

    verdicts = []
    for name, data in (("real", (WHEELS / release / TARGET).read_bytes()),
                       ("standin", sglang_spec(release).files[TARGET])):
        (tmp_path / name / TARGET).parent.mkdir(parents=True)
        (tmp_path / name / TARGET).write_bytes(data)
        res = subprocess.run(["patch", "--dry-run", "-p1", "--forward", "--batch", "--fuzz=0", "-d",
                              str(tmp_path / name), "-i", str(example_inventory_dir() / AUTOTUNE_PATCH)],
                             capture_output=True, text=True, check=False)
        verdicts.append((res.returncode, "FAILED" in res.stdout))
    assert verdicts[0] == verdicts[1] == ((0, False) if release == "0.5.12.post1" else (1, True))


def test_the_example_says_0_5_13_and_later_autotune_flashinfer_cutlass_upstream() -> None:
    """Checked in the released 0.5.23 wheel: flashinfer_cutlass is in moe_needs_autotune of
    runner/flashinfer_autotune.py, so the example tells a ≥ 0.5.13 profile to go without it."""
    upstream = (WHEELS / "0.5.23" / "sglang/srt/model_executor/runner/flashinfer_autotune.py").read_text()
    listed = upstream.split("moe_needs_autotune = backend_str in [", 1)[1].split("]", 1)[0]
    assert '"flashinfer_cutlass",' in listed and "#" not in listed
    assert "sglang 0.5.13 and later autotune flashinfer_cutlass upstream, without a patch" in example_text()


def test_a_patch_that_does_not_apply_removes_the_half_built_venv_and_names_the_hunk(tmp_path: Path) -> None:
    venv, _ = site_tree(tmp_path)
    ex = parse_patch(example_text(), AUTOTUNE_PATCH)
    bad = parse_patch(example_text().replace('"flashinfer_cutedsl",', '"flashinfer_cutedsl_v2",'), "patches/b.patch")
    res = run_script(apply_script((ex, bad), str(venv), remove_on_failure=True))
    assert res.returncode == NOT_APPLIED_RC
    out = read_apply_output((ex, bad), res.stdout)
    assert out.failed is not None and out.failed.patch == "patches/b.patch"
    assert out.failed.file == TARGET and out.failed.hunk_number == 1
    assert not venv.exists()  # never recorded, so never a stack


def test_an_adopted_venv_is_kept_when_its_patch_does_not_apply(tmp_path: Path) -> None:
    venv, site = site_tree(tmp_path)
    bad = parse_patch(example_text().replace('"flashinfer_cutedsl",', '"flashinfer_cutedsl_v2",'), "patches/b.patch")
    res = run_script(apply_script((bad,), str(venv), remove_on_failure=False))
    assert res.returncode == NOT_APPLIED_RC and (site / TARGET).read_bytes() == STANDIN_FILE.read_bytes()


def test_a_patched_file_changed_or_removed_since_the_build_is_named() -> None:
    rec = {TARGET: "a" * 64, "sglang/other.py": "b" * 64, "sglang/same.py": "c" * 64}
    now = {TARGET: "d" * 64, "sglang/other.py": None, "sglang/same.py": "c" * 64}
    drift = patch_drift(rec, now, [AUTOTUNE_PATCH])
    assert len(drift) == 2
    assert drift[0].startswith("sglang/other.py is missing from the stack's venv")  # sorted by path
    assert drift[1].startswith(f"{TARGET} changed behind the tool's back (sha256 aaaaaaaaaaaa… recorded")
    assert all(f"(patched by {AUTOTUNE_PATCH})" in d for d in drift)
    assert patch_drift(rec, {k: v for k, v in rec.items()}) == []


def test_a_patched_stacks_record_keeps_its_patches_and_file_hashes_through_the_listing() -> None:
    ex = parse_patch(example_text(), AUTOTUNE_PATCH)
    stack = Stack("sglang[srt]==0.5.23", "0.5.23", patches=(ex,))
    rec = record_for(stack, stack.venv, adopted=False, built_at="2026-12-04T12:00:00+00:00",
                     patched={TARGET: "e" * 64})
    back = parse_stack_listing(f"{rec.record_json()}\t0.5.23\n")[stack.sha]
    assert back.patches == (AUTOTUNE_PATCH,) and back.patched == {TARGET: "e" * 64} and back.usable
    assert rec.to_meta()["patches"] == [AUTOTUNE_PATCH]
    plain = StackRecord("abc", "/root/ml-env", "0.5.23", "sglang==0.5.23")
    assert "patches" not in plain.record_json() and "patches" not in plain.to_meta()


def test_the_loader_reads_a_profiles_patches_from_its_inventory_directory(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    shutil.copytree(EXAMPLE_INVENTORY, inv)
    (inv / "patches").mkdir(exist_ok=True)
    shutil.copy(example_inventory_dir() / AUTOTUNE_PATCH, inv / AUTOTUNE_PATCH)
    prof = inv / "profiles.yaml"
    prof.write_text(prof.read_text().replace("    # patches: [patches/", "    patches: [patches/", 1))
    loaded = load_inventory(inv)
    profile = next(p for p in loaded.profiles.values() if p.patches)
    assert profile.patches == [AUTOTUNE_PATCH]
    assert profile.patch_texts[AUTOTUNE_PATCH] == example_text()
    (inv / AUTOTUNE_PATCH).unlink()
    with pytest.raises(ConfigError) as err:
        load_inventory(inv)
    assert f"patch file {inv / AUTOTUNE_PATCH} does not exist" in err.value.what
    (inv / AUTOTUNE_PATCH).write_text("not a diff\n")
    with pytest.raises(ConfigError) as err:
        load_inventory(inv)
    assert "is not a unified diff" in err.value.what
