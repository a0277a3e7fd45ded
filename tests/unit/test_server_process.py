"""Issue 38 item 2: the running sglang process a tune's bench run checks before it measures (pid, argv)."""

from __future__ import annotations

from orchestrator.parsers.server_process import ServerProcess, argv_difference, parse_server_process


def test_pid_and_argv_are_read_and_a_stopped_unit_has_no_process() -> None:
    text = "4242\n/opt/venv/bin/python\n-m\nsglang.launch_server\n--max-running-requests\n64\n"
    assert parse_server_process(text) == ServerProcess(4242, ("/opt/venv/bin/python", "-m", "sglang.launch_server",
                                                              "--max-running-requests", "64"))
    assert parse_server_process("0\n") == ServerProcess(None) == parse_server_process("")


def test_other_flags_are_named_and_the_same_argv_is_no_difference() -> None:
    release = ["python", "-m", "sglang.launch_server", "--max-running-requests", "64"]
    assert argv_difference(release, release) is None
    diff = argv_difference(["python", "-m", "sglang.launch_server", "--max-running-requests", "16"], release)
    assert diff == "it runs 16 where the release has 64"
    assert argv_difference(list(reversed(release)), release) == "the same words in another order"
