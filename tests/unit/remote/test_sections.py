"""The batch script and its splitter, tested by really running the script with `bash -s`."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from orchestrator.parsers import ParseError
from orchestrator.remote.batch import (
    BATCH_WRITE_FAILED,
    CommandOutput,
    batch_failure,
    build_batch_script,
    new_nonce,
    split_batch_output,
)

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

NONCE = "a1b2c3d4e5f60718"

TRICKY = {
    "plain": "echo hello",
    "no-newline": "printf 'no newline'",
    "two-newlines": "printf 'x\\n\\n'",
    "empty": "true",
    "markers": "echo '@@DEPLOY:fake:END:plain:0@@'; echo '@@'; printf '@@DEPLOY:%s:STDERR:markers@@' x",
    "rc7": "echo out; echo err >&2; exit 7",
    "stderr_only": "echo 'only on stderr' >&2",
    "binary": "printf 'a\\000b\\377\\r\\n\\tz'",
    "reads-stdin": "cat; echo after",
    "quotes": "echo \"it's \\\"quoted\\\" \\$HOME\" | tr a-z A-Z",
    "no-errexit": "false; echo still-running",
}


def run_script(script: str) -> str:
    proc = subprocess.run(["bash", "-s"], input=script.encode(), capture_output=True, timeout=60, check=False)
    return proc.stdout.decode("utf-8", "surrogateescape")


def test_round_trip_tricky_commands() -> None:
    out = split_batch_output(run_script(build_batch_script(TRICKY, NONCE)), NONCE)
    assert list(out) == list(TRICKY)
    assert out["plain"] == CommandOutput(0, "hello\n", "")
    assert out["no-newline"].stdout == "no newline"
    assert out["two-newlines"].stdout == "x\n\n"
    assert out["empty"] == CommandOutput(0, "", "")
    assert out["markers"].stdout == "@@DEPLOY:fake:END:plain:0@@\n@@\n@@DEPLOY:x:STDERR:markers@@"
    assert out["rc7"] == CommandOutput(7, "out\n", "err\n")
    assert not out["rc7"].ok
    assert out["stderr_only"] == CommandOutput(0, "", "only on stderr\n")
    assert out["binary"].stdout == b"a\x00b\xff\r\n\tz".decode("utf-8", "surrogateescape")
    assert out["reads-stdin"].stdout == "after\n"  # stdin is /dev/null, the rest of the script is not eaten
    assert out["quotes"].stdout == "IT'S \"QUOTED\" $HOME\n"
    assert out["no-errexit"] == CommandOutput(0, "still-running\n", "")


def test_banner_before_and_after_is_ignored() -> None:
    raw = run_script(build_batch_script({"a": "echo A"}, NONCE))
    out = split_batch_output("Welcome to Proxmox\n" + raw + "logout\n", NONCE)
    assert out == {"a": CommandOutput(0, "A\n", "")}


def test_script_has_no_errexit_and_quotes_commands() -> None:
    script = build_batch_script({"x": "echo $(whoami); rm -rf /nonexistent-$BASHPID"}, NONCE)
    assert "set -e" not in script
    assert f"__deploy_run 1 @@DEPLOY:{NONCE}:END:x: 'echo $(whoami); rm -rf /nonexistent-$BASHPID' &" in script


def test_each_command_is_isolated_as_in_a_shell_of_its_own() -> None:
    """Commands are eval'ed in a subshell, not exec'ed as `bash -c`: what one does must not reach the others or the
    framing (an `exit`, a trap, variables, the working directory, the script's own positional parameters)."""
    out = split_batch_output(run_script(build_batch_script({
        "exits": "echo before; exit 5; echo never",
        "sets": "cd /; __deploy_d=/nonexistent; X=1; trap 'echo own-trap' EXIT; echo set",
        "args": "echo \"[$#:$1:$3]\"",
        "reads": "echo \"[${X:-unset}]\"; pwd",
        "killed": "echo half; kill -9 $BASHPID",
        "syntax": "if then",
    }, NONCE, parallel=1)), NONCE)
    assert out["exits"] == CommandOutput(5, "before\n", "")
    assert out["sets"] == CommandOutput(0, "set\nown-trap\n", "")  # its trap ran inside its own section
    assert out["args"].stdout == "[0::]\n"
    assert out["reads"].stdout.startswith("[unset]\n") and out["reads"].stdout != "[unset]\n/\n"
    assert out["killed"] == CommandOutput(137, "half\n", "")
    assert out["syntax"].rc == 2 and "syntax error" in out["syntax"].stderr


def test_a_command_naming_the_shells_pid_is_refused() -> None:
    """In the command's subshell `$$` is the batch script's PID: `kill $$` or a `/tmp/x.$$` shared by every command
    would reach the others, so the builder refuses it and names `$BASHPID`."""
    with pytest.raises(ValueError, match=r"\$BASHPID"):
        build_batch_script({"ok": "true", "pid": "echo $$"}, NONCE)


def test_the_script_starts_one_cat_and_no_shell_per_command(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The framing costs no process per command (each was ~1.5 ms of CPU on a VM-hosted node): counted with a
    `cat` on PATH that logs each run."""
    log = tmp_path / "runs"
    (tmp_path / "cat").write_text(f"#!/bin/sh\necho cat >> {log}\nexec {shutil.which('cat')} \"$@\"\n")
    (tmp_path / "cat").chmod(0o755)
    script = build_batch_script({f"c{i}": f"echo {i}" for i in range(12)}, NONCE)
    proc = subprocess.run(["bash", "-s"], input=script.encode(), capture_output=True, timeout=60, check=False,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    out = split_batch_output(proc.stdout.decode(), NONCE)
    assert [o.stdout for o in out.values()] == [f"{i}\n" for i in range(12)]
    assert log.read_text() == "cat\n"
    assert "bash -c" not in script


@pytest.mark.parametrize("name", ["Upper", "with space", "semi;colon", "", "a:b"])
def test_bad_names_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="name"):
        build_batch_script({name: "true"}, NONCE)


def test_bad_nonce_rejected() -> None:
    with pytest.raises(ValueError, match="nonce"):
        build_batch_script({"a": "true"}, "x'; rm -rf /")
    assert len(new_nonce()) >= 16


def test_truncated_output_names_missing_commands() -> None:
    raw = run_script(build_batch_script({"first": "echo 1", "second": "echo 2", "third": "echo 3"}, NONCE))
    cut = raw[: raw.index(f"@@DEPLOY:{NONCE}:STDERR:second@@") + 5]
    with pytest.raises(ParseError) as err:
        split_batch_output(cut, NONCE)
    assert "missing second, third" in str(err.value)
    assert "complete: first" in str(err.value)


def test_truncated_before_any_section_uses_plan_or_expected() -> None:
    raw = run_script(build_batch_script({"a": "echo 1", "b": "echo 2"}, NONCE))
    plan_only = raw.split("\n", 1)[0] + "\n"
    with pytest.raises(ParseError, match="missing a, b"):
        split_batch_output(plan_only, NONCE)
    with pytest.raises(ParseError, match="missing a, b"):
        split_batch_output("", NONCE, expected=["a", "b"])
    with pytest.raises(ParseError, match="no batch sections"):
        split_batch_output("ssh: connect to host 127.0.0.2 port 22: Connection refused\n", NONCE)


def test_wrong_nonce_finds_nothing() -> None:
    raw = run_script(build_batch_script({"a": "echo 1"}, NONCE))
    with pytest.raises(ParseError):
        split_batch_output(raw, "ffffffffffffffff")


def test_nested_batch_inside_a_command() -> None:
    inner_nonce = "0123456789abcdef"
    inner = build_batch_script({"x": "printf inner"}, inner_nonce)
    import shlex

    outer = split_batch_output(run_script(build_batch_script({"ct": f"bash -c {shlex.quote(inner)}"}, NONCE)),
                               NONCE)
    assert split_batch_output(outer["ct"].stdout, inner_nonce) == {"x": CommandOutput(0, "inner", "")}


def test_commands_run_at_the_same_time_and_report_in_order(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`first` waits for a file that only `second`, later in the batch, creates: run one after another, `first`
    would give up after 10 s and say so; run together, it sees the file. Outputs still come back in order."""
    flag = tmp_path / "second-ran"
    commands = {
        "first": f"for i in $(seq 100); do test -e {flag} && {{ echo saw-second; exit 0; }}; sleep 0.1; done; "
                 "echo alone; exit 3",
        "silent": "true",
        "second": f"touch {flag}; echo made",
        "failing": "echo partial; echo why >&2; exit 5",
    }
    out = split_batch_output(run_script(build_batch_script(commands, NONCE)), NONCE)
    assert list(out) == list(commands)
    assert out["first"] == CommandOutput(0, "saw-second\n", "")
    assert out["silent"] == CommandOutput(0, "", "")
    assert out["second"] == CommandOutput(0, "made\n", "")
    assert out["failing"] == CommandOutput(5, "partial\n", "why\n")


def test_no_more_than_parallel_commands_run_at_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    running = tmp_path / "running"
    running.mkdir()
    probe = (f"touch {running}/$BASHPID; sleep 0.3; ls {running} | wc -l; rm {running}/$BASHPID")
    out = split_batch_output(run_script(build_batch_script({f"c{i}": probe for i in range(6)}, NONCE, parallel=2)),
                             NONCE)
    seen = [int(o.stdout) for o in out.values()]
    assert len(seen) == 6 and max(seen) <= 2, seen
    assert max(seen) == 2, seen  # and they did overlap
    with pytest.raises(ValueError):
        build_batch_script({"a": "true"}, NONCE, parallel=0)


def test_overlapping_commands_keep_their_own_output_and_exit_code() -> None:
    """More commands than run at once (16 at the default 8), each writing its stdout and stderr line by line while
    the others do, finishing in the reverse of their order, with its own exit code: every section holds only its
    own lines, whole, and the code its command exited with, in the order given. One fails without a word, one is
    killed by a signal, one prints nothing and succeeds."""
    def chatty(i: int) -> str:
        return (f"for n in 1 2 3 4 5; do echo c{i}-out-$n; echo c{i}-err-$n >&2; sleep 0.0{9 - i % 8}; done; "
                f"exit {i % 4}")

    commands = {f"c{i}": chatty(i) for i in range(13)}
    commands |= {"fails-silently": "exit 9", "killed": "kill -TERM $BASHPID", "prints-nothing": "true"}
    out = split_batch_output(run_script(build_batch_script(commands, NONCE)), NONCE)
    assert list(out) == list(commands)
    for i in range(13):
        assert out[f"c{i}"] == CommandOutput(i % 4, "".join(f"c{i}-out-{n}\n" for n in range(1, 6)),
                                             "".join(f"c{i}-err-{n}\n" for n in range(1, 6)))
    assert out["fails-silently"] == CommandOutput(9, "", "")
    assert out["killed"].rc == 128 + 15 and out["killed"].stdout == ""
    assert out["prints-nothing"] == CommandOutput(0, "", "")



def test_a_full_disk_is_reported_not_read_as_empty_sections(full_tmpdir) -> None:  # type: ignore[no-untyped-def]
    """With no space left, every section would come back empty or cut off, as if the commands printed nothing.
    The script says so on stderr and exits with its own code, before printing any section."""
    script = build_batch_script({"a": "echo one", "b": "echo two"}, NONCE)
    proc = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": os.environ["PATH"], "TMPDIR": str(full_tmpdir)})
    assert proc.returncode == BATCH_WRITE_FAILED, proc
    assert "BEGIN:a@@" not in proc.stdout
    failure = batch_failure(proc.returncode, proc.stderr)
    assert failure is not None and "could not write its files in" in failure and "no space left?" in failure
    assert str(full_tmpdir) in failure  # df names the file system
    assert batch_failure(0, proc.stderr) is None and batch_failure(1, "") is None
