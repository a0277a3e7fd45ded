"""The container adapter: the only place that spells `pct exec` / `pct push` (the file layout is orchestrator.layout).

It rides on the node's SSH adapter the way `sudo` rides on `run`: every call becomes one command on the PVE node
that wraps the real command in `pct exec VMID -- …`. One quoting rule holds throughout: every argument is
`shlex.quote`d here (a shell snippet is one argument of `bash -c`); scripts travel on stdin inside a quoted
heredoc, so neither their text nor a secret in it shows in a process argument list.

The builders (`exec_command`, `shell_command`, `script_command`, `if_running`) are pure and return the node-side
command text, for callers that compose a larger node script (fact batches, the bench sampler); the runners
(`run`, `script`, `run_python`, `push_and_run`) spend exactly one SSH round trip each. The typed reads (`read`,
`read_output`, `read_script`, and `node_read`/`node_read_script` on the node) spend one too and hand the caller
the value its parser made of the output, never the printed text.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from orchestrator.layout import PATHS, ContainerPaths
from orchestrator.remote.batch import CommandOutput

if TYPE_CHECKING:  # paramiko loads only with the SSH adapter
    from orchestrator.inventory.models import Host
    from orchestrator.remote.ssh import CommandGuard, RemoteResult

__all__ = ["NOT_RUNNING", "PATHS", "Container", "ContainerPaths", "Node", "NodeShell", "heredoc", "node_read",
           "node_read_script"]


T = TypeVar("T")

#: Printed by `if_running` when the container is not running.
NOT_RUNNING = "__CT_NOT_RUNNING__"


class NodeShell(Protocol):
    """What the container adapter needs from the node's SSH adapter (SshHost, or a recording fake in tests)."""

    def run(self, command: str, *, stdin: str | None = None, timeout: float | None = None, check: bool = True,
            what: str = "", progress: Callable[[str], None] | None = None,
            progress_every_s: float = 2.0, each_line: Callable[[str], None] | None = None) -> RemoteResult: ...

    def script(self, body: str, *, timeout: float | None = None, check: bool = True,
               what: str = "") -> RemoteResult: ...


class Node(NodeShell, Protocol):
    """What the steps, the facts and the node's other adapters (the host lease, the PVE clients, the reboot) need
    of the node: commands and scripts, the one-round-trip batch, the connection and the guard that rides along
    (SshHost; in the steps' in-process tests the recording FakeNode)."""

    host: Host
    #: The host lease's check on every command (locks/lease.py), once taken.
    guard: CommandGuard | None
    #: Bumped on every new connection (the lease re-checks after a reconnect).
    generation: int

    def batch(self, commands: Mapping[str, str], *, timeout: float | None = None,
              what: str = "fact gathering") -> dict[str, CommandOutput]: ...

    def connect(self) -> object: ...

    def close(self) -> None: ...


def node_read(node: NodeShell, command: str, parse: Callable[[CommandOutput], T], *, check: bool = False,
              timeout: float | None = None, what: str = "") -> T:
    """A read of its own on the node (one round trip): the value `parse` makes of the command's output (its exit
    code and both streams, as a fact's parser reads them), never the printed text (`check`: a failure raises)."""
    return parse(node.run(command, check=check, timeout=timeout, what=what).output)


def node_read_script(node: NodeShell, body: str, parse: Callable[[CommandOutput], T], *,
                     timeout: float | None = None, what: str = "") -> T:
    """`node_read` for a script (its text on stdin): what a change's script reports, as `parse` types it."""
    return parse(node.script(body, check=False, timeout=timeout, what=what).output)


def heredoc(body: str, tag: str) -> str:
    """`<<'TAG'` + body + TAG: a quoted heredoc, so the body is never expanded by the node's shell."""
    if not body.endswith("\n"):
        body += "\n"
    if tag in body:
        raise ValueError(f"the script contains its heredoc terminator {tag}")
    return f"<<'{tag}'\n{body}{tag}\n"


class Container:
    """Commands, scripts and files inside one LXC container, through the PVE node's shell."""

    def __init__(self, node: NodeShell, vmid: int, paths: ContainerPaths = PATHS) -> None:
        self.node = node
        self.vmid = int(vmid)
        self.paths = paths

    # -- builders: node-side command text ------------------------------------------------------------------
    def exec_command(self, argv: Sequence[str]) -> str:
        """`pct exec VMID -- ARGV…`, every argument quoted."""
        return shlex.join(["pct", "exec", str(self.vmid), "--", *argv])

    def shell_command(self, shell: str) -> str:
        """A shell snippet run by bash in the container (the snippet is one quoted argument)."""
        return self.exec_command(["bash", "-c", shell])

    def script_command(self, body: str, *, tag: str = "DEPLOY_CT_EOF") -> str:
        """A script fed to bash in the container on stdin."""
        return self.exec_command(["bash", "-s"]) + " " + heredoc(body, tag)

    def stdin_command(self, argv: Sequence[str], body: str, *, tag: str) -> str:
        """ARGV in the container reading `body` on stdin (e.g. `python - ARGS` with a probe's source)."""
        return self.exec_command(argv) + " " + heredoc(body, tag)

    def push_command(self, node_path: str, ct_path: str, *, perms: str = "0644") -> str:
        """Copy a file that lies on the node into the container."""
        return shlex.join(["pct", "push", str(self.vmid), node_path, ct_path, "--perms", perms])

    def pull_command(self, ct_path: str, node_path: str) -> str:
        """Copy a file out of the container onto the node."""
        return shlex.join(["pct", "pull", str(self.vmid), ct_path, node_path])

    def if_running(self, command: str, *, otherwise: str = NOT_RUNNING, status_mark: str | None = None) -> str:
        """Run `command` only when the container runs; else print `otherwise` (no `pct exec` error noise).

        With `status_mark`, first print `MARK RC`, `pct status`'s output and `MARK` (lines of their own): the one
        `pct status` that decides also answers the caller's status question (a Perl program start on a node).
        """
        status = f"pct status {self.vmid} 2>/dev/null"
        if status_mark is None:
            return (f"if {status} | grep -q 'status: running'; then {command}; "
                    f"else echo {shlex.quote(otherwise)}; fi")
        mark = shlex.quote(status_mark)
        return (f"ct_status=$({status}); printf '%s %s\\n%s\\n%s\\n' {mark} \"$?\" \"$ct_status\" {mark}; "
                f"case \"$ct_status\" in *'status: running'*) {command} ;; *) echo {shlex.quote(otherwise)} ;; esac")

    # -- runners: one SSH round trip each ------------------------------------------------------------------
    def run(self, shell: str, *, timeout: float | None = None, check: bool = False, what: str = "",
            progress: Callable[[str], None] | None = None, stdin: str | None = None,
            each_line: Callable[[str], None] | None = None) -> RemoteResult:
        """A shell snippet in the container (`bash -c`); use `script` for anything long or secret. `stdin` is
        the snippet's input (a secret it reads, never in its argv); `each_line` sees every output line."""
        return self.node.run(self.shell_command(shell), timeout=timeout, check=check, what=what, progress=progress,
                             stdin=stdin, each_line=each_line)

    def read(self, shell: str, parse: Callable[[str], T], *, timeout: float | None = None, what: str = "") -> T:
        """A read of its own (one round trip): a shell snippet whose output `parse` judges, whatever its exit code
        (the parser's own errors reach the caller)."""
        return self.read_output(shell, lambda out: parse(out.stdout), timeout=timeout, what=what)

    def read_output(self, shell: str, parse: Callable[[CommandOutput], T], *, timeout: float | None = None,
                    what: str = "") -> T:
        """`read` for a parser that judges the exit code and both streams too (a `CommandOutput`, as a fact's)."""
        return node_read(self.node, self.shell_command(shell), parse, timeout=timeout, what=what)

    def read_script(self, body: str, parse: Callable[[CommandOutput], T], *, timeout: float | None = None,
                    what: str = "") -> T:
        """A script in the container (`script`) whose report `parse` types: a change's outcome, never its text."""
        return node_read_script(self.node, self.script_command(body), parse, timeout=timeout, what=what)

    def running(self, *, timeout: float | None = 60) -> bool:
        """One round trip: whether the container exists and runs."""
        res = self.node.run(self.if_running("true"), check=False, timeout=timeout, what=f"is CT {self.vmid} running")
        return res.rc == 0 and NOT_RUNNING not in res.stdout

    def script(self, body: str, *, timeout: float | None = None, check: bool = False,
               what: str = "") -> RemoteResult:
        """A bash script in the container; its text travels on stdin, never in argv."""
        return self.node.script(self.script_command(body), timeout=timeout, check=check, what=what)

    def run_python(self, venv: str, source: str, args: Sequence[str] = (), *, tag: str, timeout: float | None = None,
                   what: str = "") -> RemoteResult:
        """A Python program (its source on stdin) with the venv's interpreter: `python - ARGS…`."""
        command = self.stdin_command([self.paths.venv_python(venv), "-", *args], source, tag=tag)
        return self.node.script(command, timeout=timeout, check=False, what=what)

    def push_and_run(self, node_path: str, ct_path: str, argv: Sequence[str], *, perms: str = "0700",
                     timeout: float | None = None, what: str = "") -> RemoteResult:
        """Push a node file into the container, run it, remove it: one round trip (`set -e`)."""
        body = "\n".join(["set -e", self.push_command(node_path, ct_path, perms=perms),
                          self.exec_command(argv), self.exec_command(["rm", "-f", ct_path])])
        return self.node.script(body, timeout=timeout, check=False, what=what)
