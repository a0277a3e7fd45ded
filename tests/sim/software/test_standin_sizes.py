"""The stand-in venv of each release measures what the real venv measures, as the disk budget reads it (`du -sb`),
and costs no more memory or disk than the stand-in's own files (issue 48 item 5).

Before: a stand-in venv was ~70 MB where the real 0.5.12.post1 venv is 9,844,450,267 bytes, so the budget
(`stacks_disk_budget_gb`) pruned and refused on sizes no real host has.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from simulator.software.real_sizes import CLOSURES, STANDIN_BASE_BYTES, real_size
from simulator.software.wheels import SGLANG_VERSIONS, pinned_standins, sglang_bytes

from .standins import make_venv


def du(path: Path, *args: str) -> int:
    out = subprocess.run(["du", "-s", *args, str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def want_bytes(release: str) -> int:
    """The real venv's bytes: measured where a real venv was measured, else the stand-ins' real bytes."""
    if release in CLOSURES:
        return CLOSURES[release].venv_bytes
    parts = [real_size(n, v) for n, v in pinned_standins(release)]
    return STANDIN_BASE_BYTES + sum(p.installed_bytes for p in parts if p is not None) + (sglang_bytes(release) or 0)


@pytest.mark.parametrize("release", SGLANG_VERSIONS)
def test_the_declared_bytes_add_up_to_the_real_venv(release: str) -> None:
    parts = {n: real_size(n, v) for n, v in pinned_standins(release)}
    assert all(p is not None for p in parts.values()), parts  # every stand-in it pins has a real size
    own = real_size("sglang", release)
    assert own is not None and own.wheel.startswith(f"sglang-{release}-cp311-")
    carried = sglang_bytes(release)
    assert carried is not None and carried >= own.installed_bytes  # sglang's own bytes, and what no stand-in models
    assert STANDIN_BASE_BYTES + carried + sum(p.installed_bytes for p in parts.values() if p) == want_bytes(release)


@pytest.mark.parametrize("release", SGLANG_VERSIONS)
def test_a_stand_in_venv_measures_the_real_bytes_in_holes(tmp_path: Path, release: str) -> None:
    venv = make_venv(tmp_path / "venv", f"sglang=={release}")
    root = tmp_path / "venv"
    before = du(root, "-b")
    assert before < 200_000_000, before  # pip wrote the stand-ins' few KB each: no Python has started in it yet
    assert venv.run(venv.bin("python"), "-c", "pass").returncode == 0  # any start: the .pth lines make the holes
    want = want_bytes(release)
    got = du(root, "-b")
    assert abs(got - want) < 0.01 * want, (got, want)  # the budget's `du -sb` sees the real venv
    assert du(root) * 1024 < 200_000_000  # in blocks (memory on a tmpfs) it is still the stand-in's
    # each package carries its own distribution's bytes: pip uninstall takes them with it (the ballast is in RECORD)
    torch = real_size("torch", dict(pinned_standins(release))["torch"])
    assert torch is not None
    assert venv.run(venv.bin("pip"), "uninstall", "-y", "-q", "torch").returncode == 0
    gone = got - du(root, "-b")
    assert abs(gone - torch.installed_bytes) < 1_000_000, (gone, torch)
