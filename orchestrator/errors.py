"""One exception hierarchy: every user-facing failure names host, step, what failed and what to do.

The exit code is a property of the error class, so the CLI maps failures to codes in one place:
0 ok, 1 a check failed, 2 usage or configuration error, 3 remote or connection error; 130 interrupted (Ctrl-C),
143 terminated (SIGTERM). The `--json` document names the failure by a stable kebab-case code (`error_code`,
one table: ERROR_CODES), never by a class name.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class DeployError(Exception):
    """Base of every error the tool raises on purpose."""

    what: str
    fix: str = ""
    host: str = ""
    step: str = ""
    details: dict[str, object] = field(default_factory=dict)

    exit_code = 1

    def __post_init__(self) -> None:
        super().__init__(self.what)

    def __str__(self) -> str:
        where = " ".join(p for p in (f"host {self.host}" if self.host else "",
                                     f"step {self.step}" if self.step else "") if p)
        head = f"[{where}] {self.what}" if where else self.what
        return f"{head}\n  fix: {self.fix}" if self.fix else head

    def to_dict(self) -> dict[str, object]:
        return {
            "error": error_code(self),
            "what": self.what,
            "fix": self.fix,
            "host": self.host,
            "step": self.step,
            "exit_code": self.exit_code,
            **({"details": self.details} if self.details else {}),
        }

    def at(self, *, host: str | None = None, step: str | None = None) -> DeployError:
        """Fill in where the error happened without losing what the raiser said."""
        if host and not self.host:
            self.host = host
        if step and not self.step:
            self.step = step
        return self


class CheckFailed(DeployError):
    """A verification did not pass (P2P, health, smoke, correctness gate, throughput gate...)."""

    exit_code = 1


class ConfigError(DeployError):
    """Bad inventory, flags, playbook or command line: refused before any remote change."""

    exit_code = 2


class UsageError(ConfigError):
    """A command line the tool itself refuses (target words: `host` with no name, `--all` with names); click's own
    usage errors (unknown option, bad value) have the same `usage-error` code in --json documents."""


class PermissionDenied(ConfigError):
    """The API token lacks a PVE privilege (403). A configuration error: retrying cannot help, an ACL must change.

    Steps that ran before it may already have changed the host; a re-run after the grant continues from there.
    """


class Interrupted(DeployError):
    """The user stopped the run (Ctrl-C, SIGINT): the shell's code for death by SIGINT, never "a check failed"."""

    exit_code = 130


class Terminated(Interrupted):
    """The run was told to stop (SIGTERM)."""

    exit_code = 143


class HungUp(Interrupted):
    """The run's terminal went away (SIGHUP)."""

    exit_code = 129


class RemoteError(DeployError):
    """SSH, PVE API or a remote command failed."""

    exit_code = 3


class TaskFailed(RemoteError):
    """A PVE task ended with an error (its log tail in `details["log"]`), as opposed to one that could not be
    watched or outlasted the wait."""


class LockHeld(RemoteError):
    """Another deploy run holds the host lock."""


class LockLost(RemoteError):
    """This run's host lock expired and another run took it (or it is gone): the run stops changing the host."""


class HubRefused(RemoteError):
    """The model hub refused the weights download (a gated or private repo, a token without access or no token at
    all): each answer of the hub has its own message and fix (verdicts/weights.py)."""


class DiskFull(RemoteError):
    """The filesystem under the model path filled up during the weights download (its `df` line in the message)."""


class HostChanged(RemoteError):
    """A command that owns a host for many runs (a tune) found it changed by someone else between two of them:
    it stops without measuring or restoring anything, so it neither files false figures nor undoes their change."""


#: The `error` of a --json document: one stable code per error class (docs/json.md). A subclass not listed has
#: the code of its nearest listed base.
ERROR_CODES: dict[type, str] = {
    DeployError: "error",
    CheckFailed: "check-failed",
    ConfigError: "config-error",
    UsageError: "usage-error",
    PermissionDenied: "permission-denied",
    Interrupted: "interrupted",
    Terminated: "terminated",
    HungUp: "hung-up",
    RemoteError: "remote-error",
    LockHeld: "lock-held",
    LockLost: "lock-lost",
    HostChanged: "host-changed",
    HubRefused: "hub-refused",
    DiskFull: "disk-full",
}
#: A command line click refused (unknown option, missing argument, bad value): exit 2, no DeployError.
USAGE_ERROR = ERROR_CODES[UsageError]
#: A failure with no error object (a command that returned a non-zero exit code): the code of its exit code.
EXIT_CODE_ERRORS: dict[int, str] = {1: "check-failed", 2: "config-error", 3: "remote-error", 129: "hung-up",
                                    130: "interrupted", 143: "terminated"}


def error_code(err: DeployError | type[DeployError]) -> str:
    """The stable code of an error (or error class) for --json documents."""
    cls = err if isinstance(err, type) else type(err)
    return next(ERROR_CODES[c] for c in cls.__mro__ if c in ERROR_CODES)


def exit_code_error(exit_code: int) -> str | None:
    """The `error` code of a document whose command exited with `exit_code` (None for 0)."""
    return None if exit_code == 0 else EXIT_CODE_ERRORS.get(exit_code, "error")


def did_you_mean(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to a mistyped one (difflib), or None when none is close."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return close[0] if close else None


def unknown_name(kind: str, name: str, known: Iterable[str], *, fix: str, where: str = "") -> ConfigError:
    """`no KIND 'NAME'[ WHERE] (known: …)`, the fix led by "did you mean 'X'?" when a known name is close."""
    names = sorted(known)
    guess = did_you_mean(name, names)
    return ConfigError(f"no {kind} {name!r}{where} (known: {', '.join(names) or 'none'})",
                       fix=(f"did you mean {guess!r}? " if guess else "") + fix,
                       details={"known": names, "suggestion": guess})
