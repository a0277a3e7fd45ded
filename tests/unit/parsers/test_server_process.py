"""Issue 38 item 2: the running sglang process a tune's bench run checks before it measures (pid, argv)."""

from __future__ import annotations

from orchestrator.parsers.server_process import ServerProcess, argv_difference, parse_server_process


def test_pid_state_restarts_and_argv_are_read_and_a_stopped_unit_has_no_process() -> None:
    text = ("MainPID=4242\nActiveState=active\nNRestarts=2\n--\n"
            "/opt/venv/bin/python\n-m\nsglang.launch_server\n--max-running-requests\n64\n")
    proc = parse_server_process(text)
    assert proc == ServerProcess(4242, ("/opt/venv/bin/python", "-m", "sglang.launch_server",
                                        "--max-running-requests", "64"), state="active", restarts=2)
    assert proc.settled
    stopped = parse_server_process("MainPID=0\nActiveState=inactive\nNRestarts=0\n--\n")
    assert stopped == ServerProcess(None, state="inactive", restarts=0)
    assert parse_server_process("").pid is None and parse_server_process("").restarts is None


def test_a_stop_that_waits_for_the_process_is_not_settled() -> None:
    """Real sglang drains on SIGTERM (answering /health 503): the old pid is still there, the unit deactivating."""
    proc = parse_server_process("ActiveState=deactivating\nMainPID=4242\nNRestarts=0\n--\npython\n")
    assert proc.pid == 4242 and proc.argv == ("python",) and not proc.settled


def test_other_flags_are_named_and_the_same_argv_is_no_difference() -> None:
    release = ["python", "-m", "sglang.launch_server", "--max-running-requests", "64"]
    assert argv_difference(release, release) is None
    diff = argv_difference(["python", "-m", "sglang.launch_server", "--max-running-requests", "16"], release)
    assert diff == "it runs 16 where the release has 64"
    assert argv_difference(list(reversed(release)), release) == "the same words in another order"
