"""Gathering: every fact the steps read, from the host and the container, in ONE SSH round trip.

Host facts run on the PVE node; container facts run inside the container through ONE command of the container
adapter that carries its own inner batch, so reading a dozen container facts costs one container exec, not a dozen.
The container's batch waits for its boot to settle first (`settle_boot_script`); the router's container is read
the same way (`settled_batch`, `split_settled`). Facts keep the outputs by name; `get` returns a fact's parsed
value.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, overload

from orchestrator.errors import CheckFailed, RemoteError
from orchestrator.facts.base import CtFact, Fact, HostFact
from orchestrator.facts.container import CT
from orchestrator.facts.host import HOST
from orchestrator.inventory.models import Host, ServerProfile
from orchestrator.remote.batch import CommandOutput, batch_failure, build_batch_script, split_batch_output
from orchestrator.remote.container import NOT_RUNNING, Container, Node

T = TypeVar("T")

#: Before reading a container's facts: wait until its systemd has finished booting (enabled units started), so the
#: facts say what the boot leaves behind rather than a moment in the middle of it. `pct start` returns once LXC says
#: the container runs, and `pct exec` does not wait for its systemd either; after a host reboot pve-guests starts the
#: container while nobody watches. So every container read waits (a booted container answers at once), bounded:
#: early in a boot `systemctl` cannot reach systemd yet ("Failed to connect to bus", no output), which is asked again
#: until the bound; a boot that has not reached `running` or `degraded` within BOOT_WAIT_S prints BOOT_UNSETTLED and
#: its state, and no fact is read.
BOOT_WAIT_S = 120
BOOT_UNSETTLED = "__CT_BOOT_UNSETTLED__"
BOOT_STATES = ("running", "degraded")


def settle_boot_script(wait_s: int) -> str:
    """The shell that waits for the container's boot (at most wait_s seconds), or prints why it gave up."""
    return (f"boot_end=$(( $(date +%s) + {int(wait_s)} )); "
            "while :; do boot_left=$(( boot_end - $(date +%s) )); "
            '[ "$boot_left" -gt 0 ] || boot_left=1; '
            'boot_state=$(timeout "$boot_left" systemctl is-system-running --wait 2>/dev/null); '
            f'case "$boot_state" in {"|".join(BOOT_STATES)}) break ;; '
            '""|offline|initializing|starting) [ "$(date +%s)" -lt "$boot_end" ] && { sleep 0.2; continue; } ;; '
            f'esac; echo "{BOOT_UNSETTLED} ${{boot_state:-no answer}}"; exit 0; done')


SETTLE_BOOT = settle_boot_script(BOOT_WAIT_S)


def settled_batch(commands: Mapping[str, str], nonce: str) -> str:
    """The container's inner batch behind the boot settle: no fact is read from a half-booted container."""
    return f"{SETTLE_BOOT}\n{build_batch_script(commands, nonce)}"


def split_settled(raw: CommandOutput, nonce: str, *, vmid: int, host: str = "",
                  expected: Iterable[str] | None = None) -> dict[str, CommandOutput]:
    """A settled batch's sections (`settled_batch`, the server's container or the router's); a boot that did not
    settle is CheckFailed, a batch that could not write its files or output cut short a RemoteError that says so (a
    full container disk would otherwise read as facts that printed nothing)."""
    unsettled = re.search(rf"^{BOOT_UNSETTLED} (.*)$", raw.stdout, re.MULTILINE)
    if unsettled:
        raise CheckFailed(
            f"CT {vmid} did not finish booting within {BOOT_WAIT_S} s: its systemd says "
            f"{unsettled.group(1).strip()!r} (waited for `systemctl is-system-running --wait` to say "
            f"{' or '.join(BOOT_STATES)}); no facts were read from the half-booted container",
            fix=f"see what the boot waits for: `pct exec {vmid} -- systemctl list-jobs` and "
                f"`pct exec {vmid} -- systemctl --failed` on the host; fix or disable that unit, then run "
                "deploy up again", host=host, details={"boot_state": unsettled.group(1).strip()})
    failure = batch_failure(raw.rc, raw.stderr)
    if failure is not None:
        raise RemoteError(f"CT {vmid} could not run its facts batch: {failure}",
                          fix=f"free space in the container (`pct exec {vmid} -- df -h /tmp` on the host shows "
                              "it), then run again", host=host)
    try:
        return split_batch_output(raw.stdout, nonce, expected)
    except ValueError as exc:
        said = next((ln.strip() for ln in reversed(raw.stderr.splitlines()) if ln.strip()), "")
        raise RemoteError(f"CT {vmid}'s facts came back cut short (exit {raw.rc}"
                          + (f", {said!r}" if said else "") + f"; {exc})",
                          fix=f"run again; if it repeats, see what ends `pct exec {vmid}` early (its free space: "
                              f"`pct exec {vmid} -- df -h /tmp`)", host=host) from exc


def _status_mark(nonce: str) -> str:
    return f"@@DEPLOY:{nonce}:PCT_STATUS@@"


def _named(ns: type, kind: type[Fact[Any]]) -> dict[str, Any]:
    facts = {f.name: f for f in vars(ns).values() if isinstance(f, kind)}
    assert all(getattr(ns, n) is f for n, f in facts.items()), f"a {ns.__name__} attribute is not its fact's name"
    return facts


#: Every fact by its batch name (the batch output comes back by name); steps never look facts up here.
HOST_FACTS: dict[str, HostFact[Any]] = _named(HOST, HostFact)
CT_FACTS: dict[str, CtFact[Any]] = _named(CT, CtFact)


class Facts:
    """Raw outputs by fact name (internal: look them up with `get(HOST.x)` / `get(CT.x)`); `ct` is empty when
    the container is absent or not running."""

    def __init__(self, ssh: Node, host: Host, profile: ServerProfile, container: Container | None = None) -> None:
        self.ssh = ssh
        self.host_cfg = host
        self.profile = profile
        self.container = container or Container(ssh, host.container.vmid)
        self.host: dict[str, CommandOutput] = {}
        self.ct: dict[str, CommandOutput] = {}
        self.ct_running = False
        #: Set once the playbook's union of facts has been read (see steps.session.ensure_facts).
        self.gathered = False

    def _ct_command(self, facts: Iterable[CtFact[Any]], *, with_status: bool) -> tuple[str, str]:
        """The container's inner batch, behind the boot settle: no fact is read from a half-booted container.

        With `with_status`, the `pct status` that guards it is framed in its output as HOST.ct_status's answer
        (see `_take_status`): the same program, arguments and moment as that fact's own command, so the batch
        runs one `pct status` instead of two.
        """
        nonce = secrets.token_hex(8)
        inner = settled_batch({f.name: f.command(self.host_cfg, self.profile) for f in facts}, nonce)
        mark = _status_mark(nonce) if with_status else None
        return self.container.if_running(self.container.shell_command(inner), status_mark=mark), nonce

    def _take_status(self, raw: CommandOutput, nonce: str) -> CommandOutput:
        """HOST.ct_status from the framed `pct status` at the start of the container command's output; the rest
        is returned. The frame is printed by the node's shell before anything runs in the container, so it is
        anchored at the start and carries this batch's nonce."""
        mark = re.escape(_status_mark(nonce))
        m = re.match(rf"{mark} (-?\d+)\n(.*?)\n{mark}\n", raw.stdout, re.DOTALL)
        if m is None:
            raise RemoteError("the container facts came back without the `pct status` that guards them",
                              fix=f"run again; if it repeats, run `pct status {self.host_cfg.container.vmid}` on "
                                  "the host to see why it fails", host=self.host_cfg.name)
        status = m.group(2)
        self.host[HOST.ct_status.name] = CommandOutput(int(m.group(1)), status + "\n" if status else "", "")
        return CommandOutput(raw.rc, raw.stdout[m.end():], raw.stderr)

    def gather(self, host_facts: Iterable[HostFact[Any]], ct_facts: Iterable[CtFact[Any]], *,
               extra: dict[str, str] | None = None, what: str = "fact gathering") -> dict[str, CommandOutput]:
        """One round trip for all given facts; `extra` commands ride along and are returned.

        Container facts are read only once the container's boot has settled (SETTLE_BOOT, same round trip).
        """
        host_list = sorted(set(host_facts), key=lambda f: f.name)
        commands = {f.name: f.command(self.host_cfg, self.profile) for f in host_list}
        ct_list = sorted(set(ct_facts), key=lambda f: f.name)
        nonce = ""
        shared_status = bool(ct_list) and HOST.ct_status in host_list
        if shared_status:
            del commands[HOST.ct_status.name]
        if ct_list:
            commands["ct_facts"], nonce = self._ct_command(ct_list, with_status=shared_status)
        commands.update(extra or {})
        out = self.ssh.batch(commands, what=what)
        for f in host_list:
            if not (shared_status and f is HOST.ct_status):
                self.host[f.name] = out[f.name]
        if ct_list:
            raw_ct = out.pop("ct_facts")
            if shared_status:
                raw_ct = self._take_status(raw_ct, nonce)
            self.record_ct(raw_ct, [f.name for f in ct_list], nonce)
        return {k: v for k, v in out.items() if k in (extra or {})}

    def record_ct(self, raw: CommandOutput, names: Iterable[str], nonce: str) -> None:
        """Split the container's inner batch (or note that the container is not running)."""
        if NOT_RUNNING in raw.stdout and BOOT_UNSETTLED not in raw.stdout:
            self.ct_running = False
            for name in names:
                self.ct.pop(name, None)
        else:
            self.ct.update(split_settled(raw, nonce, vmid=self.host_cfg.container.vmid, host=self.host_cfg.name))
            self.ct_running = True

    @property
    def ct_state(self) -> str | None:
        """`pct status` of the container ("running", "stopped", …); None when absent or not read."""
        return self.find(HOST.ct_status)

    @property
    def ct_stopped(self) -> bool:
        """The container exists but is not running: facts from inside it are unknown until it starts."""
        state = self.ct_state
        return state is not None and state != "running" and not self.ct_running

    @property
    def count(self) -> int:
        """How many facts have been read (host and container)."""
        return len(self.host) + len(self.ct)

    @overload
    def get(self, fact: HostFact[T]) -> T: ...

    @overload
    def get(self, fact: CtFact[T]) -> T | None: ...

    def get(self, fact: HostFact[T] | CtFact[T]) -> T | None:
        """A host fact's parsed value (it must have been read: a step names it in `host_facts=`), or a
        container fact's (None while the container is not running)."""
        if isinstance(fact, HostFact):
            return fact.parse(self.host[fact.name])
        out = self.ct.get(fact.name)
        return fact.parse(out) if out is not None else None

    def failed_read(self, fact: Fact[Any]) -> str | None:
        """What a fact's command said when this run read it and it failed (exited non-zero or printed nothing);
        None when it was not read, or read fine. For a step that must say a check could not be read."""
        out = (self.host if isinstance(fact, HostFact) else self.ct).get(fact.name)
        if out is None or (out.rc == 0 and out.stdout.strip()):
            return None
        said = (out.stderr or out.stdout).strip()
        return f"exit {out.rc}" + (f": {said[-300:]}" if said else "") if out.rc else "it printed nothing"

    def find(self, fact: Fact[T]) -> T | None:
        """Like `get`, but None for a fact this run did not read (code shared by steps that read different sets)."""
        out = (self.host if isinstance(fact, HostFact) else self.ct).get(fact.name)
        return fact.parse(out) if out is not None else None
