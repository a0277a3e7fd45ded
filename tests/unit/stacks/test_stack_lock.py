"""Stack locks (orchestrator/stack_lock.py): pip's report → lock, the lock file, pip's hash refusal, the
loader's checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator.cli.lock_cmd import lock_changes
from orchestrator.errors import ConfigError
from orchestrator.inventory.loader import load_inventory
from orchestrator.stacks.lock import (
    Lock,
    LockEntry,
    SourceOnly,
    hash_mismatches,
    installed_dists,
    lock_drift,
    lock_from_report,
    parse_lock,
    render_lock,
)
from orchestrator.stacks.stack import Stack, build_command
from tests.shared import EXAMPLE_INVENTORY, fixture

A, B, C = "a" * 64, "b" * 64, "c" * 64


def report(*items: tuple[str, str, str]) -> str:
    """pip install --dry-run --report - (format 1): pip 23.0 gives `hash`, newer pips `hashes` too."""
    return json.dumps({"version": "1", "install": [
        {"metadata": {"name": n, "version": v},
         "download_info": {"url": f"http://10.0.0.2/files/{n}-{v}-py3-none-any.whl",
                           "archive_info": {"hash": f"sha256={h}"}}} for n, v, h in items]})


def test_the_lock_is_pips_resolution_with_every_hash_and_reads_back() -> None:
    lock = lock_from_report(report(("sglang", "0.5.12.post1", A), ("Requests", "2.32.5", B)))
    text = render_lock(lock, profile="glm5", requirement="sglang==0.5.12.post1", index=" --index-url http://x/",
                       host="sim-1", at="2026-12-03T00:00:00+00:00")
    assert [ln for ln in text.splitlines() if not ln.startswith("#")] == [
        f"Requests==2.32.5 --hash=sha256:{B}", f"sglang==0.5.12.post1 --hash=sha256:{A}"]
    back = parse_lock(text, "locks/glm5.txt")
    assert back.sha == lock.sha and back.version_of("requests") == "2.32.5"


def test_a_report_without_a_hash_or_a_broken_line_is_refused() -> None:
    no_hash = json.dumps({"install": [{"metadata": {"name": "x", "version": "1"}, "download_info": {"url": "u"}}]})
    with pytest.raises(ValueError, match="the index gave no sha256 for x 1"):
        lock_from_report(no_hash)
    with pytest.raises(ConfigError) as err:
        parse_lock("# header\nsglang==0.5.23\n", "locks/p.txt")
    assert err.value.what == "locks/p.txt:2: 'sglang==0.5.23' is not `name==version --hash=sha256:HEX`"


def test_a_source_distribution_in_the_resolution_is_refused_naming_it_and_the_python() -> None:
    """pip's real report of sglang==0.5.23 for Python 3.13 (tests/fixtures/pip): outlines==0.1.11 pins
    outlines_core==0.1.26, which the index serves for cp313 as a source archive only (a Rust build)."""
    with pytest.raises(SourceOnly) as err:
        lock_from_report(fixture("pip/report-sglang-0.5.23-cp313.json"))
    assert err.value.sdists == (("outlines_core", "0.1.26", "outlines_core-0.1.26.tar.gz"),)
    assert str(err.value).startswith("the index serves no cp313 wheel of outlines_core 0.1.26 "
                                     "(outlines_core-0.1.26.tar.gz): pip would build it from source")
    assert "pip wheel --no-deps outlines_core==0.1.26" in err.value.fix and "3.11" in err.value.fix
    wheels_only = json.loads(fixture("pip/report-sglang-0.5.23-cp313.json"))
    wheels_only["install"] = [i for i in wheels_only["install"] if i["download_info"]["url"].endswith(".whl")]
    assert lock_from_report(json.dumps(wheels_only)).version_of("outlines") == "0.1.11"


def test_a_lock_is_part_of_the_identity_and_installs_with_require_hashes() -> None:
    lock = Lock((LockEntry("sglang", "0.5.23", A),))
    plain, locked = Stack("sglang==0.5.23", "0.5.23"), Stack("sglang==0.5.23", "0.5.23", lock=lock)
    other = Stack("sglang==0.5.23", "0.5.23", lock=Lock((LockEntry("sglang", "0.5.23", B),)))
    assert len({plain.sha, locked.sha, other.sha}) == 3
    command = build_command(locked, locked.venv)
    assert f"--require-hashes --no-deps -r /opt/deploy/stacks/{locked.sha}.lock.txt" in command
    assert f"sglang==0.5.23 --hash=sha256:{A}" in command
    assert command.endswith(f"|| {{ rc=$?; rm -rf {locked.venv}; exit $rc; }}")  # a refused build leaves no venv


#: pip 23's refusal, as it prints it (pip/_internal/exceptions.py HashMismatch).
PIP_REFUSAL = ("ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the "
               "package versions, please update the hashes. Otherwise, examine the package contents carefully; "
               "someone may have tampered with them.\n"
               f"    idna==3.10 from http://10.245.200.2:3141/files/idna-3.10-py3-none-any.whl#sha256={B} (from -r "
               "/opt/deploy/stacks/d1758495ae5f.lock.txt (line 9)):\n"
               f"        Expected sha256 {A}\n"
               f"             Got        {B}\n"
               f"    torch==2.9.1 from http://10.245.200.2:3141/files/torch-2.9.1-py3-none-any.whl#sha256={C}:\n"
               f"        Expected sha256 {B}\n"
               f"             Got        {C}\n")


def test_pips_hash_refusal_names_each_package() -> None:
    bad, torch = hash_mismatches(PIP_REFUSAL)
    assert (bad.name, bad.version, bad.expected, bad.got) == ("idna", "3.10", A, B)
    assert (torch.name, torch.url) == ("torch", f"http://10.245.200.2:3141/files/torch-2.9.1-py3-none-any.whl#sha256={C}")
    assert bad.describe() == "idna==3.10 (locked sha256 aaaaaaaaaaaa…, the index serves bbbbbbbbbbbb…)"
    assert hash_mismatches("ERROR: No matching distribution found for sglang==9") == []


def test_lock_changes_name_versions_and_rebuilt_files() -> None:
    old = Lock((LockEntry("sglang", "0.5.12.post1", A), LockEntry("torch", "2.9.1", B), LockEntry("gone", "1", C)))
    new = Lock((LockEntry("sglang", "0.5.23", A), LockEntry("torch", "2.9.1", C), LockEntry("new", "2", A)))
    assert lock_changes(old, new) == ["-gone==1", "+new==2", "sglang: 0.5.12.post1 → 0.5.23",
                                      "torch==2.9.1: another build (sha256 bbbbbbbbbbbb… → cccccccccccc…)"]


def test_the_loader_gives_a_profile_its_lock_and_refuses_a_lock_of_another_pin(tmp_path: Path) -> None:
    inv_dir = tmp_path / "inventory"
    shutil.copytree(EXAMPLE_INVENTORY, inv_dir)
    name = next(iter(load_inventory(inv_dir).profiles))
    version = load_inventory(inv_dir).profiles[name].sglang_version
    (inv_dir / "locks").mkdir()
    constraints = ", ".join(load_inventory(inv_dir).profiles[name].constraints) or "(none)"
    (inv_dir / "locks" / f"{name}.txt").write_text(f"# lock\n# constraints: {constraints}\n"
                                                   f"sglang=={version} --hash=sha256:{A}\n")
    profile = load_inventory(inv_dir).profiles[name]
    assert profile.lock_file == str(inv_dir / "locks" / f"{name}.txt") and profile.lock_text is not None
    (inv_dir / "locks" / f"{name}.txt").write_text(f"sglang==0.0.1 --hash=sha256:{A}\n")
    with pytest.raises(ConfigError) as err:
        load_inventory(inv_dir)
    assert err.value.exit_code == 2 and f"locks sglang 0.0.1, but profile {name} pins sglang_version" in err.value.what


def test_drift_names_each_distribution_the_venv_has_differently_from_its_lock() -> None:
    lock = Lock((LockEntry("sglang", "0.5.23", A), LockEntry("torch", "2.9.1+deploysim", B),
                 LockEntry("typing_extensions", "4.16.0", C), LockEntry("hf-xet", "1.8.0", A)))
    installed = installed_dists("sglang-0.5.23.dist-info\ntorch-2.9.1+deploysim.dist-info\n"
                                "typing_extensions-4.15.0.dist-info\npip-23.0.1.dist-info\nnumpy-2.4.0.dist-info\n")
    assert lock_drift(lock, installed) == ["hf-xet==1.8.0 missing",
                                           "typing_extensions: locked 4.16.0, installed 4.15.0",
                                           "+numpy==2.4.0 (not in the lock)"]
    clean = {k: v for k, v in installed.items() if k != "numpy"} | {"typing-extensions": "4.16.0", "hf-xet": "1.8.0"}
    assert lock_drift(lock, clean) == []
