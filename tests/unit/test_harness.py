"""The test harness itself: the skip policy fails a run, host numbers avoid taken addresses, and the simulator's
address-in-use error tells an operator what to run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from simulator.manager import AddressInUse, _require_free
from tests import sim_hosts
from tests.skip_policy import GPU_SKIP_REASON

REPO = Path(__file__).resolve().parents[2]

PASSING = """
import pytest

def test_ok():
    assert 1 + 1 == 2

@pytest.mark.gpu
def test_needs_gpu():
    assert True
"""

OTHER_SKIP = PASSING + """
def test_tool_missing():
    pytest.skip("frobnicate is not installed")
"""

MODULE_SKIP = """
import pytest
pytest.skip("nothing here today", allow_module_level=True)
"""

GPU_REASON_UNMARKED = f"""
import pytest

def test_pretends():
    pytest.skip({GPU_SKIP_REASON!r})
"""


def run_pytest(tmp_path: Path, files: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """A separate pytest on these files with only the skip-policy plugin (not this suite's conftest, no plugin
    autoloading: it starts in a second even on a loaded machine)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    for name, source in files.items():
        (tmp_path / name).write_text(source)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.skip_policy", "-p", "no:cacheprovider",
                           "-rs", *files, *args], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=120)


def test_a_run_with_only_the_gpu_skip_passes(tmp_path: Path) -> None:
    res = run_pytest(tmp_path, {"test_sample.py": PASSING})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "skips that fail this run" not in res.stdout


def test_any_other_skip_fails_the_run_and_is_named(tmp_path: Path) -> None:
    res = run_pytest(tmp_path, {"test_sample.py": OTHER_SKIP, "test_module.py": MODULE_SKIP,
                                "test_unmarked.py": GPU_REASON_UNMARKED})
    assert res.returncode == 1, res.stdout + res.stderr
    failing = res.stdout.split("skips that fail this run")[1]
    assert "test_sample.py::test_tool_missing: frobnicate is not installed" in failing
    assert "test_module.py: nothing here today" in failing  # a skip at collection
    assert "test_unmarked.py::test_pretends" in failing  # the GPU reason counts only on a test marked gpu
    assert "test_needs_gpu" not in failing


def test_allow_skips_lets_a_local_run_pass(tmp_path: Path) -> None:
    res = run_pytest(tmp_path, {"test_sample.py": OTHER_SKIP}, "--allow-skips")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "skips (allowed by --allow-skips)" in res.stdout


def test_the_policy_holds_with_xdist_workers(tmp_path: Path) -> None:
    res = run_pytest(tmp_path, {"test_sample.py": OTHER_SKIP, "test_module.py": MODULE_SKIP}, "-p", "xdist",
                     "-n", "2")
    assert res.returncode == 1, res.stdout + res.stderr
    failing = res.stdout.split("skips that fail this run")[1]
    assert "frobnicate is not installed" in failing and "nothing here today" in failing


@pytest.fixture
def taken() -> Iterator[int]:
    """A host number whose sshd address:port this test occupies with a listening socket."""
    number = sim_hosts.find_free_start(1, start=240)
    with socket.socket() as s:
        s.bind((sim_hosts.address(number), 2222))
        s.listen()
        yield number


def test_a_listening_address_is_not_free(taken: int) -> None:
    assert not sim_hosts.number_free(taken)


def test_automatic_numbers_step_over_a_taken_address(taken: int) -> None:
    start = sim_hosts.find_free_start(3, start=taken)
    assert start > taken
    assert all(sim_hosts.number_free(n) for n in range(start, start + 3))


def test_deploy_sim_first_overrides_and_workers_get_disjoint_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sim_hosts.FIRST_ENV, "40")
    assert sim_hosts.choose_bases(2) == [40, 40 + sim_hosts.BLOCK]
    monkeypatch.setenv(sim_hosts.BASE_ENV, "40")  # one start (DEPLOY_SIM_FIRST by hand): the blocks follow on
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    first = [sim_hosts.sim_number(o) for o in (sim_hosts.OFFSET_SESSION_HOST, sim_hosts.OFFSET_VM_HOST)]
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    second = [sim_hosts.sim_number(o) for o in (sim_hosts.OFFSET_SESSION_HOST, sim_hosts.OFFSET_VM_HOST)]
    block = sim_hosts.BLOCK
    assert first == [40, 42] and second == [40 + block, 42 + block]
    monkeypatch.setenv(sim_hosts.FIRST_ENV, str(sim_hosts.LAST - 10))
    with pytest.raises(ValueError, match=f"DEPLOY_SIM_FIRST={sim_hosts.LAST - 10}"):
        sim_hosts.choose_bases(1)


def _taken(*numbers: int) -> Callable[[range], int | None]:
    return lambda window: next((n for n in window if n in numbers), None)


def test_blocks_are_found_between_and_past_other_simulated_hosts() -> None:
    """Issue 38: sim-170 and sim-240 taken left no 70 consecutive free numbers in 150-253, and the suite stopped
    with an INTERNALERROR. Blocks of 14 need not touch, and the search goes past 253 as `deploy sim` does."""
    block = sim_hosts.BLOCK
    assert sim_hosts.find_blocks(5, block, 150, 253, _taken(170, 240)) == [150, 171, 185, 199, 213]
    assert sim_hosts.find_blocks(8, block, 150, 400, _taken(170, 240)) == [150, 171, 185, 199, 213, 241, 255, 269]
    assert sim_hosts.find_blocks(1, 3, 150, 400, _taken(*range(150, 300))) == [300]
    assert sim_hosts.find_blocks(2, block, 150, 180, _taken(170)) is None  # truly no room
    assert sim_hosts.first_fit(3, 1, 10, _taken(2, 5)) == 6 and sim_hosts.first_fit(3, 1, 7, _taken(2, 5)) is None
    assert sim_hosts.LAST > 253 and sim_hosts.address(254) == "127.0.1.1"  # the simulator's numbering


def test_no_room_is_one_clear_usage_error_not_an_internalerror(tmp_path: Path) -> None:
    with pytest.raises(sim_hosts.NoRoom, match=r"no 3 free simulated host numbers from sim-\d+ .*deploy sim down"):
        sim_hosts.find_free_start(3, start=sim_hosts.LAST - 1)
    env = {**os.environ, sim_hosts.FIRST_ENV: str(sim_hosts.LAST)}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop(sim_hosts.BASE_ENV, None)
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "--collect-only",
                          "-q", "tests/unit/simulator/test_sim_address.py"], capture_output=True, text=True, cwd=REPO,
                         env=env, timeout=120)
    assert res.returncode == 4, res.stdout + res.stderr
    assert "INTERNALERROR" not in res.stdout + res.stderr
    assert f"ERROR: {sim_hosts.FIRST_ENV}={sim_hosts.LAST}: 1 block(s) of 14 numbers must fit" in res.stderr


def test_address_in_use_names_the_commands_not_python_arguments(taken: int) -> None:
    with pytest.raises(AddressInUse) as exc:
        _require_free(f"sim-{taken}", sim_hosts.address(taken), 2222)
    text = str(exc.value)
    assert f"{sim_hosts.address(taken)}:2222 is already in use" in text and f"sim-{taken}" in text
    assert "deploy sim down" in text and "--first N" in text and "DEPLOY_SIM_FIRST" in text
    assert "first=" not in text


def test_a_number_reserved_by_another_run_is_not_taken() -> None:
    number = sim_hosts.find_free_start(1, start=230, hold=True)  # "another run" holds it now
    held = sim_hosts._held[-1]
    try:
        assert sim_hosts.number_free(number)  # nothing listens there yet ...
        assert sim_hosts.find_free_start(1, start=number, hold=True) > number  # ... but it is reserved
        sim_hosts._held.pop().close()
    finally:
        held.close()


def test_claim_moves_off_a_number_taken_after_the_run_chose_its_block(taken: int,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulated host started after the run began (the demo, a root on sim-170) sits on a planned number: the
    claim proves the numbers free when it takes them and moves to free ones instead of failing "already in use"."""
    monkeypatch.delenv(sim_hosts.FIRST_ENV, raising=False)
    monkeypatch.setenv(sim_hosts.BASE_ENV, str(taken - sim_hosts.OFFSET_FLEET))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert sim_hosts.sim_number(sim_hosts.OFFSET_FLEET) == taken
    first = sim_hosts.claim(sim_hosts.OFFSET_FLEET, 3)
    try:
        assert taken not in range(first, first + 3)
        assert all(sim_hosts.number_free(n) for n in range(first, first + 3))
    finally:
        for _ in range(3):
            sim_hosts._held.pop().close()
    free = sim_hosts.claim(sim_hosts.OFFSET_FLEET + 1)  # the planned number itself when nothing sits on it
    assert free == taken + 1
