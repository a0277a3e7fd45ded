"""One SSH round trip for many commands: build the batch script, split its output back per command.

Why: every round trip costs latency (and counts against the performance goals), so a step reads all the facts
it needs with one script. Each command runs in a subshell of its own (`eval`, so `$$` is the script's PID: the
builder refuses it, `$BASHPID` is the command's) with stdout and stderr captured to temp files and stdin from
/dev/null (the script itself arrives on stdin with `bash -s`; a command reading stdin would eat the
rest of the script). Only after the command has finished are its outputs printed between framing lines, so
nothing a command prints can interleave with the framing. A random nonce in the framing keeps a command's own
output (even if it contains `@@DEPLOY:...`) from being taken for a marker.

Framing, per command, in order:

    @@DEPLOY:<nonce>:BEGIN:<name>@@\\n<stdout>\\n@@DEPLOY:<nonce>:STDERR:<name>@@\\n<stderr>\\n@@DEPLOY:<nonce>:END:<name>:<rc>@@\\n

preceded by one `@@DEPLOY:<nonce>:PLAN:<name> <name> ...@@` line, so the splitter can name the commands that
never started when the connection dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from orchestrator.parsers import ParseError
from orchestrator.scripts import render_script

__all__ = ["CommandOutput", "build_batch_script", "new_nonce", "split_batch_output"]

_NAME_RE = re.compile(r"^[a-z0-9_-]+$")
_NONCE_RE = re.compile(r"^[A-Za-z0-9]{8,64}$")


@dataclass(frozen=True)
class CommandOutput:
    """What one command of the batch produced; stdout and stderr byte-exact (as decoded text)."""

    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def evidence(self) -> str:
        """What the command said: its stderr, else its stdout, stripped (where a failing program says why)."""
        return (self.stderr or self.stdout).strip()

    def said(self, limit: int) -> str:
        """The evidence for an error message: at most its last `limit` characters."""
        return self.evidence[-limit:]


def new_nonce() -> str:
    """A fresh random nonce (the only non-pure helper here; callers may pass their own for reproducibility)."""
    import secrets

    return secrets.token_hex(12)


def _marker(nonce: str, *parts: str) -> str:
    return "@@DEPLOY:" + ":".join((nonce, *parts)) + "@@"


def _check(nonce: str, names: Iterable[str]) -> None:
    if not _NONCE_RE.match(nonce):
        raise ValueError(f"batch nonce must be 8-64 letters/digits, got {nonce!r}")
    for name in names:
        if not _NAME_RE.match(name):
            raise ValueError(f"batch command name must match [a-z0-9_-]+, got {name!r}")


#: The batch script's own exit codes: it could not make its temporary directory, or could not write its files there
#: (a full disk: its sections would come back cut off or empty, as if the commands had printed nothing).
BATCH_NO_TMPDIR = 97
BATCH_WRITE_FAILED = 96


def batch_failure(rc: int, stderr: str) -> str | None:
    """What stopped a batch script before it printed its sections (one of its own exit codes), else None."""
    if rc not in (BATCH_NO_TMPDIR, BATCH_WRITE_FAILED):
        return None
    line = next((ln for ln in reversed(stderr.splitlines()) if ln.startswith("deploy batch:")), "")
    return line.removeprefix("deploy batch: ") or f"the batch script exited {rc}"


#: Commands of one batch that run at the same time: the facts round trip costs about its slowest command, and a
#: PVE node (dozens of cores) or its container is not loaded by eight short reads at once.
BATCH_PARALLEL = 8


def build_batch_script(commands: Mapping[str, str], nonce: str, parallel: int = BATCH_PARALLEL) -> str:
    """A bash script (for `bash -s`) that runs the commands concurrently and frames their outputs in order.

    The commands must not depend on each other (every batch holds reads, plus `stop_leftovers`, which no read
    depends on). No `set -e`: one failing command must not hide the others' results; each rc is reported.
    `LC_ALL=C` keeps the output of date/ls/locale-aware tools in the format the parsers expect.
    """
    if parallel < 1:
        raise ValueError("a batch runs at least one command at a time")
    _check(nonce, commands)
    if not commands:
        raise ValueError("batch script needs at least one command")
    if pid_users := [name for name, command in commands.items() if "$$" in command]:
        raise ValueError(f"batch command(s) {', '.join(pid_users)} use $$, which in a batch is the script's PID, "
                         "shared by every command: use $BASHPID (the command's own subshell)")
    return render_script("batch.sh.j2", plan=_marker(nonce, "PLAN", " ".join(commands)), parallel=parallel,
                         no_tmpdir=BATCH_NO_TMPDIR, write_failed=BATCH_WRITE_FAILED, commands=[
        {"command": command, "begin": _marker(nonce, "BEGIN", name), "mid": _marker(nonce, "STDERR", name),
         "end_prefix": f"@@DEPLOY:{nonce}:END:{name}:"} for name, command in commands.items()])


#: What follows a command's END marker prefix: its exit code, the marker's end, a newline or the end of the output.
_END_TAIL = re.compile(r"(-?\d+)@@(?:\n|$)")


def _find_end(text: str, prefix: str, pos: int) -> tuple[int, re.Match[str]] | None:
    """The first `prefix` at or after `pos` that `_END_TAIL` completes: (where the prefix starts, the tail's match).
    A search by text and one shared pattern, not a pattern compiled per command (a batch has dozens)."""
    while (at := text.find(prefix, pos)) >= 0:
        if (tail := _END_TAIL.match(text, at + len(prefix))) is not None:
            return at, tail
        pos = at + 1
    return None


def split_batch_output(
    text: str, nonce: str, expected: Iterable[str] | None = None
) -> dict[str, CommandOutput]:
    """Split the batch output into per-command results, in script order.

    Exactly the framing newlines are removed: a command's output comes back as it printed it, with or without
    a trailing newline. Text outside the frames (login banners) is ignored. Raises ParseError naming the
    commands whose sections are missing or cut off (the connection dropped), using the PLAN line and/or
    `expected` to know what should have been there.
    """
    wanted: list[str] = list(expected) if expected is not None else []
    _check(nonce, wanted)
    esc = re.escape(nonce)
    plan_m = re.search(rf"^@@DEPLOY:{esc}:PLAN:([a-z0-9_ -]*)@@$", text, re.MULTILINE)
    if plan_m:
        wanted += [n for n in plan_m.group(1).split() if n not in wanted]

    results: dict[str, CommandOutput] = {}
    cut_off: list[str] = []
    begin_re = re.compile(rf"^@@DEPLOY:{esc}:BEGIN:([a-z0-9_-]+)@@\n", re.MULTILINE)
    pos = 0
    while True:
        b = begin_re.search(text, pos)
        if not b:
            break
        name = b.group(1)
        mid = f"\n{_marker(nonce, 'STDERR', name)}\n"
        i = text.find(mid, b.end())
        e = _find_end(text, f"\n@@DEPLOY:{nonce}:END:{name}:", i + len(mid)) if i >= 0 else None
        if i < 0 or e is None:
            cut_off.append(name)
            break
        end_at, tail = e
        results[name] = CommandOutput(
            rc=int(tail.group(1)), stdout=text[b.end() : i], stderr=text[i + len(mid) : end_at]
        )
        pos = tail.end()

    missing = [n for n in wanted if n not in results]
    for n in cut_off:
        if n not in missing:
            missing.append(n)
    if missing:
        got = f"; complete: {', '.join(results)}" if results else ""
        raise ParseError(
            f"batch output is truncated (connection dropped?): missing {', '.join(missing)}{got}",
            text[-400:],
        )
    if not results and not wanted:
        raise ParseError("no batch sections in output (wrong nonce or not a batch script's output)", text)
    return results
