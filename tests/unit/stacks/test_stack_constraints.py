"""Constraints below sglang (issue 48 item 8): a profile pins what sglang leaves open (`kernels<0.15` for
0.5.12.post1), the pins are part of the stack's identity, its pip install (`-c`) and its lock; and a stack whose
sglang does not import is named by the failing import, as the flags probe sees it in the venv.

The import failure is the stand-in's model of the real one: sglang 0.5.12.post1 requires `kernels` unpinned
(its wheel's METADATA), and with kernels 0.19.1 `import sglang` dies with `ValueError: Either a revision or a version
must be specified.` (issue 48, a clean Python 3.11 venv); the probe runs here on the stand-in's wheels unpacked into a
site-packages directory, with this machine's Python, as it runs in a container."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.errors import ConfigError
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import ServerProfile
from orchestrator.resources import flags_probe_source
from orchestrator.stacks.lock import (
    LockTarget,
    constraint_violations,
    lock_constraints,
    lock_from_report,
    parse_constraint,
    render_lock,
)
from orchestrator.stacks.stack import CONSTRAINTS_FILE, ImportFailure, Stack, build_command
from orchestrator.steps.locking import resolve_command
from simulator.software.wheels import build_wheel, kernels_spec, sglang_spec
from tests.shared import EXAMPLE_INVENTORY

A = "a" * 64


def site_packages(tmp_path: Path, kernels: str) -> Path:
    """The stand-in sglang 0.5.12.post1 and `kernels` at a version, as pip lays them out (dist-info included)."""
    site = tmp_path / kernels / "lib" / "python3" / "site-packages"
    for spec in (sglang_spec("0.5.12.post1"), kernels_spec(kernels)):
        with zipfile.ZipFile(build_wheel(spec, tmp_path / "wheels")) as zf:
            zf.extractall(site)
    return site


def probe(site: Path) -> dict:
    res = subprocess.run([sys.executable, "-", "sglang", json.dumps(["--model-path", "/m"])],
                         input=flags_probe_source(), capture_output=True, text=True, timeout=60, check=False,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_the_flags_probe_names_the_import_that_breaks_sglang_and_its_distribution(tmp_path: Path) -> None:
    data = probe(site_packages(tmp_path, "0.19.1"))
    assert data["ok"] is False and data["actions"] == []
    failure = ImportFailure.of(data.get("import_error"))
    assert failure is not None
    assert (failure.exception, failure.message) == ("ValueError", "Either a revision or a version must be specified.")
    assert failure.module == "kernels.layer" and (failure.distribution, failure.version) == ("kernels", "0.19.1")
    assert failure.chain[0] == "sglang" and failure.chain[-1] == "kernels.layer"
    said = failure.describe()
    assert said.startswith("ValueError: Either a revision or a version must be specified. in kernels.layer "
                           "(kernels 0.19.1), imported via sglang → kernels"), said
    assert 'constraints: ["kernels<0.19.1"]' in failure.fix("glm5-nvfp4") and "profiles.glm5-nvfp4" in \
        failure.fix("glm5-nvfp4")


def test_with_the_constrained_kernels_sglang_imports_and_the_parser_judges_the_flags(tmp_path: Path) -> None:
    data = probe(site_packages(tmp_path, "0.14.1"))
    assert data["ok"] is True and data["version"] == "0.5.12.post1" and "import_error" not in data


def test_constraints_are_part_of_the_identity_and_of_pips_install_and_resolution() -> None:
    plain = Stack("sglang==0.5.12.post1", "0.5.12.post1")
    pinned = Stack("sglang==0.5.12.post1", "0.5.12.post1", constraints=("kernels<0.15",))
    other = Stack("sglang==0.5.12.post1", "0.5.12.post1", constraints=("kernels<0.14",))
    two = Stack("sglang==0.5.12.post1", "0.5.12.post1", constraints=("kernels<0.15", "torch==2.11.0"))
    swapped = Stack("sglang==0.5.12.post1", "0.5.12.post1", constraints=("torch==2.11.0", "kernels<0.15"))
    assert len({plain.sha, pinned.sha, other.sha, two.sha}) == 4 and two.sha == swapped.sha
    cmd = build_command(pinned, pinned.venv)
    assert f"> {pinned.venv}/{CONSTRAINTS_FILE} && " in cmd and "'kernels<0.15\n'" in cmd
    assert f"-c {pinned.venv}/{CONSTRAINTS_FILE} sglang==0.5.12.post1" in cmd
    assert " -c " not in build_command(plain, plain.venv)
    assert "'kernels<0.15\n'" in resolve_command(pinned) and " -c /tmp/deploy-lock-venv/constraints.txt " in \
        resolve_command(pinned)


@pytest.mark.parametrize(("text", "said"), [
    ("kernels", "is not `name` and release comparisons"),
    ("kernels @ https://x/y.whl", "is not `name` and release comparisons"),
    ("sglang<0.6", "sglang is pinned by sglang_version"),
])
def test_a_constraint_that_is_not_a_pin_below_sglang_is_refused(text: str, said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        ServerProfile(model_path="/m", served_model_name="m", sglang_version="0.5.12.post1", constraints=[text])


def test_the_example_profile_carries_what_its_release_needs_to_import_today() -> None:
    (profile,) = load_inventory(EXAMPLE_INVENTORY).profiles.values()
    assert profile.sglang_version == "0.5.12.post1" and profile.constraints == ["kernels<0.15"]
    assert parse_constraint("kernels<0.15").allows("0.19.1") is False
    assert parse_constraint("kernels<0.15").allows("0.14.1") is True
    assert constraint_violations(["kernels<0.15"], {"kernels": "0.19.1", "torch": "2.11.0"}) == [
        "kernels 0.19.1 (constraint kernels<0.15)"]
    assert constraint_violations(["kernels<0.15"], {"torch": "2.11.0"}) == []


WHEEL = "http://10.0.0.2/files/sglang-0.5.12.post1-cp311-cp311-manylinux_2_34_x86_64.whl"


def test_the_lock_records_its_constraints_and_a_lock_of_other_constraints_is_refused(tmp_path: Path) -> None:
    report = json.dumps({"version": "1", "environment": {"implementation_name": "cpython", "python_version": "3.11",
                                                         "sys_platform": "linux", "platform_machine": "x86_64"},
                         "install": [{"metadata": {"name": "sglang", "version": "0.5.12.post1"},
                                      "download_info": {"url": WHEEL, "archive_info": {"hash": f"sha256={A}"}}}]})
    text = render_lock(lock_from_report(report), profile="glm5-nvfp4", requirement="sglang==0.5.12.post1", index="",
                       host="sim-1", at="2026-12-07T00:00:00+00:00", constraints=("kernels<0.15",),
                       target=LockTarget("cpython", "3.11", "linux", "x86_64"))
    assert "# constraints: kernels<0.15\n" in text and lock_constraints(text) == ("kernels<0.15",)
    inv = tmp_path / "inventory"
    shutil.copytree(EXAMPLE_INVENTORY, inv)
    (inv / "locks").mkdir()
    (inv / "locks" / "glm5-nvfp4.txt").write_text(text)
    assert load_inventory(inv).profiles["glm5-nvfp4"].lock_text == text
    (inv / "locks" / "glm5-nvfp4.txt").write_text(text.replace("# constraints: kernels<0.15", "# constraints: (none)"))
    with pytest.raises(ConfigError) as err:
        load_inventory(inv)
    assert "was resolved with no constraints, but profile glm5-nvfp4 has constraints kernels<0.15" in err.value.what
    assert "deploy lock glm5-nvfp4 --host HOST" in err.value.fix
