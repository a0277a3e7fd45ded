"""A fact: its name in the batch, the command that reads it, and the pure parser that turns the output into a value.

pyinfra's `FactBase[T]` is the model: a step asks for `ctx.facts.get(HOST.driver_version)` and gets the parsed
value (here `str | None`), never a command's text. A parser comes from `orchestrator.parsers` (or the domain's
own pure module) and may raise ParseError: `Facts.get` raises it where the step reads the fact, as the step's own
parsing did before. Where the exit code matters (absent against failed), the value says so (None, or a small
dataclass). No fact hands a step its raw output: a step that needs the exit code gets it in the value.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from orchestrator.inventory.models import Host, RouterSpec, ServerProfile
from orchestrator.parsers import ParseError
from orchestrator.remote.batch import CommandOutput

CmdFn = Callable[[Host, ServerProfile], str]
T = TypeVar("T")


def q(s: str) -> str:
    """One shell word (every remote argument is quoted)."""
    return shlex.quote(s)


def text(out: CommandOutput) -> str:
    """What the command printed, stripped (a one-word answer: `systemctl is-active`, curl's HTTP code)."""
    return out.stdout.strip()


def text_if_ok(out: CommandOutput) -> str | None:
    """The output of a read that succeeded; None when its command failed (a file that is absent)."""
    return out.stdout if out.rc == 0 else None


@dataclass(frozen=True)
class Fact(Generic[T]):
    """One read: its name in the batch, its command (from the host and profile), the parser of its output.

    Steps name facts by these objects (`ctx.facts.get(HOST.driver_version)`), never by string, so a typo is a
    mypy error rather than a KeyError in the middle of a run.
    """

    name: str
    command: CmdFn
    parse: Callable[[CommandOutput], T]


@dataclass(frozen=True)
class HostFact(Fact[T]):
    """A fact read on the PVE node; always read when a step names it."""


@dataclass(frozen=True)
class CtFact(Fact[T]):
    """A fact read inside the container, in its one inner batch; unknown (None) while it is not running."""


@dataclass(frozen=True)
class RouterFact(Generic[T]):
    """A read in the router's container: its name in the batch, its command (from the router section and the argv
    the probe checks), the parser of its output."""

    name: str
    command: Callable[[RouterSpec, Sequence[str]], str]
    parse: Callable[[CommandOutput], T]


@dataclass(frozen=True)
class Read(Generic[T]):
    """A read whose failure the step reports itself: `value` when the output parsed (else None), `ok` when the
    command exited 0, and `said`, what it printed (the evidence a step shows when there is no value)."""

    ok: bool
    value: T | None
    said: str = ""


def read_with(parse: Callable[[str], T], limit: int = 300) -> Callable[[CommandOutput], Read[T]]:
    """A fact parser that keeps a parse failure as a Read without value (its evidence cut to `limit`)."""
    def read(out: CommandOutput) -> Read[T]:
        try:
            return Read(out.rc == 0, parse(out.stdout))
        except ParseError:
            return Read(out.rc == 0, None, (out.stdout + out.stderr).strip()[:limit])

    return read


def if_ok(parse: Callable[[str], T]) -> Callable[[CommandOutput], T | None]:
    """A fact parser for a file or listing that may be absent: the parsed output when the command exited 0, else
    None (the parser's ParseError on output it cannot read still reaches the step)."""
    def read(out: CommandOutput) -> T | None:
        return parse(out.stdout) if out.rc == 0 else None

    return read


def of_stdout(parse: Callable[[str], T]) -> Callable[[CommandOutput], T]:
    """A fact parser that reads the output whatever the exit code (the parser judges it)."""
    def read(out: CommandOutput) -> T:
        return parse(out.stdout)

    return read


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What a change's command reported, typed: its exit code, the value parsed from its output, and `evidence`,
    what it said (stderr, else stdout, stripped), which an error message quotes through `said(limit)`."""

    rc: int
    value: T
    evidence: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def said(self, limit: int) -> str:
        """The evidence's last `limit` characters (as `RemoteResult.said`)."""
        return self.evidence[-limit:]


def outcome(parse: Callable[[str], T]) -> Callable[[CommandOutput], Outcome[T]]:
    """A parser of a change's report: the output parsed whatever the exit code, with the code and the evidence."""
    def read(out: CommandOutput) -> Outcome[T]:
        return Outcome(out.rc, parse(out.stdout), out.evidence)

    return read


def outcome_if_ok(parse: Callable[[str], T]) -> Callable[[CommandOutput], Outcome[T | None]]:
    """As `outcome`, but the output is parsed only when the command exited 0 (else the value is None: a failed
    command's output is evidence, not a value)."""
    def read(out: CommandOutput) -> Outcome[T | None]:
        return Outcome(out.rc, parse(out.stdout) if out.rc == 0 else None, out.evidence)

    return read
